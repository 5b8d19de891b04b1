"""Goodput ledger: every GPU-second of the node in one bucket, priced."""
