"""JSON log lines and the redaction of secrets before anything is written."""

from __future__ import annotations

import datetime
import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servicekit import logging as jsonlog

PRIVATE_KEY = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBL0ngSecretKeyMaterial\n-----END EC PRIVATE KEY-----"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLXNlY3JldA"


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    logger = logging.getLogger("tests.servicekit.jsonlog")
    logger.handlers[:] = [jsonlog.handler(stream)]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.handlers.clear()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_record_is_one_json_object_with_ts_level_event_and_extras(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    logger.info("pod admitted", extra={"uid": "705ab4f5", "cpus": [2, 3], "node": {"name": "node-a"}})
    logger.warning("resize deferred")
    first, second = lines(stream)
    assert first["ts"].endswith("Z") and "T" in first["ts"]
    assert {k: first[k] for k in ("level", "logger", "event", "uid", "cpus", "node")} == {
        "level": "info",
        "logger": "tests.servicekit.jsonlog",
        "event": "pod admitted",
        "uid": "705ab4f5",
        "cpus": [2, 3],
        "node": {"name": "node-a"},
    }
    assert (second["level"], second["event"]) == ("warning", "resize deferred")


def test_percent_arguments_are_rendered_into_the_event(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    logger.info("listening on %s:%d", "0.0.0.0", 8443)
    assert lines(stream)[0]["event"] == "listening on 0.0.0.0:8443"


class Opaque:
    def __str__(self) -> str:
        return "opaque-value"


def test_values_json_cannot_encode_are_written_as_text(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    logger.info("odd value", extra={"value": Opaque(), "cpus": frozenset({3})})
    doc = lines(stream)[0]
    assert (doc["value"], doc["cpus"]) == ("opaque-value", [3])


def test_exceptions_are_written_in_the_exc_field(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("reconcile failed")
    doc = lines(stream)[0]
    assert doc["event"] == "reconcile failed"
    assert "RuntimeError: boom" in doc["exc"]


@dataclass(frozen=True)
class RedactCase:
    description: str
    message: str
    extra: dict[str, Any]
    secret: str
    kept: str


REDACT_CASES = [
    RedactCase(
        "authorization header in a headers map",
        "calling enforcer",
        {"headers": {"Authorization": "Bearer s3cr3t-t0ken-value", "accept": "application/json"}},
        "s3cr3t-t0ken-value",
        "application/json",
    ),
    RedactCase(
        "bearer credential inside the message",
        "request had Authorization: Bearer abcdefgh12345678",
        {},
        "abcdefgh12345678",
        "request had",
    ),
    RedactCase(
        "bearer credential without a header name",
        "retrying with Bearer zzzzzzzz99999999",
        {},
        "zzzzzzzz99999999",
        "retrying with",
    ),
    RedactCase(
        "asgi header pairs",
        "scope headers",
        {"headers": [(b"authorization", b"Basic dXNlcjpwYXNz"), (b"host", b"numaguard")]},
        "dXNlcjpwYXNz",
        "numaguard",
    ),
    RedactCase(
        "pem private key in the message", f"loaded key {PRIVATE_KEY} from disk", {}, "SecretKeyMaterial", "from disk"
    ),
    RedactCase(
        "token extra key",
        "service account loaded",
        {"token": "abc.def.ghi", "namespace": "numaguard"},
        "abc.def.ghi",
        "numaguard",
    ),
    RedactCase(
        "password nested in a config map",
        "config",
        {"config": {"db": {"password": "hunter2"}, "port": 5432}},
        "hunter2",
        "5432",
    ),
    RedactCase(
        "token query parameter in a url", "GET /state?token=qwertyuiop&pod=web-0", {}, "qwertyuiop", "pod=web-0"
    ),
    RedactCase("jwt in free text", f"kube client using {JWT}", {}, "c2lnbmF0dXJlLXNlY3JldA", "kube client using"),
    RedactCase("cookie header", "upstream said Cookie: session=abcdef; path=/", {}, "session=abcdef", "upstream"),
    RedactCase(
        "private key extra", "issued", {"private_key": PRIVATE_KEY, "serial": "0A1B"}, "SecretKeyMaterial", "0A1B"
    ),
]


@pytest.mark.parametrize("case", REDACT_CASES, ids=lambda c: c.description)
def test_secrets_never_reach_the_output(capture: tuple[logging.Logger, io.StringIO], case: RedactCase) -> None:
    logger, stream = capture
    logger.info(case.message, extra=case.extra)
    written = stream.getvalue()
    assert case.secret not in written
    assert jsonlog.REDACTED in written or "[REDACTED PRIVATE KEY]" in written
    assert case.kept in written


@pytest.mark.parametrize(
    "message",
    [
        "bearer tokens are accepted on read endpoints",
        "tls files: /etc/numaguard/tls/webhook.key",
        "authorization failed for pod web-0",
        "cpus allocated 2-5",
    ],
)
def test_ordinary_text_is_left_alone(capture: tuple[logging.Logger, io.StringIO], message: str) -> None:
    logger, stream = capture
    logger.info(message)
    assert lines(stream)[0]["event"] == message


def test_secrets_in_exception_text_are_redacted(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    try:
        raise ValueError("bad header Authorization: Bearer leakedleaked123")
    except ValueError:
        logger.exception("request failed")
    assert "leakedleaked123" not in stream.getvalue()


def test_redact_returns_a_copy_and_leaves_the_caller_data_intact() -> None:
    headers = {"Authorization": "Bearer abcdefgh12345678"}
    assert jsonlog.redact(headers) == {"Authorization": jsonlog.REDACTED}
    assert headers == {"Authorization": "Bearer abcdefgh12345678"}


def test_configure_routes_uvicorn_records_through_the_json_handler_once() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    saved_switches = logging.logMultiprocessing, logging.logThreads, logging._srcfile
    try:
        jsonlog.configure("INFO", stream)
        jsonlog.configure("INFO", stream)  # idempotent: one handler, not two
        logging.getLogger("uvicorn.error").info("Uvicorn running on %s", "https://0.0.0.0:8443")
        assert [doc["event"] for doc in lines(stream)] == ["Uvicorn running on https://0.0.0.0:8443"]
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        logging.logMultiprocessing, logging.logThreads, logging._srcfile = saved_switches


def test_configure_skips_the_record_attributes_no_line_carries_and_keeps_tracebacks() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    saved_switches = logging.logMultiprocessing, logging.logThreads, logging._srcfile
    try:
        jsonlog.configure("INFO", stream)
        logger = logging.getLogger("tests.servicekit.configured")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception("reconcile failed", extra={"uid": "705ab4f5"})
        (doc,) = lines(stream)
        assert (doc["event"], doc["uid"]) == ("reconcile failed", "705ab4f5")
        assert "RuntimeError: boom" in doc["exc"] and "test_json_logging.py" in doc["exc"]
        assert set(doc) == {"ts", "level", "logger", "event", "uid", "exc"}
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        logging.logMultiprocessing, logging.logThreads, logging._srcfile = saved_switches


class Text(str):
    """A str subclass: the general path, not the fast one."""


# every kind of extra value: the filter's inlined steps must leave what ``redact(value, name)`` leaves, and the
# formatter must write what ``json.dumps`` of the redacted values (``_jsonable``) writes
EXTRA_CASES: list[tuple[str, dict[str, Any]]] = [
    ("plain scalars", {"uid": "705ab4f5", "dry_run": False, "code": 422, "duration_ms": 0.125, "reason": None}),
    ("scalars under sensitive names", {"token": 7, "password": None, "api_key": True, "client_secret": 1.5}),
    ("text carrying secrets", {"status_message": f"bad Authorization: Bearer abcdefgh12345678 {JWT}", "note": "x=1"}),
    ("lists and header pairs", {"warnings": ["a", "token=hunter2"], "pair": ["authorization", "Basic dXNlcjpwYXNz"]}),
    ("tuples, sets and nested maps", {"cpus": (2, 3), "nodes": frozenset({1}), "node": {"secret": "s", "name": "a"}}),
    ("bytes, str subclasses and objects", {"raw": b"token=abc", "text": Text("secret=abc"), "value": Opaque()}),
    ("non-string keys and odd floats", {"map": {1: "a", None: "b"}, "ratio": float("inf"), "nan": float("nan")}),
    ("unicode", {"request": "CREATE pods ns/caf\u00e9-\u2028", "message_text": "\x00\x1f\x7f"}),
]


def _reference_line(record: logging.LogRecord, extra: dict[str, Any]) -> str:
    """What the formatter wrote before its fast paths: every extra redacted, made JSON-able, dumped compactly."""
    ts = json.loads(jsonlog.JSONFormatter().format(record))["ts"]
    doc: dict[str, Any] = {"ts": ts, "level": "info", "logger": record.name, "event": "reviewed"}
    doc.update({name: jsonlog._jsonable(jsonlog.redact(value, name)) for name, value in extra.items()})
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(("description", "extra"), EXTRA_CASES, ids=[c[0] for c in EXTRA_CASES])
def test_the_filter_and_formatter_write_what_redacting_each_extra_writes(
    capture: tuple[logging.Logger, io.StringIO], description: str, extra: dict[str, Any]
) -> None:
    logger, stream = capture
    logger.info("reviewed", extra=extra)
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "reviewed", (), None, extra=extra)
    jsonlog.RedactingFilter().filter(record)
    for name, value in extra.items():
        assert repr(getattr(record, name)) == repr(jsonlog.redact(value, name)), name
    written = stream.getvalue().rstrip("\n")
    expected = _reference_line(record, extra)
    assert written.split('","level"', 1)[1] == expected.split('","level"', 1)[1]  # the ts differs by a few µs


def _isoformat_ts(created: float) -> str:
    return (
        datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


_SECONDS = st.integers(min_value=-(10**9), max_value=4 * 10**9)
# the fractions where rounding to microseconds carries into the next millisecond or second
_EDGES = st.sampled_from([0.0, 0.0000005, 0.0004995, 0.0005, 0.9994995, 0.9995, 0.9999994, 0.9999995, 0.9999999])


@settings(max_examples=500, deadline=None)
@given(created=st.floats(min_value=-1e9, max_value=4e9) | st.builds(lambda s, f: s + f, _SECONDS, _EDGES))
def test_the_timestamp_is_the_one_isoformat_writes(created: float) -> None:
    assert jsonlog.utc_timestamp(created) == _isoformat_ts(created)
