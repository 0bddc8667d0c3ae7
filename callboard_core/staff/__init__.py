"""The staff console's work on other aggregates (the /admin routes): `users` (list, detail with SUPPORT's
redacted view, role, status, soft delete, key reset, the mirror view). Every change is authorized by a
permission (security/permissions.py), audited in its own transaction (`audit.by`) with before and after,
and done through the owning aggregate's functions.
"""
