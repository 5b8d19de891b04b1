"""The jobs source: which scheduler job (Slurm) each training process, and so each GPU, belongs to."""
