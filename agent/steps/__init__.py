"""Step times from the trainers (tna_client guard.step()): the reports, the node figures, the part."""
