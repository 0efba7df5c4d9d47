"""Damaged and foreign files: each one a clear typed error, never wrong or empty data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from enforcer.state import checkpoint, errors

STATE: dict[str, Any] = {"cpu": {"defaultCpuSet": "0,5-15", "entries": {"pod-1": {"app": "1-4"}}}, "n": 12}


def _encoded(data: dict[str, Any] = STATE) -> bytes:
    return checkpoint.encode(data, path="state.json")


def _decode(raw: bytes) -> dict[str, Any]:
    return checkpoint.decode(raw, path="state.json")


def test_a_bad_file_on_disk_makes_load_raise_with_the_kubelets_words(tmp_path: Path) -> None:
    store = checkpoint.CheckpointStore(tmp_path / "s.json")
    store.save(STATE)
    store.path.write_bytes(store.path.read_bytes().replace(b"1-4", b"1-5"))

    with pytest.raises(errors.CheckpointCorruptError) as caught:
        store.load()

    assert caught.value.message.startswith(f"checkpoint is corrupted: {store.path}: checksum mismatch")
    assert caught.value.reason == "CheckpointCorrupt"


def test_a_checksum_mismatch_names_the_expected_and_the_actual_checksum() -> None:
    envelope = json.loads(_encoded())
    envelope["data"]["n"] = 13

    with pytest.raises(errors.CheckpointCorruptError) as caught:
        _decode(json.dumps(envelope).encode())

    assert caught.value.expected_checksum == envelope["checksum"]
    assert caught.value.actual_checksum == checkpoint.checksum_of(envelope["data"], 1)
    assert f"records {envelope['checksum']}" in caught.value.message
    assert f"hashes to {caught.value.actual_checksum}" in caught.value.message


@pytest.mark.parametrize("content", [b"", b"\n", b"   \n\t"], ids=["empty", "newline", "whitespace"])
def test_an_empty_file_is_corrupt_not_a_fresh_start(content: bytes) -> None:
    with pytest.raises(errors.CheckpointCorruptError, match="empty"):
        _decode(content)


def test_every_truncation_of_a_file_is_detected() -> None:
    raw = _encoded()

    for length in range(len(raw.rstrip())):
        with pytest.raises(errors.CheckpointCorruptError):
            _decode(raw[:length])


def test_a_file_cut_in_the_middle_says_it_is_truncated() -> None:
    raw = _encoded()

    with pytest.raises(errors.CheckpointCorruptError, match="truncated"):
        _decode(raw[: len(raw) // 2])


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (b"{not json}", "not JSON"),
        (b"[1, 2]", "top level is list"),
        (b'{"format": "numaguard-state", "version": 1, "checksum": "x", "data": {}, "data": {}}', "duplicate key"),
        (b'{"format": "numaguard-state", "version": 1, "checksum": "sha256:00", "data": {}}', "malformed checksum"),
        (b'{"format": "numaguard-state", "version": "1", "checksum": "x", "data": {}}', "not an integer"),
        (b'{"format": "numaguard-state", "version": 1, "checksum": "x"}', "damaged envelope"),
        (b'{"format": "numaguard-stbte", "version": 1, "checksum": "x", "data": {}}', "damaged envelope: format"),
        (b'{"fnrmat": "numaguard-state", "version": 1, "checksum": "x", "data": {}}', "damaged envelope"),
        (b'{"format": "numaguard-state", "version": 1, "checksum": "x", "data": NaN}', "NaN"),
    ],
    ids=[
        "binary",
        "not json",
        "a list",
        "duplicate key",
        "short checksum",
        "string version",
        "no data",
        "flipped format",
        "flipped key",
        "NaN",
    ],
)
def test_damaged_envelopes_are_corrupt_with_a_reason(content: bytes, detail: str) -> None:
    with pytest.raises(errors.CheckpointCorruptError, match=detail):
        _decode(content)


def test_a_data_section_that_is_not_an_object_is_corrupt() -> None:
    envelope = json.loads(_encoded())
    envelope["data"] = [1]

    with pytest.raises(errors.CheckpointCorruptError, match="data is not an object"):
        _decode(json.dumps(envelope).encode())


def test_a_foreign_format_is_a_version_error_naming_it() -> None:
    content = json.dumps({"format": "someone-else", "version": 1, "checksum": "x", "data": {}}).encode()

    with pytest.raises(errors.CheckpointVersionError, match="foreign format 'someone-else'") as caught:
        _decode(content)

    assert caught.value.found_format == "someone-else"


def test_the_kubelets_own_checkpoint_is_refused_as_foreign() -> None:
    kubelet = b'{"policyName":"static","defaultCpuSet":"0,5-15","entries":{},"checksum":1234567}'

    with pytest.raises(errors.CheckpointVersionError, match="not a numaguard-state file"):
        _decode(kubelet)


@pytest.mark.parametrize("version", [0, -3])
def test_a_version_below_one_is_refused(version: int) -> None:
    envelope = json.loads(_encoded())
    envelope["version"] = version

    with pytest.raises(errors.CheckpointVersionError, match=f"unknown version {version}"):
        _decode(json.dumps(envelope).encode())


def test_a_damaged_version_number_is_caught_by_the_checksum_not_migrated() -> None:
    data = {"admitted": ["p"]}
    raw = checkpoint.encode(data, path="s", version=2)
    damaged = raw.replace(b'"version": 2', b'"version": 1')
    migrated: list[dict[str, Any]] = []

    def upgrade(old: dict[str, Any]) -> dict[str, Any]:
        migrated.append(old)
        return old

    with pytest.raises(errors.CheckpointCorruptError, match="checksum mismatch"):
        checkpoint.decode(damaged, path="s", version=2, migrations={1: upgrade})

    assert migrated == []


# -- bit flips --------------------------------------------------------------------------

_ASCII_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-,", max_size=12)
_PLAIN_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | _ASCII_WORD,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_ASCII_WORD, children, max_size=4),
    max_leaves=20,
)
_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


def _flip(raw: bytes, bits: list[int]) -> bytes:
    damaged = bytearray(raw)
    for bit in bits:
        position = bit % (len(damaged) * 8)
        damaged[position // 8] ^= 1 << (position % 8)
    return bytes(damaged)


@settings(max_examples=300, deadline=None)
@given(data=st.dictionaries(_ASCII_WORD, _PLAIN_JSON, max_size=5), bit=st.integers(min_value=0))
def test_any_single_flipped_bit_is_detected(data: dict[str, Any], bit: int) -> None:
    damaged = _flip(_encoded(data), [bit])

    with pytest.raises(errors.CheckpointError):
        _decode(damaged)


@settings(max_examples=300, deadline=None)
@given(
    data=st.dictionaries(st.text(max_size=6), _ANY_JSON, max_size=5),
    bits=st.lists(st.integers(min_value=0), min_size=1, max_size=16),
)
def test_flipped_bits_anywhere_never_yield_wrong_data(data: dict[str, Any], bits: list[int]) -> None:
    raw = _encoded(data)
    damaged = _flip(raw, bits)
    assume(damaged != raw)

    try:
        loaded = _decode(damaged)
    except errors.CheckpointError:
        return
    # Only an edit the JSON reader cannot see (e.g. "\\u00e9" -> "\\u00E9") may pass, and then the data is intact.
    assert loaded == data


@pytest.mark.parametrize(
    ("written", "damaged"),
    [
        (b"1.5e+308", b"1.5e+309"),  # the flip hypothesis found: the reader made it inf, the checksum raised
        (b"1.5e+308", b"1.5e+708"),
        (b"-1.5e+308", b"-1.5e+309"),
    ],
)
def test_an_exponent_flipped_past_the_double_range_is_reported_as_corruption(written: bytes, damaged: bytes) -> None:
    value = float(written)
    raw = _encoded({"big": value})
    assert written in raw

    with pytest.raises(errors.CheckpointCorruptError, match="out of range for a double"):
        _decode(raw.replace(written, damaged))
