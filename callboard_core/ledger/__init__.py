"""The double-entry ledger: every movement of money is one balanced transaction of immutable entries."""
