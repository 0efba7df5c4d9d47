"""Quantities past int64 are capped, as apimachinery documents, so every engine integer formats back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import quantity
from shared.resources import CPU, INT64_MAX, INT64_MIN, MEMORY, to_int


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (MEMORY, "1e200", INT64_MAX),
        (MEMORY, "9223372036854775807", INT64_MAX),
        (MEMORY, "9223372036854775808", INT64_MAX),
        (CPU, "1e200", INT64_MAX),
        (CPU, "9223372036854775807m", INT64_MAX),
        (MEMORY, "-1e200", INT64_MIN),
        (MEMORY, "64Gi", 64 << 30),
        (CPU, "1500m", 1500),
    ],
)
def test_to_int_caps_at_int64(name: str, text: str, expected: int) -> None:
    assert to_int(name, text) == expected


@given(mantissa=st.integers(min_value=1, max_value=999), exponent=st.integers(min_value=0, max_value=999))
def test_every_engine_integer_formats_to_a_quantity_the_parser_takes_back(mantissa: int, exponent: int) -> None:
    text = f"{mantissa}e{exponent}"
    millis, count = to_int(CPU, text), to_int(MEMORY, text)
    assert quantity.parse(quantity.format_millicores(millis)).milli() == millis
    assert quantity.parse(quantity.format_bytes(count)).integer() == count
