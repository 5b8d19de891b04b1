"""Checkpoint before reclaim: find the training processes, ask them to checkpoint safely, confirm the
ack, drill it. The daemon builds :class:`agent.checkpoint.component.CheckpointComponent`."""
