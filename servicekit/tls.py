"""SSL contexts for numaguard's servers and clients, certificate hot reload, and the verified peer.

Servers verify client certificates with ``CERT_OPTIONAL``: a client without a
certificate still completes the handshake (read endpoints may accept a bearer
token instead), a client *with* a certificate must present one that chains to
our CA and is in date, or the handshake fails.  Which endpoints insist on a
certificate is the app's decision, made with :func:`peer_certificate`.

Reload without restart: OpenSSL copies the certificate and key from the
``SSL_CTX`` into each connection when the connection is created, so calling
``load_cert_chain`` on the live context changes what every *new* handshake
presents while open connections keep theirs.  :class:`ReloadingServerContext`
does exactly that when the files change, after proving the new pair loads in a
scratch context (a failed load half-way through would otherwise leave the live
context with a certificate and no key).  A rotated CA is added to the trust
store; OpenSSL offers no way to remove one, so dropping trust in an old CA takes
a restart.

This module must not import uvicorn or any web framework: :mod:`servicekit.serve`
puts the TLS facts into the ASGI scope, this module only reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

# Forward secrecy and AEAD only for TLS 1.2; TLS 1.3 suites are all modern and not affected by set_ciphers.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# The ASGI TLS extension (asgiref "TLS" spec) plus our own parsed view of the peer certificate.
SCOPE_TLS_EXTENSION = "tls"
SCOPE_PEER_EXTENSION = "numaguard.peer_certificate"

log = logging.getLogger("servicekit.tls")


class TLSConfigError(Exception):
    """Certificate, key or CA files cannot be loaded into an SSL context."""


@dataclass(frozen=True)
class TLSFiles:
    """Where a service's certificate chain, private key and (for peer verification) CA live."""

    cert: Path
    key: Path
    ca: Path | None = None

    @classmethod
    def in_directory(cls, directory: str | Path, name: str, *, ca: str | None = "ca.crt") -> TLSFiles:
        """``<dir>/<name>.crt`` + ``<dir>/<name>.key`` (+ ``<dir>/ca.crt``): the layout of ``certs.issue_bundle``."""
        base = Path(directory)
        return cls(base / f"{name}.crt", base / f"{name}.key", base / ca if ca else None)


def _harden(ctx: ssl.SSLContext) -> None:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    ctx.set_ciphers(TLS12_CIPHERS)


def _load_chain(ctx: ssl.SSLContext, cert: Path, key: Path) -> None:
    try:
        ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"cannot load certificate {cert} with key {key}: {err}") from None


def _load_ca(ctx: ssl.SSLContext, ca: Path) -> None:
    try:
        ctx.load_verify_locations(cafile=str(ca))
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"cannot load CA certificates from {ca}: {err}") from None


def server_context(files: TLSFiles, *, require_client_cert: bool = False) -> ssl.SSLContext:
    """A TLS 1.2+ server context; with ``files.ca`` client certificates are verified (optional unless required)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _harden(ctx)
    _load_chain(ctx, files.cert, files.key)
    if files.ca is not None:
        _load_ca(ctx, files.ca)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    elif require_client_cert:
        raise TLSConfigError("requiring client certificates needs a CA to verify them against")
    return ctx


def client_context(ca: str | Path, *, cert: str | Path | None = None, key: str | Path | None = None) -> ssl.SSLContext:
    """A client context (for ``httpx.Client(verify=...)``) trusting only ``ca``, presenting ``cert`` when given.

    Hostname checking stays on: a caller that dials an address the certificate
    does not name (a node IP) sets the name to check with httpx's
    ``extensions={"sni_hostname": "numaguard-enforcer.<ns>.svc"}``.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies and checks hostnames; no system CAs loaded
    _harden(ctx)
    _load_ca(ctx, Path(ca))
    if cert is not None:
        _load_chain(ctx, Path(cert), Path(key) if key is not None else Path(cert))
    return ctx


# -- reload --------------------------------------------------------------------------


@dataclass(frozen=True)
class _FileState:
    stat: tuple[int, int, int]  # inode, mtime, size: an atomic replace always changes the inode
    sha256: str


def _stat(path: Path) -> tuple[int, int, int]:
    st = path.stat()  # follows symlinks: a Kubernetes Secret volume swaps a ..data symlink
    return st.st_ino, st.st_mtime_ns, st.st_size


def _read_state(path: Path) -> tuple[_FileState, bytes]:
    # stat before reading: if the file is replaced in between, the recorded stat is the old one and the
    # next check reads again; the other order could pair the new stat with old bytes and miss the update.
    stat = _stat(path)
    data = path.read_bytes()
    return _FileState(stat, hashlib.sha256(data).hexdigest()), data


class ReloadingServerContext:
    """A server SSL context that picks up new certificate, key and CA files without a restart.

    ``check()`` is cheap when nothing changed (two or three ``stat`` calls:
    inode, mtime and size; content hashes decide only once those moved) and
    is meant to run on the server's event loop, where handshakes also run, so a
    reload never interleaves with one.  Use :meth:`watch` / :meth:`watching`
    from an app lifespan, or let :func:`servicekit.serve.serve` run it.
    """

    def __init__(self, files: TLSFiles, *, require_client_cert: bool = False) -> None:
        self.files = files
        self.context = server_context(files, require_client_cert=require_client_cert)
        self.reloads = 0
        self._require_client_cert = require_client_cert
        self._loaded: dict[Path, _FileState] = {}
        self._failed: tuple[str, ...] | None = None
        for path in self._paths():
            self._loaded[path] = _read_state(path)[0]

    def _paths(self) -> tuple[Path, ...]:
        paths = (self.files.cert, self.files.key)
        return paths if self.files.ca is None else (*paths, self.files.ca)

    def _changed(self) -> bool:
        for path in self._paths():
            seen = self._loaded.get(path)
            try:
                current = _stat(path)
            except OSError:
                return True
            if seen is None or seen.stat != current:
                return True
        return False

    def check(self) -> bool:
        """Reload if any file changed in content; True when a new chain (or CA) was loaded.

        A pair that does not load (mismatched key, half-written update) is
        logged once and retried on later checks; the context keeps serving the
        previous certificate meanwhile.
        """
        if not self._changed():
            return False
        try:
            states: dict[Path, tuple[_FileState, bytes]] = {p: _read_state(p) for p in self._paths()}
        except OSError as err:
            self._report_failure((str(err),), f"cannot read TLS files: {err}")
            return False
        fingerprint = tuple(state.sha256 for state, _ in states.values())
        chain_changed = any(states[p][0].sha256 != self._loaded[p].sha256 for p in (self.files.cert, self.files.key))
        ca = self.files.ca
        ca_changed = ca is not None and states[ca][0].sha256 != self._loaded[ca].sha256
        if not chain_changed and not ca_changed:
            self._loaded = {p: s for p, (s, _) in states.items()}  # touched, not changed
            return False
        try:
            self._apply(states, chain_changed=chain_changed, ca_changed=ca_changed)
        except TLSConfigError as err:
            self._report_failure(fingerprint, str(err))
            return False
        self._loaded = {p: s for p, (s, _) in states.items()}
        self._failed = None
        self.reloads += 1
        log.info(
            "tls certificates reloaded",
            extra={"cert": str(self.files.cert), "chain_changed": chain_changed, "ca_changed": ca_changed},
        )
        return True

    def _apply(self, states: Mapping[Path, tuple[_FileState, bytes]], *, chain_changed: bool, ca_changed: bool) -> None:
        # Load the very bytes we hashed, from private copies: the watched files may change again meanwhile.
        with tempfile.TemporaryDirectory(prefix="numaguard-tls-") as tmp:
            copies: dict[Path, Path] = {}
            for index, (path, (_, data)) in enumerate(states.items()):
                copy = Path(tmp) / f"{index}.pem"
                fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                copies[path] = copy
            cert, key = copies[self.files.cert], copies[self.files.key]
            ca = copies.get(self.files.ca) if self.files.ca is not None else None
            scratch = server_context(TLSFiles(cert, key, ca), require_client_cert=self._require_client_cert)
            del scratch  # it proved the pair and the CA load; the live context gets the same bytes
            if ca_changed and ca is not None:
                _load_ca(self.context, ca)
            if chain_changed:
                _load_chain(self.context, cert, key)

    def _report_failure(self, fingerprint: tuple[str, ...], message: str) -> None:
        if self._failed != fingerprint:
            log.warning("tls reload failed, keeping the previous certificate", extra={"error": message})
        self._failed = fingerprint

    async def watch(self, interval: float, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Check every ``interval`` seconds until cancelled (``sleep`` is the clock; tests pass their own)."""
        while True:
            await sleep(interval)
            self.check()

    @contextlib.asynccontextmanager
    async def watching(self, interval: float) -> AsyncIterator[ReloadingServerContext]:
        """Run :meth:`watch` for the duration of the block (an app lifespan)."""
        task = asyncio.create_task(self.watch(interval), name="tls-certificate-reload")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# -- the verified peer -------------------------------------------------------------------


CLIENT_AUTH_USAGE = "1.3.6.1.5.5.7.3.2"  # id-kp-clientAuth (RFC 5280 4.2.1.12)
SERVER_AUTH_USAGE = "1.3.6.1.5.5.7.3.1"  # id-kp-serverAuth


class PeerCertificate(TypedDict):
    """The verified client certificate of a connection, in plain values.

    ``extended_key_usages`` are dotted OIDs (:data:`CLIENT_AUTH_USAGE`...), read from the certificate itself
    (``getpeercert()`` does not report them); empty when it has no extendedKeyUsage extension.
    """

    common_name: str | None
    subject: dict[str, str]
    issuer: dict[str, str]
    serial_number: str
    not_before: str
    not_after: str
    dns_names: list[str]
    extended_key_usages: NotRequired[list[str]]


def extended_key_usages(der: bytes | None) -> list[str]:
    """The extendedKeyUsage OIDs of a DER certificate; empty without the extension (or without a certificate)."""
    if not der:
        return []
    from cryptography import x509  # only servers that check peers pay for the import

    try:
        usage = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    except x509.ExtensionNotFound:
        return []
    except ValueError:  # not parseable by cryptography although OpenSSL verified it: grant no usage
        return []
    return [oid.dotted_string for oid in usage.value]


def _flatten_name(rdns: object) -> dict[str, str]:
    # ssl.getpeercert() gives ((("commonName", "x"),), (("organizationName", "y"),))
    out: dict[str, str] = {}
    if isinstance(rdns, Sequence):
        for rdn in rdns:
            if isinstance(rdn, Sequence):
                for pair in rdn:
                    if isinstance(pair, Sequence) and len(pair) == 2:
                        out[str(pair[0])] = str(pair[1])
    return out


def describe_peer(peercert: Mapping[str, Any] | None, der: bytes | None = None) -> PeerCertificate | None:
    """Turn ``SSLObject.getpeercert()`` (only ever a *verified* certificate) into a :class:`PeerCertificate`.

    ``der`` (``getpeercert(binary_form=True)``) adds the extended key usages.
    """
    if not peercert:
        return None
    subject = _flatten_name(peercert.get("subject", ()))
    sans = peercert.get("subjectAltName", ())
    return PeerCertificate(
        common_name=subject.get("commonName"),
        subject=subject,
        issuer=_flatten_name(peercert.get("issuer", ())),
        serial_number=str(peercert.get("serialNumber", "")),
        not_before=str(peercert.get("notBefore", "")),
        not_after=str(peercert.get("notAfter", "")),
        dns_names=[str(value) for kind, value in sans if kind == "DNS"],
        extended_key_usages=extended_key_usages(der),
    )


def peer_certificate(scope: Mapping[str, Any]) -> PeerCertificate | None:
    """The verified client certificate of the request's connection, or None (no certificate, or plain HTTP).

    Works on any ASGI scope served by :mod:`servicekit.serve` (Starlette's
    ``request.scope``); the handshake already rejected unverifiable
    certificates, so a non-None answer is a peer our CA vouches for.
    """
    extensions = scope.get("extensions")
    if not isinstance(extensions, Mapping):
        return None
    peer = extensions.get(SCOPE_PEER_EXTENSION)
    return peer if isinstance(peer, dict) else None  # type: ignore[return-value]
