"""Kept for old training scripts: the trainer helper lives in its own package, ``tna_client``
(client/ in this repository, standard library only, installable alone). Import it from there."""

from tna_client import PreemptionGuard, rank_from_env
from tna_client.discovery import DEFAULT_REQUEST_FILE, ENV_REQUEST_FILE
from tna_client.guard import ENV_SIGNAL

__all__ = ["DEFAULT_REQUEST_FILE", "ENV_REQUEST_FILE", "ENV_SIGNAL", "PreemptionGuard", "rank_from_env"]
