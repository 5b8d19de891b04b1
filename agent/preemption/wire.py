"""What crosses the wire between the metadata client and a cloud's provider: the errors a read can
end in and the session-token scheme. Both sides import it; neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass


class MetadataError(Exception):
    """A read that gave no usable answer. ``outcome`` (a ``RequestOutcome``) is the label counted in
    ``training_node_metadata_requests_total``."""

    def __init__(self, outcome: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status = status


class BodyFormatError(ValueError):
    """A response body that is not what the path serves (garbage, truncated JSON, wrong shape)."""


@dataclass(frozen=True)
class TokenScheme:
    """Session tokens: PUT ``path`` with ``ttl_header`` returns a token sent as ``token_header``
    (AWS IMDSv2, Alibaba hardened mode)."""

    path: str
    ttl_header: str
    token_header: str
