"""training-node-agent's client: the training-script side of the checkpoint handshake.

Standard library only, installable alone into a training environment
(``pip install ./client`` from the agent's source tree)::

    from tna_client import PreemptionGuard, fsync_tree

The framework integrations import their framework on import and nothing else of ours:
:mod:`tna_client.lightning` (``AgentCheckpoint``), :mod:`tna_client.hf`
(``AgentCheckpointCallback``), :mod:`tna_client.torch_dist` (``DistributedCheckpoint`` for plain
PyTorch and accelerate).
"""

from tna_client.discovery import DEFAULT_REQUEST_FILE, ENV_REQUEST_FILE, Located, locate
from tna_client.files import fsync_tree
from tna_client.guard import ENV_SIGNAL, AckNotDelivered, PreemptionGuard, rank_from_env

__version__ = "0.2.0"

__all__ = [
    "DEFAULT_REQUEST_FILE",
    "ENV_REQUEST_FILE",
    "ENV_SIGNAL",
    "AckNotDelivered",
    "Located",
    "PreemptionGuard",
    "fsync_tree",
    "locate",
    "rank_from_env",
]
