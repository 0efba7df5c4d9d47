"""AdmissionReview v1 as pydantic models, and the one parser of request bodies.

The request models accept exactly what kube-apiserver sends
(admission-and-api.md §1) and ignore fields they do not know, so a newer
apiserver never breaks us.  ``object`` / ``oldObject`` stay raw JSON values:
their shape depends on the resource (a Pod, a Binding) and a malformed one is
an admission *denial* decided by the handler (``allowed: false`` with code
400), not a malformed review (HTTP 400).

This module must not decide anything about pods; it only reads and writes the
envelope.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from webhook import errors

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")


class GroupVersionKind(_Model):
    group: str = ""
    version: str = ""
    kind: str = ""


class GroupVersionResource(_Model):
    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(_Model):
    username: str = ""
    uid: str = ""
    groups: list[str] = Field(default_factory=list)


class AdmissionRequest(_Model):
    """``AdmissionReview.request`` (R1.2)."""

    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str = ""
    request_kind: GroupVersionKind | None = None
    request_resource: GroupVersionResource | None = None
    request_sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    operation: Operation
    user_info: UserInfo = Field(default_factory=UserInfo)
    # Raw JSON: a Pod, a Binding, or anything the caller sent; the handler judges it.
    obj: Any = Field(default=None, alias="object")
    old_obj: Any = Field(default=None, alias="oldObject")
    dry_run: bool = False
    options: Any = None

    @field_validator("sub_resource", "request_sub_resource", "name", "namespace", mode="before")
    @classmethod
    def _null_string_is_empty(cls, value: object) -> object:
        return "" if value is None else value

    @field_validator("dry_run", mode="before")
    @classmethod
    def _null_dry_run_is_false(cls, value: object) -> object:
        return False if value is None else value

    def describe(self) -> str:
        """``CREATE pods/binding ml/train-x7k2``: how logs and messages name the request."""
        resource = self.resource.resource + (f"/{self.sub_resource}" if self.sub_resource else "")
        target = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.operation} {resource} {target}".rstrip()


class _ReviewIn(_Model):
    api_version: str
    kind: str
    request: AdmissionRequest | None = None


class Status(_Model):
    """The ``metav1.Status`` subset a denial carries (R2.4)."""

    code: int
    reason: str
    message: str


class AdmissionResponse(_Model):
    """``AdmissionReview.response`` (R2.1-R2.6)."""

    uid: str
    allowed: bool
    status: Status | None = None
    patch: str | None = None
    patch_type: Literal["JSONPatch"] | None = None
    warnings: list[str] | None = None
    audit_annotations: dict[str, str] | None = None


def parse_request(body: bytes) -> AdmissionRequest:
    """The ``request`` of an AdmissionReview v1 body; :class:`~webhook.errors.MalformedReview` otherwise."""
    try:
        document = decode_json(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise errors.MalformedReview(f"request body is not JSON: {err}") from None
    except RecursionError:
        raise errors.MalformedReview("request body is not JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise errors.MalformedReview(f"request body must be a JSON object, got {type(document).__name__}")
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if api_version != API_VERSION or kind != KIND:
        raise errors.MalformedReview(
            f"expected apiVersion {API_VERSION!r} and kind {KIND!r}, got {api_version!r} and {kind!r}"
        )
    if document.get("request") is None:
        raise errors.MalformedReview("the AdmissionReview has no request")
    try:
        review = _ReviewIn.model_validate(document)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise errors.MalformedReview(f"invalid AdmissionReview: {where}: {first['msg']}") from None
    if review.request is None:  # pragma: no cover - excluded above; keeps the type narrow
        raise errors.MalformedReview("the AdmissionReview has no request")
    return review.request


def decode_json(body: bytes) -> Any:
    """``json.loads(body)``: the same value, or the same exception, in about a third of the time.

    pydantic-core's parser answers first.  Wherever it refuses a body it hands
    over to ``json.loads``, which accepts what pydantic-core does not (a UTF-8
    BOM, UTF-16/32 bodies, lone surrogates, nesting deeper than 200) or raises
    the error this module has always reported; where it accepts one, it gives
    the value ``json.loads`` gives (big integers, ``NaN``/``Infinity``,
    duplicate keys: the last wins), held by a property test
    (``tests/webhook/test_webhook_review_and_patch.py``).
    """
    try:
        return pydantic_core.from_json(body, cache_strings="keys")
    except ValueError:
        return json.loads(body)


def response_document(response: AdmissionResponse) -> dict[str, Any]:
    """The full response envelope, omitting unset fields (the apiserver reads absent, not null)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "response": response.model_dump(by_alias=True, exclude_none=True),
    }


_ENVELOPE_HEAD = json.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": None}, separators=(",", ":"))[
    : -len("null}")
].encode()


def response_body(response: AdmissionResponse) -> bytes:
    """What Starlette's ``JSONResponse(response_document(response))`` sends, byte for byte, encoded in one step.

    pydantic-core writes the response model as ``json.dumps(..., ensure_ascii=False,
    separators=(",", ":"))`` writes its dump (held by a test over every character
    class JSON escapes); a value it cannot write (a lone surrogate, which no UTF-8
    body can carry either) takes Starlette's path, and fails there as it always did.
    """
    try:
        encoded = AdmissionResponse.__pydantic_serializer__.to_json(response, by_alias=True, exclude_none=True)
    except pydantic_core.PydanticSerializationError:
        return _starlette_body(response_document(response))
    return _ENVELOPE_HEAD + encoded + b"}"


def _starlette_body(document: dict[str, Any]) -> bytes:
    # starlette.responses.JSONResponse.render
    return json.dumps(document, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()
