"""Who may call the enforcer: client certificates for changes, certificates or a bearer token for reads.

The TLS handshake has already verified any client certificate against the
configured CA (``servicekit.tls`` serves with ``CERT_OPTIONAL``), so a peer
certificate here is one our CA vouches for.  The rules:

=================  =====================  ==========================  ==============
call               verified certificate   ``Authorization: Bearer``   nothing
=================  =====================  ==========================  ==============
read               allowed                allowed if it matches       401
state-changing     allowed                403                         401
=================  =====================  ==========================  ==============

A wrong token, or any other ``Authorization`` scheme, is 403: the caller
presented credentials and they are not good enough.  Tokens are compared in
constant time; the token file is re-read when it changes (rotation without a
restart) and its content is never logged.

Framework-free: ``deps`` hands in the peer certificate and the header.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from enforcer.service.errors import ServiceError
from servicekit.tls import PeerCertificate

log = logging.getLogger(__name__)

Access = Literal["read", "write"]
BEARER = "bearer"


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

    def __init__(self, token_file: TokenFile | None = None) -> None:
        self.token_file = token_file

    def authorize(self, access: Access, *, peer: PeerCertificate | None, authorization: str | None) -> Caller:
        if peer is not None:
            return Caller("certificate", peer["common_name"] or peer["serial_number"])
        if not authorization:
            raise AuthenticationRequired(
                "this call needs a client certificate signed by the enforcer's CA"
                + (" or a bearer token" if access == "read" else "")
            )
        if access == "write":
            raise AccessDenied("state-changing calls need a client certificate signed by the enforcer's CA")
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != BEARER or not credentials.strip():
            raise AccessDenied("only bearer tokens are accepted in the Authorization header")
        if self.token_file is None or not self.token_file.matches(credentials.strip()):
            raise AccessDenied("the bearer token is not valid")
        return Caller("token", "token")
