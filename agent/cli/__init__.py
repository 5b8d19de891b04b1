"""The ``training-node-agent`` command and its sub-commands."""
