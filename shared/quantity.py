"""Exact Kubernetes ``resource.Quantity`` parsing and canonical formatting.

Quantities are parsed to :class:`decimal.Decimal` and turned into integers at
the edge: CPU into millicores (``ceil(q * 1000)``, the API server's
``MilliValue``), memory and hugepages into bytes (``ceil(q)``, ``Value``).  No
float ever takes part in accounting.  :func:`canonical` reproduces the API
server's serialisation (``1.5`` -> ``1500m``, ``1536Mi`` stays ``1536Mi``,
``1e3`` stays ``1e3``), so what we write into annotations reads like what
``kubectl`` shows.
"""

from __future__ import annotations

import decimal
import functools
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from shared.errors import QuantityError

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

_CTX = decimal.Context(prec=80, rounding=decimal.ROUND_CEILING, Emax=10_000, Emin=-10_000)

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BINARY_BY_EXP = {v: k for k, v in _BINARY.items()}

# sign, digits with an optional fraction, then the suffix (validated separately)
_SHAPE = re.compile(r"([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(.*)", re.ASCII | re.DOTALL)
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)", re.ASCII)

# The API server refuses quantities beyond these magnitudes; they also stop a
# hostile "1e999999999" from making Decimal work forever.
_MAX_EXPONENT = 1000
_MAX_TEXT = 128

# Parsed strings, least recently used out first: a cluster's pods repeat a few dozen quantity strings ("1", "500m",
# "16Gi") and every pod read parses them again.  Bounded, so hostile unique strings cost at most this many entries
# of at most _MAX_TEXT characters each.
PARSE_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class Quantity:
    """A parsed quantity: its exact value and the format its suffix implied."""

    value: Decimal
    format: Format

    def milli(self) -> int:
        """``ceil(value * 1000)``: the API server's ``MilliValue`` (CPU millicores)."""
        return _milli_of(self.value)

    def integer(self) -> int:
        """``ceil(value)``: the API server's ``Value`` (bytes for memory and hugepages)."""
        return _integer_of(self.value)

    def __str__(self) -> str:
        return format_quantity(self.value, self.format)

    def __bool__(self) -> bool:
        return self.value != 0

    # Arithmetic and ordering follow Go's ``Quantity.Add`` / ``Cmp``: the sum keeps
    # the left operand's format unless that operand is zero, and ordering compares
    # values only.  Equality stays structural (value *and* format), so use
    # :meth:`same_value` where the API server compares semantically ("1" == "1000m").
    def __add__(self, other: Quantity) -> Quantity:
        fmt = other.format if self.value == 0 else self.format
        return Quantity(value=_CTX.add(self.value, other.value), format=fmt)

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __le__(self, other: Quantity) -> bool:
        return self.value <= other.value

    def __gt__(self, other: Quantity) -> bool:
        return self.value > other.value

    def __ge__(self, other: Quantity) -> bool:
        return self.value >= other.value

    def same_value(self, other: Quantity) -> bool:
        """Go's ``Cmp(other) == 0``: what ``apiequality.Semantic`` uses for quantities."""
        return self.value == other.value

    def rounded_up_to_milli(self) -> Quantity:
        """``RoundUp(-3)``: what the API server's defaulting does to every stored quantity."""
        exponent = self.value.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -3:
            rounded = self.value.quantize(Decimal("0.001"), rounding=decimal.ROUND_UP, context=_CTX)
            return Quantity(value=rounded, format=self.format)
        return self


# The integers of the values pods repeat ("1", "16Gi"), least recently used out first: a pure function of the
# value (equal Decimals give equal results whatever their exponent), and bounded like the parse cache.
@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _milli_of(value: Decimal) -> int:
    return int((value * 1000).to_integral_value(rounding=decimal.ROUND_CEILING))


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _integer_of(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=decimal.ROUND_CEILING))


def parse(text: object, *, field: str | None = None) -> Quantity:
    """Parse a quantity string (or an int, as YAML may hand us) exactly."""
    if isinstance(text, bool):
        raise QuantityError(text, "expected a string", field=field)
    if isinstance(text, int):
        text = str(text)
    if not isinstance(text, str):
        raise QuantityError(text, "expected a string", field=field)
    if not text or len(text) > _MAX_TEXT:  # checked before the cache, which thus never holds a long string
        raise QuantityError(text, "empty or too long", field=field)
    parsed = _parse_text(text)
    if isinstance(parsed, _Invalid):
        raise QuantityError(text, parsed.detail, field=field)
    return parsed


@dataclass(frozen=True, slots=True)
class _Invalid:
    """Why a string is no quantity; cached like a success, the error (which names the field) is built per call."""

    detail: str = ""


# A whole number needs no Decimal arithmetic: with at most this many digits it times any suffix stays exact within
# _CTX's 80 digits (2**60 and 10**18 have 19), so the integer product is the value the general path computes.
_MAX_WHOLE_DIGITS = 40
_WHOLE_SCALES: dict[str, tuple[int, Format]] = {
    **{suffix: (1 << power, "BinarySI") for suffix, power in _BINARY.items()},
    **{suffix: (10**power, "DecimalSI") for suffix, power in _DECIMAL.items() if power >= 0},
}


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parse_text(text: str) -> Quantity | _Invalid:
    """The pure string -> value step of :func:`parse`; safe to share because Quantity and Decimal are immutable."""
    whole = _whole_quantity(text)
    return whole if whole is not None else _parse_general(text)


def _parse_general(text: str) -> Quantity | _Invalid:
    """Any text: the shape, then the suffix, then exact Decimal arithmetic."""
    match = _SHAPE.fullmatch(text)
    if match is None:
        return _Invalid()
    sign, number, suffix = match.groups()
    fmt: Format
    if suffix in _BINARY:
        fmt = "BinarySI"
        scale = Decimal(2) ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        fmt = "DecimalSI"
        scale = Decimal(10) ** _DECIMAL[suffix] if _DECIMAL[suffix] >= 0 else Decimal(1).scaleb(_DECIMAL[suffix])
    else:
        exp = _EXPONENT.fullmatch(suffix)
        if exp is None:
            return _Invalid(f"unknown suffix {suffix!r}")
        power = int(exp.group(1))
        if abs(power) > _MAX_EXPONENT:
            return _Invalid("exponent out of range")
        fmt = "DecimalExponent"
        scale = Decimal(1).scaleb(power)
    try:
        value = _CTX.multiply(Decimal(number), scale)
    except decimal.DecimalException:
        return _Invalid("value out of range")
    # The API server keeps nano precision and rounds anything finer up.
    value = _round_up_to_nano(value)
    if sign == "-":
        value = _CTX.minus(value)  # ``-value`` would round to the default context's 28 digits
    return Quantity(value=value, format=fmt)


def _whole_quantity(text: str) -> Quantity | None:
    """``12Gi``, ``8``, ``-3k``: a whole number and a suffix that does not divide it, parsed with integers; else None.

    The same value (and exponent: 0) and format as the general path of :func:`_parse_text`, which takes every
    other text (fractions, exponents, milli and smaller suffixes, non-ASCII digits, errors).
    """
    suffix = text[-2:] if text[-2:] in _BINARY else ("" if text[-1:].isdigit() else text[-1:])
    scale = _WHOLE_SCALES.get(suffix)
    if scale is None:
        return None
    number = text[: len(text) - len(suffix)]
    negative = number[:1] == "-"
    if number[:1] in ("+", "-"):
        number = number[1:]
    if not (number.isascii() and number.isdigit()) or len(number) > _MAX_WHOLE_DIGITS:
        return None
    value = int(number) * scale[0]
    return Quantity(value=Decimal(-value if negative else value), format=scale[1])


def cpu_millis(text: object, *, field: str | None = None) -> int:
    """CPU quantity to millicores, rounding up as the API server does."""
    return parse(text, field=field).milli()


def to_bytes(text: object, *, field: str | None = None) -> int:
    """Memory or hugepages quantity to bytes, rounding up as the API server does."""
    return parse(text, field=field).integer()


def canonical(text: object, *, field: str | None = None) -> str:
    """The API server's canonical string for ``text``."""
    return str(parse(text, field=field))


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)  # plans and messages print the same few sizes over and over
def format_millicores(millis: int) -> str:
    """Canonical CPU quantity for an integer number of millicores."""
    return format_quantity(Decimal(millis).scaleb(-3), "DecimalSI")


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def format_bytes(count: int) -> str:
    """Canonical memory quantity for a byte count (binary suffixes where exact)."""
    if -1024 < count < 1024:  # written in decimal (format_quantity's rule): the Decimal path
        return format_quantity(Decimal(count), "BinarySI")
    return _binary_text(count)


def human_bytes(count: int) -> str:
    """``64Gi``, ``54.9Gi``, ``512``: the largest binary unit keeping the value at least 1, for people.

    Exact (a whole number of the unit) or one decimal; :func:`format_bytes` is the exact canonical form.
    """
    for suffix, shift in sorted(_BINARY.items(), key=lambda item: -item[1]):
        size = 1 << shift
        if count >= size:
            whole, rest = divmod(count, size)
            return f"{whole}{suffix}" if rest == 0 else f"{count / size:.1f}{suffix}"
    return str(count)


def format_quantity(value: Decimal, fmt: Format) -> str:
    """Serialise like ``Quantity.String()`` in apimachinery."""
    if value == 0:
        return "0"
    if fmt == "BinarySI":
        if -1024 < value < 1024 or value != value.to_integral_value():
            fmt = "DecimalSI"
        else:
            return _binary_text(int(value))
    mantissa, exponent = _canonical_decimal(value)
    suffix: str | None
    if fmt == "DecimalExponent":
        suffix = "" if exponent == 0 else f"e{exponent}"
    else:
        suffix = _decimal_suffix(exponent)
        if suffix is None:  # beyond Exa or below nano: fall back to an exponent
            suffix = f"e{exponent}"
    return f"{mantissa}{suffix}"


def _binary_text(number: int) -> str:
    """A whole number of at least 1024 in magnitude in BinarySI: the largest binary suffix that divides it."""
    power = 0
    while power < 60 and number % 1024 == 0:
        number //= 1024
        power += 10
    return f"{number}{_BINARY_BY_EXP.get(power, '')}"


def _decimal_suffix(exponent: int) -> str | None:
    return _DECIMAL_BY_EXP.get(exponent)


def _canonical_decimal(value: Decimal) -> tuple[int, int]:
    """Integer mantissa and an exponent that is a multiple of 3 (``infDecAmount.AsCanonicalBytes``)."""
    sign, digits, exp = value.normalize(_CTX).as_tuple()
    assert isinstance(exp, int)
    mantissa = int("".join(map(str, digits)) or "0")
    # bring the exponent down to a multiple of three, growing the mantissa
    shift = exp % 3
    mantissa *= 10**shift
    exp -= shift
    if exp > 18:  # largest suffix is E; keep digits in the mantissa beyond that
        mantissa *= 10 ** (exp - 18)
        exp = 18
    return (-mantissa if sign else mantissa), exp


def _round_up_to_nano(value: Decimal) -> Decimal:
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -9:
        return value.quantize(Decimal("1e-9"), rounding=decimal.ROUND_UP, context=_CTX)
    return value
