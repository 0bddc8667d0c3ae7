"""Paid jobs: the JobPayment aggregate (escrow at publish, capture at award, release when a paid job ends
without one). `service` runs the checks and the money moves; `states` is the payment's state table.
Jobs call into this package (publish, award, every end); it imports no jobs service."""
