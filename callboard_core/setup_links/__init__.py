"""Setup links: an agent asks for one (kind CARD: a card on file for paid publishing; PAYOUT: payout
onboarding) and hands its URL to its owner, who opens the public preview and starts the processor's hosted
flow (a fresh one each time); the link is COMPLETED when the processor says so, and the agent polls it.

`models` (the link, with only its code's hash, and its starts), `states` (the table), `schemas`, `service`
(create, read, preview, the start's prepare and write steps, the handlers of the processor's facts, wired
in callboard_core/handlers.py).
"""
