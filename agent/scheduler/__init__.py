"""The scheduler action: what the agent knows (a notice, a lost GPU) told to the cluster's scheduler."""
