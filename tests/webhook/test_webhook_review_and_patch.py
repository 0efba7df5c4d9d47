"""The AdmissionReview envelope, JSONPatch construction and the response constructors."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.responses import JSONResponse
from webhook_testkit import apply_patch, review_bytes, review_names

from webhook import errors, patch, responses, review

# -- parsing -------------------------------------------------------------------------------------------


def test_a_recorded_binding_review_parses_with_its_subresource_and_object() -> None:
    request = review.parse_request(review_bytes("binding-generate-name-train"))
    assert request.operation == "CREATE"
    assert request.sub_resource == "binding"
    assert request.kind.kind == "Binding"
    assert request.obj["target"] == {"kind": "Node", "name": "node-a"}
    assert request.describe() == "CREATE pods/binding ml/train-x7k2p"


def test_a_mutating_create_without_subresource_parses_to_an_empty_one() -> None:
    request = review.parse_request(review_bytes("create-mutate-generate-name-train"))
    assert request.sub_resource == ""
    assert request.name == ""
    assert request.dry_run is False
    assert request.old_obj is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("body-not-json.txt", "request body is not JSON"),
        ("body-array", "request body must be a JSON object, got list"),
        ("body-wrong-api-version", "expected apiVersion 'admission.k8s.io/v1' and kind 'AdmissionReview'"),
        ("body-wrong-kind", "got 'admission.k8s.io/v1' and 'AdmissionResponse'"),
        ("body-missing-request", "the AdmissionReview has no request"),
        ("body-request-without-uid", "invalid AdmissionReview: request.uid: Field required"),
        ("body-bad-operation", "invalid AdmissionReview: request.operation"),
    ],
)
def test_a_body_that_is_not_an_admission_review_is_a_malformed_review(name: str, message: str) -> None:
    with pytest.raises(errors.MalformedReview) as caught:
        review.parse_request(review_bytes(name))
    assert message in caught.value.message


def test_every_recorded_malformed_body_is_covered_by_the_table() -> None:
    assert set(review_names("body-")) == {
        "body-array",
        "body-bad-operation",
        "body-missing-request",
        "body-request-without-uid",
        "body-wrong-api-version",
        "body-wrong-kind",
    }


def test_a_null_dry_run_reads_as_false() -> None:
    document = json.loads(review_bytes("create-mutate-burstable-web"))
    document["request"]["dryRun"] = None
    assert review.parse_request(json.dumps(document).encode()).dry_run is False


def test_deeply_nested_json_is_a_malformed_review_not_a_crash() -> None:
    with pytest.raises(errors.MalformedReview):
        review.parse_request(b"[" * 100_000 + b"]" * 100_000)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=256))
def test_arbitrary_bytes_either_parse_or_raise_malformed_review(body: bytes) -> None:
    try:
        review.parse_request(body)
    except errors.MalformedReview as err:
        assert err.message


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _same_json(left: object, right: object) -> bool:
    """Equal as JSON values, NaN included (NaN != NaN), and of the same types (1 is not 1.0 here)."""
    if isinstance(left, float) and isinstance(right, float) and left != left:
        return right != right
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same_json(left[k], right[k]) for k in left)  # type: ignore[call-overload]
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_same_json, left, right))  # type: ignore[arg-type]
    return left == right


@settings(max_examples=300, deadline=None)
@given(value=_JSON_VALUES, ascii_only=st.booleans(), duplicate=st.booleans())
def test_the_fast_decoder_reads_every_body_as_json_loads_does(value: object, ascii_only: bool, duplicate: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if duplicate:  # a repeated key: the last one wins in both
        body = b'{"k":1,"k":' + body + b"}"
    assert _same_json(review.decode_json(body), json.loads(body))


@pytest.mark.parametrize(
    "body",
    [b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16"), b'{"\xed\xa0\x80": 1}', b'"\\ud800"', b"[" * 300 + b"]" * 300],
    ids=["utf-8-bom", "utf-16", "surrogate-bytes", "escaped-lone-surrogate", "nested-300"],
)
def test_bodies_the_fast_decoder_refuses_are_read_by_json_loads(body: bytes) -> None:
    assert _same_json(review.decode_json(body), json.loads(body))


@pytest.mark.parametrize("body", [b"", b"{", b"nan", b'{"a":1} x', b"\xff{}", b"[1,]"])
def test_bodies_neither_decoder_reads_raise_what_json_loads_raises(body: bytes) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(body)
    with pytest.raises(type(expected.value), match="^" + re.escape(str(expected.value)) + "$"):
        review.decode_json(body)


def test_the_response_envelope_omits_unset_fields() -> None:
    document = review.response_document(responses.allowed("abc"))
    assert document == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "abc", "allowed": True},
    }


def _starlette_body(response: review.AdmissionResponse) -> bytes:
    return JSONResponse(review.response_document(response)).body


# every character class JSON writes differently: quotes, backslash, the C0 controls, DEL, beyond ASCII and the BMP,
# the separators JavaScript treats as line ends
_ANY_TEXT = st.text(
    st.characters(codec="utf-8")
    | st.sampled_from(['"', "\\", "\x00", "\x1f", "\x7f", "\u2028", "\u2029", "\U0001f600"]),
    max_size=24,
)


@settings(max_examples=300, deadline=None)
@given(
    uid=_ANY_TEXT,
    allowed=st.booleans(),
    status=st.none() | st.tuples(st.integers(400, 599), _ANY_TEXT, _ANY_TEXT),
    patched=st.booleans(),
    warnings=st.none() | st.lists(_ANY_TEXT, max_size=3),
    audit=st.none() | st.dictionaries(_ANY_TEXT, _ANY_TEXT, max_size=3),
)
def test_the_response_body_is_what_starlette_would_send_byte_for_byte(
    uid: str,
    allowed: bool,
    status: tuple[int, str, str] | None,
    patched: bool,
    warnings: list[str] | None,
    audit: dict[str, str] | None,
) -> None:
    response = review.AdmissionResponse(
        uid=uid,
        allowed=allowed,
        status=None if status is None else review.Status(code=status[0], reason=status[1], message=status[2]),
        patch=patch.encode([patch.Operation("add", "/metadata", {"a": uid})]) if patched else None,
        patch_type="JSONPatch" if patched else None,
        warnings=warnings,
        audit_annotations=audit,
    )
    assert review.response_body(response) == _starlette_body(response)


def test_a_response_no_utf8_body_can_carry_fails_as_starlette_fails() -> None:
    response = responses.denied("abc", "pod \ud800 is invalid", reason="Invalid", code=422)
    with pytest.raises(UnicodeEncodeError):
        _starlette_body(response)
    with pytest.raises(UnicodeEncodeError):
        review.response_body(response)


# -- JSONPatch -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "escaped"),
    [("numaguard.io/plan", "numaguard.io~1plan"), ("a~b", "a~0b"), ("~/", "~0~1"), ("plain", "plain")],
)
def test_pointer_tokens_escape_tilde_before_slash(token: str, escaped: str) -> None:
    assert patch.escape(token) == escaped


def test_annotations_absent_are_added_as_a_whole_map() -> None:
    ops = patch.annotation_ops({"metadata": {"name": "p"}}, {"numaguard.io/plan": "x", "numaguard.io/node": None})
    assert [op.to_json() for op in ops] == [
        {"op": "add", "path": "/metadata/annotations", "value": {"numaguard.io/plan": "x"}}
    ]


def test_existing_annotations_get_add_replace_and_remove_per_key() -> None:
    obj = {"metadata": {"annotations": {"keep": "1", "numaguard.io/plan": "old", "numaguard.io/node": "n"}}}
    ops = patch.annotation_ops(obj, {"numaguard.io/plan": "new", "numaguard.io/node": None, "numaguard.io/x": "v"})
    assert [op.to_json() for op in ops] == [
        {"op": "remove", "path": "/metadata/annotations/numaguard.io~1node"},
        {"op": "replace", "path": "/metadata/annotations/numaguard.io~1plan", "value": "new"},
        {"op": "add", "path": "/metadata/annotations/numaguard.io~1x", "value": "v"},
    ]


def test_an_object_without_metadata_gets_it_created() -> None:
    ops = patch.annotation_ops({}, {"k": "v"})
    assert apply_patch({}, [op.to_json() for op in ops]) == {"metadata": {"annotations": {"k": "v"}}}


def test_nothing_to_change_gives_no_operations() -> None:
    assert patch.annotation_ops({"metadata": {"annotations": {"k": "v"}}}, {"k": "v", "gone": None}) == []
    assert patch.annotation_ops({"metadata": {}}, {"gone": None}) == []


def test_the_patch_is_standard_padded_base64_of_the_json_array() -> None:
    ops = [patch.Operation("add", "/metadata/annotations/a~1b", "é")]
    decoded = base64.b64decode(patch.encode(ops), validate=True)
    assert json.loads(decoded) == [{"op": "add", "path": "/metadata/annotations/a~1b", "value": "é"}]


_keys = st.text(alphabet="ab/~.-", min_size=1, max_size=6)
_annotation_maps = st.dictionaries(_keys, st.text(max_size=4), max_size=5)


@settings(max_examples=300, deadline=None)
@given(
    current=st.one_of(st.none(), _annotation_maps),
    desired=st.dictionaries(_keys, st.one_of(st.none(), st.text(max_size=4)), max_size=5),
)
def test_annotation_ops_reach_the_desired_map_and_then_patch_nothing(
    current: dict[str, str] | None, desired: dict[str, str | None]
) -> None:
    obj: dict[str, Any] = {"metadata": {} if current is None else {"annotations": dict(current)}}
    patched = apply_patch(obj, [op.to_json() for op in patch.annotation_ops(obj, desired)])
    annotations = patched["metadata"].get("annotations", {})
    for key, value in desired.items():
        assert annotations.get(key) == value
    for key, value in (current or {}).items():
        if key not in desired:
            assert annotations[key] == value
    assert patch.annotation_ops(patched, desired) == []


_objects = st.one_of(
    st.just({}),
    st.just({"metadata": None}),
    st.just({"metadata": "x"}),
    st.builds(
        lambda a: {"metadata": {"name": "p", "annotations": a}}, st.one_of(st.none(), st.just([]), _annotation_maps)
    ),
    # annotations that hold a non-string under a desired key: patched from scratch, never from the memo
    st.builds(lambda a, k: {"metadata": {"annotations": {**a, k: 1}}}, _annotation_maps, _keys),
    st.builds(lambda k: {"metadata": {"annotations": {k: "v" * 20_000}}}, _keys),  # too much text to keep
)


@settings(max_examples=500, deadline=None)
@given(
    objs=st.lists(_objects, min_size=1, max_size=4),
    desired=st.dictionaries(_keys, st.one_of(st.none(), st.text(max_size=4)), max_size=5),
)
def test_the_kept_encoded_patch_is_the_one_each_object_gets_from_scratch(
    objs: list[dict[str, Any]], desired: dict[str, str | None]
) -> None:
    # several objects against the same desired map, each twice: a kept patch must never be another object's
    for obj in objs + objs:
        ops = patch.annotation_ops(obj, desired)
        assert patch.encoded_annotation_ops(obj, desired) == (patch.encode(ops) if ops else "")


def test_patched_with_an_encoded_patch_is_patched_with_its_operations() -> None:
    ops = [patch.Operation("add", "/metadata/annotations", {"k": "v"})]
    assert responses.patched_with("u", patch.encode(ops), warnings=["w"]) == responses.patched("u", ops, warnings=["w"])
    assert responses.patched_with("u", "", warnings=["w"]) == responses.patched("u", [], warnings=["w"])


# -- responses -------------------------------------------------------------------------------------------


def test_patched_without_operations_is_a_plain_allow() -> None:
    response = responses.patched("u", [], warnings=["w"])
    assert response.patch is None and response.patch_type is None
    assert response.warnings == ["w"]


def test_patched_sets_the_patch_type() -> None:
    response = responses.patched("u", [patch.Operation("add", "/metadata/annotations", {"k": "v"})])
    assert response.patch_type == "JSONPatch"
    assert response.allowed is True


def test_a_denial_carries_code_reason_and_message() -> None:
    response = responses.denied("u", "no", reason="Forbidden", code=403)
    assert review.response_document(response)["response"] == {
        "uid": "u",
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "no"},
    }


def test_a_denial_code_below_400_is_refused() -> None:
    with pytest.raises(ValueError, match="HTTP error code"):
        responses.denied("u", "no", reason="Forbidden", code=200)


def test_warnings_are_one_line_deduplicated_and_cut_to_120_characters() -> None:
    response = responses.allowed("u", warnings=["a\nb", "a b", "x" * 300, " "])
    assert response.warnings is not None
    assert response.warnings[:1] == ["a b"]
    assert len(response.warnings) == 2
    assert len(response.warnings[1]) == 120 and response.warnings[1].endswith("…")
