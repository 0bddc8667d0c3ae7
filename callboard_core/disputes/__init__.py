"""Disputes: a party of a job opens one, staff settle it (never the parties); while it is open the job's money
is frozen. See service.py."""
