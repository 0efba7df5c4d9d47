"""Exact quantity parsing, the API server's canonical form, and Go's Add/Cmp semantics."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import quantity
from shared.errors import QuantityError


@dataclass(frozen=True)
class ParseCase:
    description: str
    text: object
    value: Decimal
    format: quantity.Format
    milli: int
    integer: int
    canonical: str


PARSE_CASES = [
    ParseCase("whole cores", "8", Decimal(8), "DecimalSI", 8000, 8, "8"),
    ParseCase("millicores", "500m", Decimal("0.5"), "DecimalSI", 500, 1, "500m"),
    ParseCase("fraction becomes millis", "1.5", Decimal("1.5"), "DecimalSI", 1500, 2, "1500m"),
    ParseCase("yaml integer", 2, Decimal(2), "DecimalSI", 2000, 2, "2"),
    ParseCase("binary gibibytes", "16Gi", Decimal(16 * 2**30), "BinarySI", 16 * 2**33 * 125, 16 * 2**30, "16Gi"),
    ParseCase(
        "fractional binary re-expressed",
        "1.5Gi",
        Decimal(1536 * 2**20),
        "BinarySI",
        1536 * 2**20 * 1000,
        1536 * 2**20,
        "1536Mi",
    ),
    ParseCase("small binary prints decimal", "0.5Ki", Decimal(512), "BinarySI", 512_000, 512, "512"),
    ParseCase("decimal mega", "1M", Decimal(10**6), "DecimalSI", 10**9, 10**6, "1M"),
    ParseCase("exponent kept", "1e3", Decimal(1000), "DecimalExponent", 10**6, 1000, "1e3"),
    ParseCase("exponent normalised", "1.5e3", Decimal(1500), "DecimalExponent", 1_500_000, 1500, "1500"),
    ParseCase("micro rounds millis up", "100u", Decimal("0.0001"), "DecimalSI", 1, 1, "100u"),
    ParseCase("nano precision kept", "1n", Decimal("1e-9"), "DecimalSI", 1, 1, "1n"),
    ParseCase("below nano rounds up", "0.0000000001", Decimal("1e-9"), "DecimalSI", 1, 1, "1n"),
    ParseCase("negative", "-1", Decimal(-1), "DecimalSI", -1000, -1, "-1"),
    ParseCase("explicit plus", "+2Mi", Decimal(2 * 2**20), "BinarySI", 2 * 2**20 * 1000, 2 * 2**20, "2Mi"),
    ParseCase("zero", "0", Decimal(0), "DecimalSI", 0, 0, "0"),
    ParseCase("leading dot", ".5", Decimal("0.5"), "DecimalSI", 500, 1, "500m"),
    ParseCase("exa", "2E", Decimal(2 * 10**18), "DecimalSI", 2 * 10**21, 2 * 10**18, "2E"),
]


@pytest.mark.parametrize("case", PARSE_CASES, ids=lambda c: c.description)
def test_parse_gives_exact_value_units_and_canonical_form(case: ParseCase) -> None:
    q = quantity.parse(case.text)
    assert (q.value, q.format) == (case.value, case.format)
    assert q.milli() == case.milli
    assert q.integer() == case.integer
    assert quantity.canonical(case.text) == case.canonical


MALFORMED = ["", "1x", "1K", "1e", "1.2.3", "..", "m", "Gi", "1 ", " 1", "1Gi1", "1e99999", "--1", "0x10", "1_000", "١"]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_quantity_raises_error_naming_the_string(text: str) -> None:
    with pytest.raises(QuantityError) as err:
        quantity.parse(text, field="spec.containers[0].resources.limits[cpu]")
    assert repr(text) in str(err.value)
    assert err.value.field == "spec.containers[0].resources.limits[cpu]"


@pytest.mark.parametrize("value", [True, None, 1.5, ["1"], {"a": 1}])
def test_non_string_non_integer_input_is_rejected(value: object) -> None:
    with pytest.raises(QuantityError):
        quantity.parse(value)


_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E-2", "e+6"]


@st.composite
def quantity_texts(draw: st.DrawFn) -> str:
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.integers(min_value=0, max_value=10**12))
    fraction = draw(st.one_of(st.just(""), st.from_regex(r"\.[0-9]{0,12}", fullmatch=True)))
    return f"{sign}{whole}{fraction}{draw(st.sampled_from(_SUFFIXES))}"


@given(quantity_texts())
def test_canonical_form_parses_back_to_the_exact_same_value(text: str) -> None:
    original = quantity.parse(text)
    again = quantity.parse(quantity.canonical(text))
    assert again.value == original.value


@given(quantity_texts())
def test_canonical_form_is_idempotent(text: str) -> None:
    once = quantity.canonical(text)
    assert quantity.canonical(once) == once


@given(st.decimals(min_value=0, max_value=10**9, places=9, allow_nan=False, allow_infinity=False))
def test_millicores_and_bytes_round_up(value: Decimal) -> None:
    q = quantity.parse(str(value))
    assert q.milli() == math.ceil(value * 1000)
    assert q.integer() == math.ceil(value)


_GO_SHAPE = re.compile(r"([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)", re.ASCII)


@given(st.text(max_size=20).filter(lambda s: _GO_SHAPE.fullmatch(s) is None))
def test_anything_outside_the_api_server_grammar_raises_naming_the_string(text: str) -> None:
    with pytest.raises(QuantityError) as err:
        quantity.parse(text)
    assert repr(text) in str(err.value)


def test_formatting_helpers_render_engine_units_canonically() -> None:
    assert quantity.format_millicores(1500) == "1500m"
    assert quantity.format_millicores(4000) == "4"
    assert quantity.format_bytes(16 * 2**30) == "16Gi"
    assert quantity.format_bytes(1000) == "1k"  # BinarySI below 1024 prints as DecimalSI, as in Go


@dataclass(frozen=True)
class AddCase:
    description: str
    left: str
    right: str
    total: str


ADD_CASES = [
    AddCase("binary plus binary stays binary", "60Gi", "60Gi", "120Gi"),
    AddCase("left format wins", "1G", "1Gi", "2073741824"),
    AddCase("zero takes the right format", "0", "512Mi", "512Mi"),
    AddCase("millis add exactly", "500m", "1", "1500m"),
]


@pytest.mark.parametrize("case", ADD_CASES, ids=lambda c: c.description)
def test_addition_keeps_go_format_rules(case: AddCase) -> None:
    assert str(quantity.parse(case.left) + quantity.parse(case.right)) == case.total


def test_ordering_compares_values_while_equality_stays_structural() -> None:
    one, thousand_milli = quantity.parse("1"), quantity.parse("1000m")
    assert one.same_value(thousand_milli)
    assert one <= thousand_milli and one >= thousand_milli
    assert quantity.parse("1Gi") > quantity.parse("1G")
    assert quantity.parse("500m") < quantity.parse("1")


def test_rounding_up_to_milli_is_what_api_server_defaulting_stores() -> None:
    assert str(quantity.parse("100u").rounded_up_to_milli()) == "1m"
    assert str(quantity.parse("1.0001").rounded_up_to_milli()) == "1001m"
    assert quantity.parse("16Gi").rounded_up_to_milli() == quantity.parse("16Gi")


def _same(a: quantity.Quantity | object, b: quantity.Quantity | object) -> bool:
    """Equal quantities down to the Decimal's digits and exponent (``Decimal('1E+3') == Decimal(1000)``)."""
    if isinstance(a, quantity.Quantity) and isinstance(b, quantity.Quantity):
        return a == b and a.value.as_tuple() == b.value.as_tuple()
    return a == b


@given(
    st.one_of(
        quantity_texts(),
        st.builds(
            lambda sign, digits, suffix: f"{sign}{digits}{suffix}",
            st.sampled_from(["", "+", "-", "--", "+-"]),
            st.from_regex(r"[0-9]{0,45}", fullmatch=True),
            st.sampled_from([*_SUFFIXES, "i", "K", "e", "Mi5", " "]),
        ),
        st.text(max_size=8),
    )
)
def test_whole_number_fast_path_parses_as_the_general_path_does(text: str) -> None:
    whole = quantity._whole_quantity(text)
    if whole is not None:
        assert _same(whole, quantity._parse_general(text))
    assert _same(quantity._parse_text.__wrapped__(text), quantity._parse_general(text))


@pytest.mark.parametrize("text", ["12288Mi", "8", "0", "-0", "+5", "-3Ki", "1E", "007Gi", "9" * 40 + "Ei"])
def test_whole_number_fast_path_takes_the_usual_texts(text: str) -> None:
    whole = quantity._whole_quantity(text)
    assert whole is not None and _same(whole, quantity._parse_general(text))


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_format_bytes_writes_any_byte_count_as_the_decimal_path_does(count: int) -> None:
    assert quantity.format_bytes.__wrapped__(count) == quantity.format_quantity(Decimal(count), "BinarySI")
