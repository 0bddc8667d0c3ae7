"""The owner's buyer profile: billing settings (spend caps, auto top-up) and the balance read from the ledger.

`models` holds the one-per-user `BuyerProfile` (settings only: money figures always come from
`ledger.service.balances`, never from this row), `schemas` the BuyerBalance wire model and the bodies,
`service` the reads and the settings changes. Who sees what: always the acting owner's own profile (a
signed-in owner's, or the owner of the API key's agent); there is no way to name another owner's.
"""
