"""The CA and the certificates of the bundle: chain, SANs, key usages, validity, file modes, the CLI."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from numaguard_cli import main as cli
from servicekit import certs

NOW = datetime.datetime.now(datetime.UTC)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(ext.get_values_for_type(x509.DNSName)), {str(ip) for ip in ext.get_values_for_type(x509.IPAddress)}


def eku(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def test_ca_is_a_self_signed_ca_that_may_only_sign_leaves(bundle: certs.Bundle) -> None:
    ca = load(bundle.cert("ca"))
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    ca.verify_directly_issued_by(ca)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert usage.key_cert_sign and usage.crl_sign


@pytest.mark.parametrize("role", ["webhook", "webhook-client", "enforcer", "operator-client"])
def test_every_leaf_is_signed_by_the_ca_and_is_not_a_ca(bundle: certs.Bundle, role: str) -> None:
    leaf = load(bundle.cert(role))
    leaf.verify_directly_issued_by(load(bundle.cert("ca")))
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


@pytest.mark.parametrize("role", ["ca", "webhook", "webhook-client", "enforcer", "operator-client"])
def test_every_key_matches_its_certificate(bundle: certs.Bundle, role: str) -> None:
    pair = certs.load_pair(bundle.cert(role), bundle.key(role))
    assert pair.certificate.public_key() == pair.private_key.public_key()


@dataclass(frozen=True)
class ServingCase:
    description: str
    namespace: str
    enforcer_hosts: tuple[str, ...]
    role: str
    expected_dns: frozenset[str]
    expected_ips: frozenset[str]


SERVING_CASES = [
    ServingCase(
        "webhook certificate names the Service in every form the apiserver may dial",
        "numaguard",
        (),
        "webhook",
        frozenset(
            {
                "numaguard-webhook",
                "numaguard-webhook.numaguard",
                "numaguard-webhook.numaguard.svc",
                "numaguard-webhook.numaguard.svc.cluster.local",
                "localhost",
            }
        ),
        frozenset({"127.0.0.1"}),
    ),
    ServingCase(
        "webhook certificate follows a custom namespace",
        "platform",
        (),
        "webhook",
        frozenset(
            {
                "numaguard-webhook",
                "numaguard-webhook.platform",
                "numaguard-webhook.platform.svc",
                "numaguard-webhook.platform.svc.cluster.local",
                "localhost",
            }
        ),
        frozenset({"127.0.0.1"}),
    ),
    ServingCase(
        "enforcer certificate adds the given host names and IPs to the local ones",
        "numaguard",
        ("enforcer-a", "node-7.example", "10.1.2.3", "fd00::7"),
        "enforcer",
        frozenset(
            {
                "numaguard-enforcer",
                "numaguard-enforcer.numaguard",
                "numaguard-enforcer.numaguard.svc",
                "numaguard-enforcer.numaguard.svc.cluster.local",
                "localhost",
                "enforcer-a",
                "node-7.example",
            }
        ),
        frozenset({"127.0.0.1", "10.1.2.3", "fd00::7"}),
    ),
]


@pytest.mark.parametrize("case", SERVING_CASES, ids=lambda c: c.description)
def test_serving_certificate_sans(tmp_path: Path, case: ServingCase) -> None:
    bundle = certs.issue_bundle(tmp_path, namespace=case.namespace, enforcer_hosts=case.enforcer_hosts)
    cert = load(bundle.cert(case.role))
    assert sans(cert) == (set(case.expected_dns), {str(ipaddress.ip_address(ip)) for ip in case.expected_ips})
    assert eku(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]


@pytest.mark.parametrize(
    ("role", "identity"),
    [("webhook-client", "numaguard-webhook"), ("operator-client", "numaguard-operator")],
)
def test_client_certificates_carry_the_identity_as_cn_and_client_auth_only(
    bundle: certs.Bundle, role: str, identity: str
) -> None:
    cert = load(bundle.cert(role))
    assert common_name(cert) == identity
    assert eku(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_every_bundle_file_is_private_to_its_owner(bundle: certs.Bundle) -> None:
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in bundle.files()}
    assert modes == {path.name: 0o600 for path in bundle.files()}


def test_rewriting_a_world_readable_file_leaves_it_private(tmp_path: Path) -> None:
    target = tmp_path / "webhook.key"
    target.write_text("old")
    target.chmod(0o644)
    certs.write_private_file(target, b"new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["webhook.key"]


def test_reissuing_keeps_the_ca_and_rotates_the_leaves(tmp_path: Path) -> None:
    first = certs.issue_bundle(tmp_path)
    ca_before, leaf_before = first.cert("ca").read_bytes(), load(first.cert("webhook")).serial_number
    second = certs.issue_bundle(tmp_path)
    assert (first.created_ca, second.created_ca) == (True, False)
    assert second.cert("ca").read_bytes() == ca_before
    assert load(second.cert("webhook")).serial_number != leaf_before
    load(second.cert("webhook")).verify_directly_issued_by(load(second.cert("ca")))


def test_reissuing_without_reuse_creates_a_new_ca(tmp_path: Path) -> None:
    before = certs.issue_bundle(tmp_path).cert("ca").read_bytes()
    after = certs.issue_bundle(tmp_path, reuse_ca=False)
    assert after.created_ca and after.cert("ca").read_bytes() != before


def test_validity_defaults_to_a_year_starting_slightly_in_the_past(bundle: certs.Bundle) -> None:
    cert = load(bundle.cert("webhook"))
    assert cert.not_valid_before_utc < datetime.datetime.now(datetime.UTC)
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert datetime.timedelta(days=365) <= lifetime <= datetime.timedelta(days=365, minutes=10)


def test_explicit_bounds_in_the_past_make_an_expired_certificate() -> None:
    ca = certs.create_ca()
    old = certs.Validity(not_before=NOW - datetime.timedelta(days=30), not_after=NOW - datetime.timedelta(days=1))
    cert = certs.issue_client_certificate(ca, "old-client", validity=old).certificate
    assert cert.not_valid_after_utc < datetime.datetime.now(datetime.UTC)


def test_days_sets_the_leaf_lifetime() -> None:
    cert = certs.issue_serving_certificate(
        certs.create_ca(), "x", dns_names=["x"], validity=certs.Validity(days=2)
    ).certificate
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert datetime.timedelta(days=2) <= lifetime <= datetime.timedelta(days=2, minutes=10)


@pytest.mark.parametrize(
    "call",
    [
        lambda ca: certs.issue_serving_certificate(ca, "nameless"),
        lambda ca: certs.issue_serving_certificate(ca, "bad-ip", ip_addresses=["10.0.0.300"]),
        lambda ca: certs.issue_client_certificate(ca, ""),
        lambda ca: certs.issue_client_certificate(ca, "x", validity=certs.Validity(not_before=NOW, not_after=NOW)),
    ],
    ids=["serving without names", "invalid IP", "client without identity", "empty validity"],
)
def test_impossible_requests_raise_certificate_error(call: object) -> None:
    ca = certs.create_ca()
    with pytest.raises(certs.CertificateError):
        call(ca)  # type: ignore[operator]


def test_load_pair_refuses_a_key_of_another_certificate(bundle: certs.Bundle) -> None:
    with pytest.raises(certs.CertificateError, match="do not belong together"):
        certs.load_pair(bundle.cert("webhook"), bundle.key("enforcer"))


def test_certs_command_writes_the_bundle_and_lists_every_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bundle"
    code = cli.main(["certs", "--out", str(out), "--namespace", "ns1", "--enforcer-host", "enforcer-a", "--days", "3"])
    printed = capsys.readouterr().out.splitlines()
    assert code == 0
    assert printed[0] == f"created CA in {out}"
    assert sorted(Path(line).name for line in printed[1:]) == sorted(
        name for pair in certs.BUNDLE_FILES.values() for name in pair
    )
    dns, _ = sans(load(out / "enforcer.crt"))
    assert {"enforcer-a", "numaguard-enforcer.ns1.svc"} <= dns


def test_print_ca_bundle_prints_base64_of_the_ca_without_rotating_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = certs.issue_bundle(tmp_path)
    webhook_before = bundle.cert("webhook").read_bytes()
    code = cli.main(["certs", "--out", str(tmp_path), "--print-ca-bundle"])
    printed = capsys.readouterr().out.strip()
    assert code == 0
    assert base64.b64decode(printed) == bundle.cert("ca").read_bytes()
    assert bundle.cert("webhook").read_bytes() == webhook_before


def test_print_ca_bundle_on_an_empty_directory_issues_the_bundle_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["certs", "--out", str(tmp_path / "new"), "--print-ca-bundle"])
    assert code == 0
    assert base64.b64decode(capsys.readouterr().out.strip()) == (tmp_path / "new" / "ca.crt").read_bytes()
    assert (tmp_path / "new" / "webhook.key").exists()


def test_certs_command_rejects_a_non_positive_lifetime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["certs", "--out", str(tmp_path), "--days", "0"]) == 2
    assert "--days must be positive" in capsys.readouterr().err
