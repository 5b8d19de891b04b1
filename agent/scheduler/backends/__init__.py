"""The cluster schedulers the agent can drain a node in: one module each, found by walking this package
(``agent/scheduler/backend.py``)."""
