"""Who may call what: the table in enforcer.service.auth, case by case."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from enforcer.service import auth
from servicekit.tls import CLIENT_AUTH_USAGE, SERVER_AUTH_USAGE, PeerCertificate


def peer(name: str, *usages: str) -> PeerCertificate:
    return PeerCertificate(
        common_name=name,
        subject={"commonName": name},
        issuer={"commonName": "numaguard-ca"},
        serial_number="01",
        not_before="",
        not_after="",
        dns_names=[],
        extended_key_usages=list(usages or (CLIENT_AUTH_USAGE,)),
    )


WEBHOOK = peer("numaguard-webhook")
OPERATOR = peer("numaguard-operator")
METRICS = peer("numaguard-metrics")
TOKEN = "t0ken-of-the-day"


@dataclass(frozen=True)
class Case:
    description: str
    access: auth.Access
    peer: PeerCertificate | None
    authorization: str | None
    expected: type[Exception] | str  # the error, or the caller's method


CASES = [
    Case("the webhook may write", "write", WEBHOOK, None, "certificate"),
    Case("the webhook may not read", "read", WEBHOOK, None, auth.AccessDenied),
    Case("the operator may write", "write", OPERATOR, None, "certificate"),
    Case("the operator may read", "read", OPERATOR, None, "certificate"),
    Case("a certificate wins over a bad token", "read", OPERATOR, "Bearer wrong", "certificate"),
    # finding 6: the metrics scrape identity reads, and can neither allocate nor release
    Case("the metrics reader may read", "read", METRICS, None, "certificate"),
    Case("the metrics reader may not write", "write", METRICS, None, auth.AccessDenied),
    # finding 6: "signed by the CA" is not enough
    Case("an unknown identity is forbidden", "read", peer("someone"), None, auth.AccessDenied),
    Case(
        "a serving certificate is no client",
        "write",
        peer("numaguard-webhook", SERVER_AUTH_USAGE),
        None,
        auth.AccessDenied,
    ),
    Case(
        "a certificate without usages is no client",
        "write",
        {**WEBHOOK, "extended_key_usages": []},
        None,
        auth.AccessDenied,
    ),
    Case("the token may read", "read", None, f"Bearer {TOKEN}", "token"),
    Case("the scheme is case-insensitive", "read", None, f"bearer {TOKEN}", "token"),
    Case("the token may not write", "write", None, f"Bearer {TOKEN}", auth.AccessDenied),
    Case("a wrong token is forbidden", "read", None, "Bearer wrong", auth.AccessDenied),
    Case("another scheme is forbidden", "read", None, f"Basic {TOKEN}", auth.AccessDenied),
    Case("an empty bearer is forbidden", "read", None, "Bearer ", auth.AccessDenied),
    Case("nothing may not read", "read", None, None, auth.AuthenticationRequired),
    Case("nothing may not write", "write", None, None, auth.AuthenticationRequired),
]


@pytest.fixture
def authenticator(tmp_path: Path) -> auth.Authenticator:
    token = tmp_path / "token"
    token.write_text(f"  {TOKEN}\n")
    return auth.Authenticator(auth.TokenFile(token))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_access_rules(authenticator: auth.Authenticator, case: Case) -> None:
    if isinstance(case.expected, str):
        caller = authenticator.authorize(case.access, peer=case.peer, authorization=case.authorization)
        assert caller.method == case.expected
    else:
        with pytest.raises(case.expected):
            authenticator.authorize(case.access, peer=case.peer, authorization=case.authorization)


def test_a_rotated_token_file_takes_effect_without_a_restart(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old-token-value")
    authenticator = auth.Authenticator(auth.TokenFile(token))
    authenticator.authorize("read", peer=None, authorization="Bearer old-token-value")
    token.write_text("the-new-token-value")
    with pytest.raises(auth.AccessDenied):
        authenticator.authorize("read", peer=None, authorization="Bearer old-token-value")
    assert authenticator.authorize("read", peer=None, authorization="Bearer the-new-token-value").method == "token"


def test_without_a_token_file_no_token_is_accepted() -> None:
    with pytest.raises(auth.AccessDenied):
        auth.Authenticator(None).authorize("read", peer=None, authorization="Bearer anything")


def test_an_empty_or_missing_token_file_accepts_no_token(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path in (empty, tmp_path / "missing"):
        with pytest.raises(auth.AccessDenied):
            auth.Authenticator(auth.TokenFile(path)).authorize("read", peer=None, authorization="Bearer ")
