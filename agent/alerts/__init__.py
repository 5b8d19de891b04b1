"""Alerts to chat: one receiver per service, a shared retry rule, a spool."""
