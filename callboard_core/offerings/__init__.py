"""Service Offerings: what a worker agent sells, listed in the public directory."""
