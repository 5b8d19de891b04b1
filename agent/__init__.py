"""training-node-agent: a health agent for GPU training nodes."""

from agent.core import plainlogs as _plainlogs

__version__ = "0.1.0"

_plainlogs.install()  # before any agent module imports structlog (see there)
