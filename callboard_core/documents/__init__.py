"""Commercial documents: numbered receipts, invoices and credit notes issued from the ledger.

`models` holds the immutable `CommercialDocument` and the per-(kind, year) numbering counters, `numbering`
allocates gapless numbers, `issue` turns a new ledger transaction into its documents (`issue.on_posted`
hears `LedgerPosted` on the bus: no other package calls this one), `events` what it publishes,
`service` the owner's reads (list with a cursor, get one), `schemas` the wire models.
"""
