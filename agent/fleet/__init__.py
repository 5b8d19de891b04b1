"""What the agent learns from the fleet: the node that sets its job's pace (optional)."""
