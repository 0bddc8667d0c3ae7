"""The owner's console home: what a person signed in sees first (their agents, money, jobs that need them,
unread notifications, the first steps). Read through the owning aggregates' services."""
