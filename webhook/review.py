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
    request = document.get("request")
    if request is None:
        raise errors.MalformedReview("the AdmissionReview has no request")
    plain = _plain_request(request)
    return plain if plain is not None else _validated_request(document)


def _validated_request(document: dict[str, Any]) -> AdmissionRequest:
    """The ``request`` of an envelope validated by the models, or their first error as a MalformedReview."""
    try:
        review = _ReviewIn.model_validate(document)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise errors.MalformedReview(f"invalid AdmissionReview: {where}: {first['msg']}") from None
    if review.request is None:  # pragma: no cover - excluded above; keeps the type narrow
        raise errors.MalformedReview("the AdmissionReview has no request")
    return review.request


# Keys pydantic would also read by field name (``populate_by_name``): a request carrying one takes the model's path.
_FIELD_NAMES_NOT_ALIASES = frozenset(
    name for name, info in AdmissionRequest.model_fields.items() if info.alias is not None and info.alias != name
)
_ABSENT = object()
_NULLABLE = ("subResource", "requestSubResource", "name", "namespace")
_OPERATIONS: dict[str, Operation] = {"CREATE": "CREATE", "UPDATE": "UPDATE", "DELETE": "DELETE", "CONNECT": "CONNECT"}


def _plain_request(request: object) -> AdmissionRequest | None:
    """The request read with plain dict access when it has the shape kube-apiserver sends; None otherwise.

    Validating the envelope with pydantic costs more per review than reading
    it.  This reads only requests whose every field already has exactly the
    type the model would produce (strings, a bool, the nested objects as
    objects of strings) and builds the model without re-validation, so the
    result equals ``AdmissionRequest.model_validate``'s.  Anything else (a
    wrong type, an empty uid, a missing field, a field spelt by its Python
    name) returns None and goes through pydantic, which gives the error
    messages this module has always given; a differential property test
    holds the two paths equal (``tests/webhook/test_webhook_review_and_patch.py``).
    """
    if type(request) is not dict or not _FIELD_NAMES_NOT_ALIASES.isdisjoint(request):
        return None
    uid, operation_name = request.get("uid"), request.get("operation")
    if type(uid) is not str or not uid or type(operation_name) is not str:
        return None
    operation = _OPERATIONS.get(operation_name)
    if operation is None:
        return None
    kind, resource = _plain_kind(request.get("kind")), _plain_resource(request.get("resource"))
    if kind is None or resource is None:
        return None
    request_kind = request_resource = None
    if request.get("requestKind") is not None:
        request_kind = _plain_kind(request["requestKind"])
        if request_kind is None:
            return None
    if request.get("requestResource") is not None:
        request_resource = _plain_resource(request["requestResource"])
        if request_resource is None:
            return None
    # null reads as "", as the model's ``before`` validator has it
    strings = _plain_strings({key: _null_as_empty(request.get(key)) for key in _NULLABLE}, _NULLABLE)
    if strings is None:
        return None
    dry_run = request.get("dryRun")
    if dry_run is None:
        dry_run = False
    elif type(dry_run) is not bool:
        return None
    user_info = _plain_user_info(request.get("userInfo", _ABSENT))
    if user_info is None:
        return None
    sub_resource, request_sub_resource, name, namespace = strings
    return AdmissionRequest.model_construct(
        uid=uid,
        kind=kind,
        resource=resource,
        sub_resource=sub_resource,
        request_kind=request_kind,
        request_resource=request_resource,
        request_sub_resource=request_sub_resource,
        name=name,
        namespace=namespace,
        operation=operation,
        user_info=user_info,
        obj=request.get("object"),
        old_obj=request.get("oldObject"),
        dry_run=dry_run,
        options=request.get("options"),
    )


def _null_as_empty(value: object) -> object:
    return "" if value is None else value


def _plain_strings(value: object, keys: tuple[str, ...]) -> list[str] | None:
    """The string fields ``keys`` of an object (absent: ""); None unless it is an object and each is a string."""
    if type(value) is not dict:
        return None
    found = [value.get(key, "") for key in keys]
    return found if all(type(item) is str for item in found) else None


def _plain_kind(value: object) -> GroupVersionKind | None:
    fields = _plain_strings(value, ("group", "version", "kind"))
    if fields is None:
        return None
    return GroupVersionKind.model_construct(group=fields[0], version=fields[1], kind=fields[2])


def _plain_resource(value: object) -> GroupVersionResource | None:
    fields = _plain_strings(value, ("group", "version", "resource"))
    if fields is None:
        return None
    return GroupVersionResource.model_construct(group=fields[0], version=fields[1], resource=fields[2])


def _plain_user_info(value: object) -> UserInfo | None:
    """``userInfo``, absent being the default; None unless username/uid are strings and groups a list of them."""
    if value is _ABSENT:
        return UserInfo.model_construct(username="", uid="", groups=[])
    fields = _plain_strings(value, ("username", "uid"))
    groups = value.get("groups", []) if type(value) is dict else None
    if fields is None or type(groups) is not list or any(type(group) is not str for group in groups):
        return None
    return UserInfo.model_construct(username=fields[0], uid=fields[1], groups=list(groups))


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
        "response": _response_fields(response),
    }


def _response_fields(response: AdmissionResponse) -> dict[str, Any]:
    """``response.model_dump(by_alias=True, exclude_none=True)``, field by field (a dump per review costs more)."""
    fields: dict[str, Any] = {"uid": response.uid, "allowed": response.allowed}
    status = response.status
    if status is not None:
        fields["status"] = {"code": status.code, "reason": status.reason, "message": status.message}
    if response.patch is not None:
        fields["patch"] = response.patch
    if response.patch_type is not None:
        fields["patchType"] = response.patch_type
    if response.warnings is not None:
        fields["warnings"] = list(response.warnings)
    if response.audit_annotations is not None:
        fields["auditAnnotations"] = dict(response.audit_annotations)
    return fields
