"""JSON log lines and the redaction of secrets before anything is written."""

from __future__ import annotations

import contextlib
import datetime
import enum
import io
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servicekit import logging as jsonlog

PRIVATE_KEY = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBL0ngSecretKeyMaterial\n-----END EC PRIVATE KEY-----"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLXNlY3JldA"


@contextlib.contextmanager
def json_logger(name: str) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own writing JSON lines to a string, at every level; its handler removed afterwards."""
    stream = io.StringIO()
    logger = logging.getLogger(name)
    logger.handlers[:] = [jsonlog.handler(stream)]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.handlers.clear()


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    with json_logger("tests.servicekit.jsonlog") as captured:
        yield captured


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


@pytest.mark.parametrize("case", REDACT_CASES, ids=lambda c: c.description)
def test_a_text_redacts_the_same_every_time_and_only_clean_texts_are_remembered(case: RedactCase) -> None:
    texts = [case.message, *(v for v in case.extra.values() if isinstance(v, str))]
    first = [jsonlog.redact_text(text) for text in texts]
    assert [jsonlog.redact_text(text) for text in texts] == first  # the second time from the clean-text memo
    for text, redacted in zip(texts, first, strict=True):
        assert (text in jsonlog._CLEAN_TEXTS) <= (redacted == text)  # a flagged text is never kept


@pytest.mark.parametrize("text", ["705ab4f5-6393-11e8-b7cc-7ae180fd74c5", "DEADBEEF", "-", "0"])
def test_uids_and_hex_digests_need_no_scan(text: str) -> None:
    assert jsonlog.redact_text(text) == text
    assert text not in jsonlog._CLEAN_TEXTS  # answered before the memo, which they would only crowd


def test_the_clean_text_memo_stays_bounded_oldest_out_first() -> None:
    texts = [f"pod web-{i} admitted" for i in range(jsonlog._CLEAN_TEXTS_KEPT + 10)]
    for text in texts:
        jsonlog.redact_text(text)
    assert len(jsonlog._CLEAN_TEXTS) <= jsonlog._CLEAN_TEXTS_KEPT
    assert not any(text in jsonlog._CLEAN_TEXTS for text in texts[:10])
    assert all(text in jsonlog._CLEAN_TEXTS for text in texts[-jsonlog._CLEAN_TEXTS_KEPT :])
    assert jsonlog.redact_text("Bearer abcdefgh12345678") == f"Bearer {jsonlog.REDACTED}"


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


class Level(enum.IntEnum):
    HIGH = 3


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
    ("names and values with percent signs", {"100%": "50% %s", "a%sb": 1, "%(uid)s": [], "api%key": "%d"}),
    ("empty containers and int subclasses", {"warnings": [], "nodes": (), "map": {}, "flag": Level.HIGH}),
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


# -- jsonlog.write: the line logger.info writes, without the record -----------------------------------------------

FIXED_NOW = 1_764_637_738.5125  # time.time() for both paths: the lines must be equal byte for byte, ts included

WRITE_EVENTS = ["admission reviewed", "100% done %s", f"got Authorization: Bearer abcdefgh12345678 {JWT}", "caf\u00e9"]


def _no_record(*args: object, **kwargs: object) -> logging.LogRecord:
    raise AssertionError("write() built a LogRecord: the fast path was not taken")


@pytest.mark.parametrize("event", WRITE_EVENTS)
@pytest.mark.parametrize(("description", "extra"), EXTRA_CASES, ids=[c[0] for c in EXTRA_CASES])
def test_write_writes_the_line_logger_info_writes(
    capture: tuple[logging.Logger, io.StringIO],
    monkeypatch: pytest.MonkeyPatch,
    description: str,
    extra: dict[str, Any],
    event: str,
) -> None:
    logger, stream = capture
    monkeypatch.setattr(time, "time", lambda: FIXED_NOW)
    logger.info(event, extra=extra)
    via_logging = stream.getvalue()
    stream.seek(0)
    stream.truncate()
    monkeypatch.setattr(logger, "makeRecord", _no_record)
    jsonlog.write(logger, logging.INFO, event, extra)
    assert stream.getvalue() == via_logging
    assert via_logging.endswith("}\n") and via_logging.count("\n") == 1


def test_write_honours_the_level_and_builds_nothing_below_it(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    logger.setLevel(logging.WARNING)
    jsonlog.write(logger, logging.INFO, "admission reviewed", {"uid": "u"})
    assert stream.getvalue() == ""
    jsonlog.write(logger, logging.WARNING, "admission reviewed", {"uid": "u"})
    assert lines(stream)[0]["level"] == "warning"


class OtherFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"other {record.getMessage()} {getattr(record, 'uid', '-')}"


def _second_handler_on_the_parent(logger: logging.Logger, out: logging.Handler) -> None:
    parent = logging.getLogger(logger.name.rsplit(".", 1)[0])
    logger.propagate = True
    extra = logging.StreamHandler(io.StringIO())
    parent.addHandler(extra)
    # the parent's handler receives the record too; undone by the test's finalizer below
    logger._test_undo = lambda: (parent.removeHandler(extra), setattr(logger, "propagate", False))  # type: ignore[attr-defined]


def _dropping_filter_on_the_logger(logger: logging.Logger, out: logging.Handler) -> None:
    logger.addFilter(lambda record: False)


def _handler_level_above(logger: logging.Logger, out: logging.Handler) -> None:
    out.setLevel(logging.ERROR)


def _another_formatter(logger: logging.Logger, out: logging.Handler) -> None:
    out.setFormatter(OtherFormatter())


def _another_filter_on_the_handler(logger: logging.Logger, out: logging.Handler) -> None:
    def tag(record: logging.LogRecord) -> bool:
        record.uid = "tagged"
        return True

    out.addFilter(tag)


def _logger_disabled(logger: logging.Logger, out: logging.Handler) -> None:
    logger.disabled = True


# the configurations write() must leave to the logging module (it cannot promise the same line or the same
# handlers otherwise): the line, or the absence of one, is whatever logger.info gives
FALLBACK_CASES = {
    "a second handler up the hierarchy": _second_handler_on_the_parent,
    "a filter on the logger": _dropping_filter_on_the_logger,
    "the handler's level above the line's": _handler_level_above,
    "another formatter": _another_formatter,
    "another filter on the handler": _another_filter_on_the_handler,
    "the logger disabled": _logger_disabled,
}


@pytest.mark.parametrize("setup", FALLBACK_CASES.values(), ids=list(FALLBACK_CASES))
def test_write_leaves_other_configurations_to_the_logging_module(
    capture: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch, setup: Any
) -> None:
    logger, stream = capture
    (out,) = logger.handlers
    setup(logger, out)
    try:
        monkeypatch.setattr(time, "time", lambda: FIXED_NOW)
        made: list[str] = []
        real = logger.makeRecord

        def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
            made.append(args[4])
            return real(*args, **kwargs)

        monkeypatch.setattr(logger, "makeRecord", counting)
        logger.info("admission reviewed", extra={"uid": "u1"})
        via_logging, made_by_logging = stream.getvalue(), list(made)
        stream.seek(0)
        stream.truncate()
        made.clear()
        jsonlog.write(logger, logging.INFO, "admission reviewed", {"uid": "u1"})
        assert stream.getvalue() == via_logging
        assert made == made_by_logging, "write() must have gone through the logging module as logger.info goes"
    finally:
        getattr(logger, "_test_undo", lambda: None)()
        logger.filters.clear()
        logger.disabled = False


def test_write_leaves_a_custom_record_factory_and_taken_names_to_the_logging_module(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    factory = logging.getLogRecordFactory()

    def tagging(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        record.site = "eu-1"
        return record

    logging.setLogRecordFactory(tagging)
    try:
        jsonlog.write(logger, logging.INFO, "admission reviewed", {"uid": "u1"})
    finally:
        logging.setLogRecordFactory(factory)
    assert lines(stream)[0]["site"] == "eu-1"
    jsonlog.write(logger, logging.INFO, "admission reviewed", {"logger": "spoofed", "uid": "u2"})
    assert (lines(stream)[1]["logger"], lines(stream)[1]["uid"]) == (logger.name, "u2")  # as the formatter keeps it
    with pytest.raises(KeyError):  # as logger.info(..., extra={"message": ...}) refuses it
        jsonlog.write(logger, logging.INFO, "admission reviewed", {"message": "x"})


class LockCheckingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.handler: logging.Handler | None = None
        self.held: list[bool] = []

    def write(self, text: str) -> int:
        assert self.handler is not None and self.handler.lock is not None
        self.held.append(self.handler.lock._is_owned())  # type: ignore[attr-defined]
        return super().write(text)


def test_write_holds_the_handler_lock_while_it_writes() -> None:
    stream = LockCheckingStream()
    logger = logging.getLogger("tests.servicekit.jsonlog.locked")
    out = jsonlog.handler(stream)
    stream.handler = out
    logger.handlers[:] = [out]
    logger.propagate = False
    try:
        jsonlog.write(logger, logging.WARNING, "admission reviewed", {"uid": "u"})
    finally:
        logger.handlers.clear()
    assert stream.held == [True]
    assert lines(stream)[0]["uid"] == "u"


class BrokenStream(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("disk full")


def test_a_failed_write_is_reported_as_the_handler_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("tests.servicekit.jsonlog.broken")
    out = jsonlog.handler(BrokenStream())
    reported: list[logging.LogRecord] = []
    monkeypatch.setattr(out, "handleError", reported.append)
    logger.handlers[:] = [out]
    logger.propagate = False
    try:
        jsonlog.write(logger, logging.WARNING, "admission reviewed", {"uid": "u"})  # does not raise
    finally:
        logger.handlers.clear()
    assert [(r.getMessage(), r.levelno, getattr(r, "uid", None)) for r in reported] == [
        ("admission reviewed", logging.WARNING, "u")
    ]


# -- write(): any line, and the memo of line shapes --------------------------------------------------------------

_NAMES = st.text(min_size=1, max_size=12).filter(lambda name: name not in jsonlog._TAKEN_NAMES)
_SCALAR_VALUES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(["token=hunter2", f"Bearer abcdefgh12345678 {JWT}", PRIVATE_KEY, "authorization"])
    | st.binary(max_size=20)
)
_VALUES = st.recursive(
    _SCALAR_VALUES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8) | st.sampled_from(["token", "Authorization"]), inner, max_size=4)
    ),
    max_leaves=10,
)


@contextlib.contextmanager
def _logger_at_fixed_time() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    with json_logger("tests.servicekit.jsonlog.any") as captured, mock.patch.object(time, "time", lambda: FIXED_NOW):
        yield captured


def _both_ways(logger: logging.Logger, stream: io.StringIO, level: int, event: str, fields: dict[str, Any]) -> None:
    logger.log(level, event, extra=fields)
    via_logging = stream.getvalue()
    stream.seek(0)
    stream.truncate()
    with mock.patch.object(logger, "makeRecord", _no_record):
        jsonlog.write(logger, level, event, fields)
    assert stream.getvalue() == via_logging
    stream.seek(0)
    stream.truncate()


@settings(max_examples=300, deadline=None)
@given(
    event=st.text(max_size=30) | st.sampled_from(WRITE_EVENTS),
    fields=st.dictionaries(_NAMES | st.sampled_from(["password", "x-api-key", "warnings"]), _VALUES, max_size=6),
    level=st.sampled_from([logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR]),
)
def test_write_writes_what_logger_log_writes_for_any_line(event: str, fields: dict[str, Any], level: int) -> None:
    with _logger_at_fixed_time() as (logger, stream):
        _both_ways(logger, stream, level, event, fields)
        _both_ways(logger, stream, level, event, fields)  # the second time from the remembered shape


def test_the_memo_of_line_shapes_stays_bounded_and_lines_past_it_are_still_written() -> None:
    with _logger_at_fixed_time() as (logger, stream):
        for i in range(jsonlog._SHAPES_KEPT + 50):
            _both_ways(logger, stream, logging.INFO, f"event {i}", {"uid": f"u{i}", "n": i})
    assert len(jsonlog._SHAPES) <= jsonlog._SHAPES_KEPT


def test_a_line_of_a_remembered_shape_carries_its_own_values() -> None:
    with _logger_at_fixed_time() as (logger, stream):
        jsonlog.write(logger, logging.INFO, "admission reviewed", {"uid": "u1", "token": "t1", "code": None})
        jsonlog.write(logger, logging.INFO, "admission reviewed", {"uid": "u2", "token": "t2", "code": 422})
        jsonlog.write(logger, logging.INFO, "admission reviewed", {"code": 400, "uid": "u3", "token": "t3"})
        written = lines(stream)
    assert [(line["uid"], line["token"], line["code"]) for line in written] == [
        ("u1", jsonlog.REDACTED, None),
        ("u2", jsonlog.REDACTED, 422),
        ("u3", jsonlog.REDACTED, 400),
    ]
    assert list(written[2]) == ["ts", "level", "logger", "event", "code", "uid", "token"]  # its own order
