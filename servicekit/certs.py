"""A private CA and the certificates numaguard's services present to each other.

The apiserver verifies the webhook's serving certificate against the
``caBundle`` of the webhook configurations; the webhook calls the enforcers over
mutual TLS (it presents a client certificate whose CN is its identity, and
verifies the enforcer's serving certificate); operators reach the enforcer API
with their own client certificate.  One CA signs all of it, so one ``ca.crt``
is the whole trust configuration.

Bundle layout written by :func:`issue_bundle` (every file mode 0600)::

    ca.crt, ca.key                            the CA; ca.crt is the caBundle and both services' trust anchor
    webhook.crt, webhook.key                  serving: numaguard-webhook[.<ns>[.svc[.cluster.local]]],
                                              localhost, 127.0.0.1
    webhook-client.crt, webhook-client.key    client (clientAuth), CN=numaguard-webhook: the webhook calling enforcers
    enforcer.crt, enforcer.key                serving: numaguard-enforcer[.<ns>[.svc[.cluster.local]]],
                                              localhost, 127.0.0.1, plus every --enforcer-host name or IP
    operator-client.crt, operator-client.key  client (clientAuth), CN=numaguard-operator: humans and the CLI
    metrics-client.crt, metrics-client.key    client (clientAuth), CN=numaguard-metrics: Prometheus (read-only)

The enforcer gives each client identity a role (``enforcer/service/auth.py``):
the webhook's may only allocate, release and resize, the operator's may do
everything, the metrics identity may only read.

Files are created with mode 0600 from the start (``os.open``), never chmod-ed
afterwards, and replaced atomically (write a sibling, then ``os.replace``) so a
service watching them for reload never reads half a certificate.

This module only issues and writes; it must not build SSL contexts (``tls``)
or know which service uses which file beyond the names above.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

WEBHOOK_SERVICE = "numaguard-webhook"
ENFORCER_SERVICE = "numaguard-enforcer"
WEBHOOK_CLIENT_IDENTITY = "numaguard-webhook"
OPERATOR_CLIENT_IDENTITY = "numaguard-operator"
METRICS_CLIENT_IDENTITY = "numaguard-metrics"
DEFAULT_NAMESPACE = "numaguard"
DEFAULT_VALIDITY = datetime.timedelta(days=365)
CA_VALIDITY = datetime.timedelta(days=3650)
LOCAL_NAMES: tuple[str, ...] = ("localhost",)
LOCAL_IPS: tuple[str, ...] = ("127.0.0.1",)
# Clocks of the apiserver and the nodes may trail ours a little; a certificate
# that is "not yet valid" for a minute breaks every admission call.
CLOCK_SKEW = datetime.timedelta(minutes=5)

BUNDLE_FILES: Mapping[str, tuple[str, str]] = {
    "ca": ("ca.crt", "ca.key"),
    "webhook": ("webhook.crt", "webhook.key"),
    "webhook-client": ("webhook-client.crt", "webhook-client.key"),
    "enforcer": ("enforcer.crt", "enforcer.key"),
    "operator-client": ("operator-client.crt", "operator-client.key"),
    "metrics-client": ("metrics-client.crt", "metrics-client.key"),
}


class CertificateError(Exception):
    """An existing certificate or key cannot be read, or a request for one is impossible."""


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate with its private key (kept together so a pair can never be mismatched)."""

    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def private_key_pem(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def common_name(self) -> str:
        names = self.certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(names[0].value) if names else ""


@dataclass(frozen=True)
class Validity:
    """When a certificate is valid; explicit bounds (even in the past) exist for tests of expired certificates."""

    days: float | None = None
    not_before: datetime.datetime | None = None
    not_after: datetime.datetime | None = None

    def bounds(self, default: datetime.timedelta) -> tuple[datetime.datetime, datetime.datetime]:
        now = datetime.datetime.now(datetime.UTC)
        start = self.not_before if self.not_before is not None else now - CLOCK_SKEW
        if self.not_after is not None:
            end = self.not_after
        else:
            end = now + (datetime.timedelta(days=self.days) if self.days is not None else default)
        if end <= start:
            raise CertificateError(f"certificate validity is empty: not_after {end} is not after not_before {start}")
        return start, end


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: small, fast handshakes, accepted by every TLS stack the apiserver and httpx use.
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "numaguard"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def create_ca(common_name: str = "numaguard-ca", *, validity: Validity | None = None) -> IssuedCertificate:
    """A self-signed CA allowed to sign leaf certificates only (path length 0)."""
    key = _new_key()
    start, end = (validity or Validity()).bounds(CA_VALIDITY)
    subject = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return IssuedCertificate(cert, key)


def _leaf(
    ca: IssuedCertificate,
    common_name: str,
    *,
    usage: x509.ObjectIdentifier,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    validity: Validity | None,
) -> IssuedCertificate:
    key = _new_key()
    start, end = (validity or Validity()).bounds(DEFAULT_VALIDITY)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(dns_names)]
    for raw in dict.fromkeys(ip_addresses):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(raw)))
        except ValueError:
            raise CertificateError(f"not an IP address: {raw!r}") from None
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.private_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return IssuedCertificate(builder.sign(ca.private_key, hashes.SHA256()), key)


def issue_serving_certificate(
    ca: IssuedCertificate,
    common_name: str,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    validity: Validity | None = None,
) -> IssuedCertificate:
    """A TLS server certificate (serverAuth); clients match hostnames against its SANs only, never the CN."""
    if not dns_names and not ip_addresses:
        raise CertificateError("a serving certificate needs at least one DNS name or IP address")
    return _leaf(
        ca,
        common_name,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        validity=validity,
    )


def issue_client_certificate(
    ca: IssuedCertificate, identity: str, *, validity: Validity | None = None
) -> IssuedCertificate:
    """A TLS client certificate (clientAuth) whose CN is the caller's identity, as the enforcer checks it."""
    if not identity:
        raise CertificateError("a client certificate needs an identity (its common name)")
    return _leaf(ca, identity, usage=ExtendedKeyUsageOID.CLIENT_AUTH, dns_names=(), ip_addresses=(), validity=validity)


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """Every name a client inside the cluster may use for a Service (the apiserver uses ``<svc>.<ns>.svc``)."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


# -- files ------------------------------------------------------------------------


def write_private_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 from creation on, replacing any old file atomically."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_pair(issued: IssuedCertificate, cert_path: Path, key_path: Path) -> None:
    """Write the key first: a watcher that sees the new certificate can then always find its key."""
    write_private_file(key_path, issued.private_key_pem())
    write_private_file(cert_path, issued.certificate_pem())


def load_pair(cert_path: Path, key_path: Path) -> IssuedCertificate:
    """Read a certificate and its EC private key, refusing a pair whose keys do not match."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError) as err:
        raise CertificateError(f"cannot read {cert_path} / {key_path}: {err}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{key_path}: expected an EC private key")
    if cert.public_key() != key.public_key():
        raise CertificateError(f"{cert_path} and {key_path} do not belong together")
    return IssuedCertificate(cert, key)


@dataclass(frozen=True)
class Bundle:
    """The files of an issued bundle, by role (see the module docstring for the layout)."""

    directory: Path
    created_ca: bool

    def cert(self, role: str) -> Path:
        return self.directory / BUNDLE_FILES[role][0]

    def key(self, role: str) -> Path:
        return self.directory / BUNDLE_FILES[role][1]

    def files(self) -> list[Path]:
        return [self.directory / name for pair in BUNDLE_FILES.values() for name in pair]


def _split_hosts(hosts: Iterable[str]) -> tuple[list[str], list[str]]:
    names: list[str] = []
    ips: list[str] = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            names.append(host)
        else:
            ips.append(host)
    return names, ips


def issue_bundle(
    out_dir: str | Path,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    enforcer_hosts: Sequence[str] = (),
    validity: Validity | None = None,
    reuse_ca: bool = True,
) -> Bundle:
    """Write the whole certificate set into ``out_dir``.

    With ``reuse_ca`` an existing ``ca.crt``/``ca.key`` pair signs the new leaf
    certificates, so re-running rotates leaves without redistributing the
    caBundle; a missing or unreadable pair is replaced by a new CA.
    ``enforcer_hosts`` are DNS names or IP addresses added to the enforcer's
    serving certificate (compose service names, node names, node IPs).
    """
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    bundle = Bundle(directory, created_ca=False)
    ca: IssuedCertificate | None = None
    if reuse_ca and bundle.cert("ca").exists() and bundle.key("ca").exists():
        ca = load_pair(bundle.cert("ca"), bundle.key("ca"))
    if ca is None:
        ca = create_ca()
        write_pair(ca, bundle.cert("ca"), bundle.key("ca"))
        bundle = Bundle(directory, created_ca=True)

    webhook = issue_serving_certificate(
        ca,
        WEBHOOK_SERVICE,
        dns_names=(*service_dns_names(WEBHOOK_SERVICE, namespace), *LOCAL_NAMES),
        ip_addresses=LOCAL_IPS,
        validity=validity,
    )
    extra_names, extra_ips = _split_hosts(enforcer_hosts)
    enforcer = issue_serving_certificate(
        ca,
        ENFORCER_SERVICE,
        dns_names=(*service_dns_names(ENFORCER_SERVICE, namespace), *LOCAL_NAMES, *extra_names),
        ip_addresses=(*LOCAL_IPS, *extra_ips),
        validity=validity,
    )
    leaves = {
        "webhook": webhook,
        "webhook-client": issue_client_certificate(ca, WEBHOOK_CLIENT_IDENTITY, validity=validity),
        "enforcer": enforcer,
        "operator-client": issue_client_certificate(ca, OPERATOR_CLIENT_IDENTITY, validity=validity),
        "metrics-client": issue_client_certificate(ca, METRICS_CLIENT_IDENTITY, validity=validity),
    }
    for role, issued in leaves.items():
        write_pair(issued, bundle.cert(role), bundle.key(role))
    return bundle
