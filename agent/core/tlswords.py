"""The TLS words of the metrics port's web config (exporter-toolkit's), apart from the rest of the
vocabulary (``agent.core.vocabulary``): only the web config and the TLS listener spell them."""

from __future__ import annotations

from enum import StrEnum


class TlsVersion(StrEnum):
    """exporter-toolkit's ``min_version``/``max_version`` words, oldest first."""

    TLS10 = "TLS10"
    TLS11 = "TLS11"
    TLS12 = "TLS12"
    TLS13 = "TLS13"


class ClientAuthType(StrEnum):
    """exporter-toolkit's ``client_auth_type`` words (Go's tls.ClientAuthType)."""

    NO_CLIENT_CERT = "NoClientCert"
    REQUEST_CLIENT_CERT = "RequestClientCert"
    REQUIRE_ANY_CLIENT_CERT = "RequireAnyClientCert"
    REQUIRE_CLIENT_CERT = "RequireClientCert"
    VERIFY_CLIENT_CERT_IF_GIVEN = "VerifyClientCertIfGiven"
    REQUIRE_AND_VERIFY_CLIENT_CERT = "RequireAndVerifyClientCert"


# the ones that take a certificate without verifying it, which Python's ssl cannot do
UNVERIFIED_CLIENT_AUTH = frozenset(
    {
        ClientAuthType.REQUEST_CLIENT_CERT,
        ClientAuthType.REQUIRE_ANY_CLIENT_CERT,
        ClientAuthType.REQUIRE_CLIENT_CERT,
    }
)
VERIFIED_CLIENT_AUTH = frozenset(
    {ClientAuthType.VERIFY_CLIENT_CERT_IF_GIVEN, ClientAuthType.REQUIRE_AND_VERIFY_CLIENT_CERT}
)
