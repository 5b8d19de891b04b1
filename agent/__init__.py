"""training-node-agent: a health agent for GPU training nodes."""

__version__ = "0.1.0"
