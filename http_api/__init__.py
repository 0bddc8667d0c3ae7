"""The HTTP front end: a Starlette app over callboard_core."""
