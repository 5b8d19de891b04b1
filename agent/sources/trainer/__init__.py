"""What the training process says of its own pauses (``tna_client``'s spans in its step reports)."""
