"""Who may call the enforcer: named client certificates by role, or a bearer token for reads.

The TLS handshake has already verified any client certificate against the
configured CA (``servicekit.tls`` serves with ``CERT_OPTIONAL``).  Being
signed by the CA is not enough: the certificate must carry the clientAuth
extended key usage, and its identity (CN) must be one of the configured
identities, each with a role:

=============  ===================================  =======================================
role           default identity (CN)                may
=============  ===================================  =======================================
``webhook``    ``numaguard-webhook``                allocate, release, resize (writes only)
``operator``   ``numaguard-operator``               everything
``reader``     ``numaguard-metrics``                reads only (metrics, allocations, topology)
=============  ===================================  =======================================

So the Prometheus scrape identity cannot allocate, the webhook's key cannot
be used to read every pod's allocation, and the enforcer's own serving
certificate (serverAuth only), signed by the same CA, is no client at all.

=================  ==========================  ==========================  ==============
call               certificate of a role that  ``Authorization: Bearer``   nothing
                   may make it
=================  ==========================  ==========================  ==============
read               allowed                     allowed if it matches       401
state-changing     allowed                     403                         401
=================  ==========================  ==========================  ==============

Any other certificate (no clientAuth, unknown identity, a role that may not)
is 403.  A wrong token, or any other ``Authorization`` scheme, is 403: the
caller presented credentials and they are not good enough.  Tokens are
compared in constant time; the token file is re-read when it changes (rotation
without a restart) and its content is never logged.

Framework-free: ``deps`` hands in the peer certificate and the header.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from enforcer.service.errors import ServiceError
from enforcer.service.settings import DEFAULT_CLIENT_IDENTITIES, ClientRole
from servicekit.tls import CLIENT_AUTH_USAGE, PeerCertificate

log = logging.getLogger(__name__)

Access = Literal["read", "write"]
Role = ClientRole
BEARER = "bearer"

ROLE_ACCESS: Mapping[Role, frozenset[Access]] = {
    "webhook": frozenset({"write"}),
    "operator": frozenset({"read", "write"}),
    "reader": frozenset({"read"}),
}
# The identities `numaguard certs` issues (servicekit.certs) and the cert-manager component requests.
DEFAULT_IDENTITIES: Mapping[str, Role] = DEFAULT_CLIENT_IDENTITIES


class AuthenticationRequired(ServiceError):
    """No credentials at all (HTTP 401)."""

    reason = "Unauthorized"


class AccessDenied(ServiceError):
    """Credentials were presented but do not allow this call (HTTP 403)."""

    reason = "Forbidden"


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated client: how it proved itself and its name (certificate CN; ``token`` for tokens)."""

    method: Literal["certificate", "token"]
    name: str
    role: Role = "reader"


class TokenFile:
    """The bearer token in a file (surrounding whitespace ignored), re-read whenever the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._token: bytes | None = None

    def current(self) -> bytes | None:
        """The token, or None when the file is missing, unreadable or empty (then no token is accepted)."""
        try:
            info = os.stat(self.path)
        except OSError as err:
            log.warning("token file unreadable", extra={"path": str(self.path), "error": err.strerror})
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        with self._lock:
            if stamp != self._stamp:
                try:
                    token = self.path.read_bytes().strip()
                except OSError as err:
                    log.warning("token file unreadable", extra={"path": str(self.path), "error": err.strerror})
                    return None
                self._token, self._stamp = (token or None), stamp
            return self._token

    def matches(self, candidate: str) -> bool:
        token = self.current()
        return token is not None and hmac.compare_digest(candidate.encode("utf-8", "surrogateescape"), token)


class Authenticator:
    """Applies the table in the module docstring."""

    def __init__(self, token_file: TokenFile | None = None, identities: Mapping[str, Role] | None = None) -> None:
        self.token_file = token_file
        self.identities: Mapping[str, Role] = dict(DEFAULT_IDENTITIES if identities is None else identities)

    def authorize(self, access: Access, *, peer: PeerCertificate | None, authorization: str | None) -> Caller:
        if peer is not None:
            return self._certificate_caller(access, peer)
        if not authorization:
            raise AuthenticationRequired(
                "this call needs a client certificate signed by the enforcer's CA"
                + (" or a bearer token" if access == "read" else "")
            )
        if access == "write":
            raise AccessDenied("state-changing calls need a client certificate of an identity allowed to write")
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != BEARER or not credentials.strip():
            raise AccessDenied("only bearer tokens are accepted in the Authorization header")
        if self.token_file is None or not self.token_file.matches(credentials.strip()):
            raise AccessDenied("the bearer token is not valid")
        return Caller("token", "token", "reader")

    def _certificate_caller(self, access: Access, peer: PeerCertificate) -> Caller:
        name = peer["common_name"] or ""
        if CLIENT_AUTH_USAGE not in peer.get("extended_key_usages", ()):
            raise AccessDenied(f"the client certificate {name!r} is not issued for client authentication (clientAuth)")
        role = self.identities.get(name)
        if role is None:
            raise AccessDenied(f"the client certificate identity {name!r} is not allowed to call this enforcer")
        if access not in ROLE_ACCESS[role]:
            what = "state-changing calls" if access == "write" else "reads"
            raise AccessDenied(f"identity {name!r} (role {role}) may not make {what}")
        return Caller("certificate", name, role)
