"""Structured JSON logs with secrets redacted.

One JSON object per line: ``ts`` (UTC, RFC 3339), ``level``, ``logger``,
``event`` (the message, a stable phrase such as ``"cpus allocated"``), then the
record's extra key-values (``log.info("pod admitted", extra={"uid": ...})``),
then ``exc`` when an exception is attached.  Log collectors parse it without a
grammar, and a stable event name is what alerts and dashboards key on.

:class:`RedactingFilter` sits on the handler, so it sees every record that is
written (including uvicorn's and other libraries' records that propagate to the
root logger) and removes credentials before formatting: values under sensitive
keys (Authorization, Cookie, ``*token*``, ``*password*``, ``*secret*``,
``*private_key*``), ``Bearer``/``Basic`` credentials and JWTs inside text, ``token=``
style query parameters, and PEM private-key blocks.  Redaction is best effort
for free text; code must still never log a secret on purpose.

This module configures logging only when asked (:func:`configure`); importing
it changes nothing.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import math
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

REDACTED = "[REDACTED]"

_SENSITIVE_EXACT = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"})
_SENSITIVE_PARTS = (
    "token",
    "password",
    "passwd",
    "secret",
    "private_key",
    "privatekey",
    "api_key",
    "apikey",
    "credential",
    "bearer",
)

_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|$)", re.DOTALL
)
# The scheme as HTTP spells it; prose such as "bearer tokens are accepted" stays readable.
_AUTH_SCHEME = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_HEADER_LINE = re.compile(r"(?i)\b((?:proxy-)?authorization|cookie)(\s*[:=]\s*)[^\r\n,;}]+")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_KEY_VALUE = re.compile(
    r"(?i)\b([A-Za-z_-]*(?:token|password|passwd|secret|api_?key)[A-Za-z_-]*)(=|:\s*)([^\s&,;\"']+)"
)
# A word one of the patterns above needs (any case here: a superset of what each matches).  Text without any is
# what the substitutions would leave unchanged, so it is returned as it is after a cheap scan instead of five.
_CREDENTIAL_WORDS = (
    "private key",
    "bearer",
    "basic",
    "authorization",
    "cookie",
    "eyj",
    "token",
    "passw",
    "secret",
    "apikey",
    "api_key",
)
# Beyond ASCII, ignoring case also folds letters such as U+017F (long s) and U+212A (Kelvin): the regex knows how.
_CREDENTIAL_HINT = re.compile("(?i)" + "|".join(re.escape(word) for word in _CREDENTIAL_WORDS))

# json.dumps(..., ensure_ascii=False, separators=(",", ":")), without building an encoder for every line
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

# The C encoder ``_COMPACT_JSON.encode`` builds anew for every value, built once, without the cycle check: it
# encodes what :func:`_jsonable` made (fresh lists and dicts, in which no cycle can be).
_C_ENCODER = (
    None
    if json.encoder.c_make_encoder is None  # type: ignore[attr-defined]
    else json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, _COMPACT_JSON.default, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
)


def _encode_jsonable(value: object) -> str:
    """``_COMPACT_JSON.encode(value)`` of what :func:`_jsonable` returned (a line's dict, or one of its values)."""
    if _C_ENCODER is None:  # pragma: no cover - CPython has the C encoder
        return _COMPACT_JSON.encode(value)
    return "".join(_C_ENCODER(value, 0))


# Exact types (not subclasses, which take the general path) that redaction and encoding pass through as they are.
_SCALARS = frozenset({type(None), bool, int, float})
_JSON_SCALARS = _SCALARS | {str}

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured duplicate of the message
    "taskName",
}


def is_sensitive_key(key: object) -> bool:
    if type(key) is str:  # the usual case first: an ``extra=`` name or a header name
        return _is_sensitive_name(key)
    if isinstance(key, bytes):
        key = key.decode("latin-1")
    if not isinstance(key, str):
        return False
    return _is_sensitive_name(key)


@functools.lru_cache(maxsize=1024)  # the same few dozen extra keys and header names, on every line
def _is_sensitive_name(key: str) -> bool:
    lowered = key.lower()
    return lowered in _SENSITIVE_EXACT or any(part in lowered.replace("-", "_") for part in _SENSITIVE_PARTS)


def redact_text(text: str) -> str:
    """Remove credentials that appear inside free text."""
    if not _may_hold_credentials(text):
        return text
    text = _PEM_PRIVATE_KEY.sub("[REDACTED PRIVATE KEY]", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _HEADER_LINE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _JWT.sub(REDACTED, text)
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


# Every word above has a letter outside these, so a text made of them alone (a uid, a hex digest) holds none.
_HEX_AND_DASHES = "0123456789abcdefABCDEF-"
# Short texts a scan found clean (an event name, "mutate", "CREATE pods default/db"): lines repeat them.  Bounded,
# oldest out first, and never a text the scan flagged, so no credential is kept here.  Ordered, so the oldest goes
# in constant time: every new pod's name is a new text, and a plain dict's first key is found past the slots of
# every key deleted before it.
_CLEAN_TEXTS: OrderedDict[str, None] = OrderedDict()
_CLEAN_TEXTS_KEPT = 1024
_CLEAN_TEXT_CHARS = 128


def _may_hold_credentials(text: str) -> bool:
    if not text.strip(_HEX_AND_DASHES):
        return False
    if text in _CLEAN_TEXTS:
        return False
    if text.isascii():
        found = any(map(text.lower().__contains__, _CREDENTIAL_WORDS))
    else:
        found = _CREDENTIAL_HINT.search(text) is not None
    if not found and len(text) <= _CLEAN_TEXT_CHARS:
        _remember_clean(text)
    return found


def _remember_clean(text: str) -> None:
    try:
        if len(_CLEAN_TEXTS) >= _CLEAN_TEXTS_KEPT:
            _CLEAN_TEXTS.popitem(last=False)
    except KeyError:  # another thread emptied it at the same time: one eviction will do
        pass
    _CLEAN_TEXTS[text] = None


def redact(value: object, key: object = None) -> object:
    """A copy of ``value`` with secrets removed; mappings and sequences are walked (header pairs included)."""
    if key is not None and is_sensitive_key(key):
        return REDACTED
    kind = type(value)
    if kind is str:
        return redact_text(value)  # type: ignore[arg-type]
    if kind in _SCALARS:
        return value
    if kind is list or kind is tuple:  # before the Mapping check below, an ABC's and several times slower
        return _redact_items(value)  # type: ignore[arg-type]
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes):
        return redact_text(value.decode("utf-8", "replace"))
    if kind is dict or isinstance(value, Mapping):  # a dict without the ABC's check
        return {str(k): redact(v, k) for k, v in value.items()}  # type: ignore[attr-defined]
    if isinstance(value, list | tuple | set | frozenset):
        return _redact_items(value)
    return value


def _redact_items(value: list[object] | tuple[object, ...] | set[object] | frozenset[object]) -> list[object]:
    items = list(value)
    # ASGI/httpx header pairs: (name, value)
    if len(items) == 2 and isinstance(items[0], str | bytes) and is_sensitive_key(items[0]):
        return [redact(items[0]), REDACTED]
    return [redact(item) for item in items]


def _redact_extra(name: str, value: object) -> object:
    """``redact(value, name)`` of one ``extra=`` value, its first steps inlined: a line carries about ten."""
    if _is_sensitive_name(name):
        return REDACTED
    if type(value) is str:
        return redact_text(value)
    if type(value) in _SCALARS:
        return value
    return redact(value)


class RedactingFilter(logging.Filter):
    """Rewrites each record in place so no handler or formatter ever sees the secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad %-format: keep what we have
            message = str(record.msg)
        record.msg = redact_text(message)
        record.args = None
        fields = vars(record)
        # the ``extra=`` names: replacing their values in place keeps the order the formatter writes them in.
        for name in fields.keys() - _RECORD_ATTRIBUTES:
            fields[name] = _redact_extra(name, fields[name])
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


def _jsonable(value: object) -> object:
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is list or kind is tuple:  # before the Mapping check below, an ABC's and several times slower
        return [_jsonable(v) for v in value]  # type: ignore[attr-defined]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if kind is dict or isinstance(value, Mapping):  # a dict without the ABC's check
        return {str(k): _jsonable(v) for k, v in value.items()}  # type: ignore[attr-defined]
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    return str(value)


@functools.lru_cache(maxsize=4)  # the lines of one second share it
def _utc_second(second: float) -> str:
    # a whole second: isoformat writes no fraction, and the year as isoformat writes it (4 digits)
    return datetime.datetime.fromtimestamp(second, tz=datetime.UTC).replace(tzinfo=None).isoformat()


def utc_timestamp(created: float) -> str:
    """``datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")`` with ``Z`` for ``+00:00``.

    The same text, without a datetime per line: the fraction is rounded to microseconds as ``fromtimestamp``
    rounds it (half to even, carrying into the second), then cut to milliseconds as ``isoformat`` cuts it.
    """
    fraction, second = math.modf(created)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    elif micros < 0:
        second, micros = second - 1, micros + 1_000_000
    return f"{_utc_second(second)}.{micros // 1000:03d}Z"


def _line_head(created: float, level_name: str, logger_name: str, event: str) -> dict[str, Any]:
    """The members every line starts with, in the order it writes them."""
    return {"ts": utc_timestamp(created), "level": level_name.lower(), "logger": logger_name, "event": event}


class JSONFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, event, extra key-values, exc."""

    def format(self, record: logging.LogRecord) -> str:
        doc = _line_head(record.created, record.levelname, record.name, record.getMessage())
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRIBUTES and name not in doc:
                doc[name] = value if type(value) in _JSON_SCALARS else _jsonable(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exc"] = record.exc_text
        return _encode_jsonable(doc)


# What a line's fields may not be called for :func:`write` to write it: the record's own attributes (``extra=``
# refuses most, the formatter skips the rest) and the members every line starts with (the formatter keeps those).
_TAKEN_NAMES = _RECORD_ATTRIBUTES | {"ts", "level", "logger", "event"}


def write(logger: logging.Logger, level: int, event: str, fields: Mapping[str, object]) -> None:
    """``logger.log(level, event, extra=fields)``: the same line, to the same stream, without the record.

    A line the webhook writes for every review spends more in the logging module's plumbing (the LogRecord and
    its dozen attributes, the logger and handler calls) than in what it says.  When the record would reach exactly
    one handler and that handler is one :func:`handler` built, untouched (a plain ``StreamHandler``, one
    :class:`RedactingFilter`, a :class:`JSONFormatter`), the line is redacted, encoded and written here, under the
    handler's lock, as the handler would have written it (``tests/servicekit/test_json_logging.py`` holds the
    equivalence for every kind of value).  Anything else goes through ``logger.log`` as it always did: a level
    that is off, a disabled logger, a filter on the logger, another handler anywhere on the way up (an operator's,
    ``lastResort``), a handler whose level, filters or formatter differ, a custom record factory or logger class,
    a field named like a record attribute, a field name that is not a ``str``.

    What a line says apart from its values (the logger, the level, the event, the field names, which of them are
    sensitive) is the same line after line: it is encoded once into a :class:`_LineShape`, and each line only
    encodes its values into it: the review line was the largest single step of a webhook review, and building it
    whole as a dict on every line was a large part of it (BENCHMARKS.md, "Webhook").
    """
    if not logger.isEnabledFor(level):
        return
    out = _sole_json_handler(logger, level)
    shape = None if out is None or type(event) is not str else _shape_of(logger, level, event, out.terminator, fields)
    if out is None or shape is None:
        logger.log(level, event, extra=fields)
        return
    texts = [utc_timestamp(time.time())]
    for value, hidden in zip(fields.values(), shape.hidden, strict=True):
        if not hidden:
            texts.append(_encode_text(redact_text(value)) if type(value) is str else _value_json(value))
    line = shape.template % tuple(texts)
    out.acquire()
    try:
        try:
            out.stream.write(line)
            out.flush()
        except RecursionError:  # as StreamHandler.emit
            raise
        except Exception:
            out.handleError(logger.makeRecord(logger.name, level, "(unknown file)", 0, event, (), None, extra=fields))
    finally:
        out.release()


@dataclass(frozen=True, slots=True)
class _LineShape:
    """A line's constant text, as a ``%`` template: the timestamp, then one ``%s`` per value that is written.

    ``hidden[i]``: the i-th field's name is sensitive, so its value is never read and the template already says
    ``"[REDACTED]"`` for it.
    """

    template: str
    hidden: tuple[bool, ...]


# Lines of the same logger, level, event and field names share a shape: a service writes a few dozen kinds of line.
# Bounded; a line whose shape does not fit any more is encoded all the same, with a shape made for it alone.
_SHAPES: dict[tuple[str, str, str, str, tuple[str, ...]], _LineShape] = {}
_SHAPES_KEPT = 256

_encode_text: Callable[[str], str] = json.encoder.encode_basestring
"""A ``str`` as the JSON string the line encoder (``ensure_ascii=False``, built with this function) writes."""


def _shape_of(
    logger: logging.Logger, level: int, event: str, terminator: str, fields: Mapping[str, object]
) -> _LineShape | None:
    """The shape of this line; ``None`` when :func:`write` must leave it to the logging module (a taken name)."""
    names = tuple(fields)
    level_name = logging.getLevelName(level)
    key = (logger.name, level_name, event, terminator, names)
    known = _SHAPES.get(key)
    if known is not None:
        return known
    if not _TAKEN_NAMES.isdisjoint(names) or any(type(name) is not str for name in names):
        return None
    head = _line_head(0.0, level_name, logger.name, redact_text(event))
    del head["ts"]  # the one member that changes from line to line: a %s of the template
    parts = ['{"ts":"%s"']
    for name, value in head.items():
        parts.append(f",{_encode_text(name)}:{_encode_text(value)}".replace("%", "%%"))
    hidden = tuple(_is_sensitive_name(name) for name in names)
    for name, is_hidden in zip(names, hidden, strict=True):
        written = _encode_text(REDACTED) if is_hidden else "%s"
        parts.append(f",{_encode_text(name).replace('%', '%%')}:{written}")
    parts.append("}" + terminator.replace("%", "%%"))
    shape = _LineShape("".join(parts), hidden)
    if len(_SHAPES) < _SHAPES_KEPT:
        _SHAPES[key] = shape
    return shape


_SCALAR_JSON: dict[object, str] = {None: "null", True: "true", False: "false"}


def _value_json(value: object) -> str:
    """A field's value, redacted, as the formatter writes it after :class:`RedactingFilter` redacted it."""
    kind = type(value)
    if kind is bool or value is None:
        return _SCALAR_JSON[value]
    if kind is int:
        return int.__repr__(value)  # what the encoder writes for an int
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return float.__repr__(value)  # a finite float (NaN and the infinities are written as NaN, Infinity)
    if kind is list and not value:  # the usual warnings: none
        return "[]"
    return _encode_jsonable(_jsonable(redact(value)))


def _sole_json_handler(logger: logging.Logger, level: int) -> logging.StreamHandler[IO[str]] | None:
    """The one handler a record of ``level`` from ``logger`` reaches, if it is one :func:`handler` built as built."""
    if (
        type(logger) is not logging.Logger
        or logger.disabled
        or logger.filters
        or logging.getLogRecordFactory() is not logging.LogRecord
    ):
        return None
    found: logging.Handler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for each in current.handlers:
            if found is not None:
                return None
            found = each
        current = current.parent if current.propagate else None
    if (
        type(found) is not logging.StreamHandler
        or level < found.level
        or type(found.formatter) is not JSONFormatter
        or len(found.filters) != 1
        or type(found.filters[0]) is not RedactingFilter
    ):
        return None
    return found


def handler(stream: IO[str] | None = None) -> logging.Handler:
    """A stream handler writing redacted JSON lines (to stderr by default)."""
    out = logging.StreamHandler(stream if stream is not None else sys.stderr)
    out.addFilter(RedactingFilter())
    out.setFormatter(JSONFormatter())
    return out


def configure(level: str | int = "INFO", stream: IO[str] | None = None) -> logging.Handler:
    """Make the root logger write redacted JSON lines; uvicorn's loggers propagate into it.

    Replaces handlers a previous ``configure`` installed (idempotent), leaves
    other handlers alone.
    """
    # Looking up the multiprocessing process name, the thread and the calling frame (file, line, function) costs
    # microseconds per record, and no numaguard line carries them (the JSON lines name the logger and the event):
    # a foreign %(processName)s or %(threadName)s reads None, %(lineno)d 0.  ``_srcfile = None`` is the switch the
    # logging module documents for skipping the caller lookup; an ``exc`` traceback is unaffected.
    logging.logMultiprocessing = False
    logging.logThreads = False
    logging._srcfile = None
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_numaguard_json", False):
            root.removeHandler(old)
    new = handler(stream)
    new._numaguard_json = True  # type: ignore[attr-defined]
    root.addHandler(new)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uv = logging.getLogger(name)
        uv.handlers.clear()
        uv.propagate = True
        # uvicorn sets these levels process-wide when a server starts; the root level decides
        uv.setLevel(logging.NOTSET)
    return new
