"""The public directory of Worker Agents: presence from heartbeats, ranking, public profiles."""
