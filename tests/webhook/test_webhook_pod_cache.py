"""Finding the pod a binding names: by uid, by name, by generateName; bounded; from a watch."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from webhook_testkit import PODS_DIR

from shared import pod as pod_model
from webhook import pod_cache

pytestmark = pytest.mark.anyio


def raw(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((PODS_DIR / f"{name}.json").read_text())
    return document


def named(base: dict[str, Any], *, name: str = "", uid: str = "", cpu: str | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(base)
    if name:
        pod["metadata"]["name"] = name
    if uid:
        pod["metadata"]["uid"] = uid
    if cpu is not None:
        pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = cpu
    return pod


def seen(obj: dict[str, Any], source: pod_cache.Source = "validate") -> pod_cache.SeenPod:
    return pod_cache.trimmed(obj, namespace=obj["metadata"].get("namespace", ""), source=source)


async def test_a_validated_pod_is_found_by_uid_even_under_another_name() -> None:
    cache = pod_cache.SeenPods()
    cache.remember(seen(named(raw("tightly-coupled-database"), uid="u-1")))
    found = await cache.find(namespace="default", name="renamed", uid="u-1")
    assert found is not None and found.name == "tightly-coupled-database"


async def test_a_pod_is_found_by_namespace_and_name_when_the_uid_is_unknown() -> None:
    cache = pod_cache.SeenPods()
    cache.remember(seen(raw("burstable-web"), source="mutate"))
    assert await cache.find(namespace="shop", name="burstable-web", uid="u-9") is not None
    assert await cache.find(namespace="default", name="burstable-web", uid="") is None


async def test_a_name_reused_by_another_pod_does_not_match_a_different_uid() -> None:
    cache = pod_cache.SeenPods()
    cache.remember(seen(named(raw("burstable-web"), uid="old")))
    assert await cache.find(namespace="shop", name="burstable-web", uid="new") is None


async def test_a_generate_name_pod_seen_at_mutation_is_found_by_its_generated_name() -> None:
    cache = pod_cache.SeenPods()
    cache.remember(seen(raw("generate-name-train"), source="mutate"))
    found = await cache.find(namespace="ml", name="train-x7k2p", uid="u-1")
    assert found is not None
    assert found.with_identity(name="train-x7k2p", uid="u-1")["metadata"] == {
        "name": "train-x7k2p",
        "generateName": "train-",
        "namespace": "ml",
        "uid": "u-1",
        "labels": {},
        "annotations": {"example.com/team": "vision"},
    }


@pytest.mark.parametrize("name", ["train-x7k2", "train-x7k2pq", "trains-x7k2p", "train-"])
async def test_a_name_the_apiserver_could_not_have_generated_does_not_match(name: str) -> None:
    cache = pod_cache.SeenPods()
    cache.remember(seen(raw("generate-name-train"), source="mutate"))
    assert await cache.find(namespace="ml", name=name, uid="") is None


async def test_a_long_generate_name_is_cut_to_58_characters_before_the_suffix() -> None:
    base = "t" * 70
    pod = raw("generate-name-train")
    pod["metadata"]["generateName"] = base
    cache = pod_cache.SeenPods()
    cache.remember(seen(pod, source="mutate"))
    assert await cache.find(namespace="ml", name="t" * 58 + "abcde", uid="") is not None


async def test_generate_name_siblings_asking_for_the_same_resources_match_either() -> None:
    cache = pod_cache.SeenPods()
    cache.remember(seen(raw("generate-name-train"), source="mutate"))
    cache.remember(seen(raw("generate-name-train"), source="mutate"))
    assert await cache.find(namespace="ml", name="train-aaaaa", uid="") is not None


async def test_generate_name_siblings_asking_for_different_resources_are_ambiguous() -> None:
    cache = pod_cache.SeenPods()
    cache.remember(seen(raw("generate-name-train"), source="mutate"))
    cache.remember(seen(named(raw("generate-name-train"), cpu="3"), source="mutate"))
    assert await cache.find(namespace="ml", name="train-aaaaa", uid="") is None


async def test_the_cache_forgets_the_least_recently_used_pod_beyond_its_capacity() -> None:
    cache = pod_cache.SeenPods(capacity=2)
    for i in range(3):
        cache.remember(seen(named(raw("burstable-web"), name=f"web-{i}", uid=f"u-{i}")))
    assert len(cache) == 2
    assert await cache.find(namespace="shop", name="web-0", uid="u-0") is None
    assert await cache.find(namespace="shop", name="web-2", uid="u-2") is not None


async def test_forget_removes_a_pod_by_uid_or_name() -> None:
    cache = pod_cache.SeenPods()
    cache.remember(seen(named(raw("burstable-web"), uid="u-1")))
    cache.forget(namespace="shop", name="burstable-web", uid="")
    assert len(cache) == 0


def test_only_what_the_pod_models_read_is_kept() -> None:
    pod = raw("besteffort-batch")
    kept = seen(pod).obj
    assert "command" in pod["spec"]["containers"][0]
    assert "command" not in kept["spec"]["containers"][0]
    assert kept["spec"]["restartPolicy"] == "Never"


# -- the watch-fed index ----------------------------------------------------------------------------


async def test_the_index_holds_pending_pods_until_the_watch_says_they_left() -> None:
    index = pod_cache.PodIndex()
    pending = named(raw("tightly-coupled-database"), uid="u-1")
    index.replace_all([pending, raw("burstable-web")])  # the second has no uid: not indexable
    assert index.is_ready() and len(index) == 1
    assert await index.find(namespace="default", name="tightly-coupled-database", uid="") is not None
    assert await index.find(namespace="default", name="tightly-coupled-database", uid="other") is None
    index.apply("DELETED", pending)
    assert await index.find(namespace="default", name="", uid="u-1") is None


async def test_an_unparseable_pod_in_the_watch_is_skipped() -> None:
    index = pod_cache.PodIndex()
    index.apply("ADDED", {"metadata": {"uid": "x"}, "spec": {"containers": "nope"}})
    assert len(index) == 0


async def test_a_chain_asks_each_source_in_turn_and_is_ready_when_all_are() -> None:
    first, second = pod_cache.SeenPods(), pod_cache.PodIndex()
    chain = pod_cache.ChainedLookup([first, second])
    assert not chain.is_ready()
    second.replace_all([named(raw("burstable-web"), uid="u-1")])
    assert chain.is_ready()
    found = await chain.find(namespace="shop", name="burstable-web", uid="u-1")
    assert found is not None and found.source == "watch"


def _every_fixture_pod() -> list[tuple[str, dict[str, Any]]]:
    found = [(path.name, json.loads(path.read_text())) for path in sorted(PODS_DIR.glob("*.json"))]
    for path in sorted((PODS_DIR.parent / "reviews").glob("*.json")):
        document = json.loads(path.read_text())
        request = document.get("request") if isinstance(document, dict) else None
        if not isinstance(request, dict):
            continue
        for field in ("object", "oldObject"):
            obj = request.get(field)
            if isinstance(obj, dict) and obj.get("kind") == "Pod" and "malformed" not in path.name:
                found.append((f"{path.name} {field}", obj))
    return found


@pytest.mark.parametrize(("name", "obj"), _every_fixture_pod(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_kept_document_is_the_whole_trimmed_dump_byte_for_byte(name: str, obj: dict[str, Any]) -> None:
    # the document is put together from its three fields, the spec's JSON shared with the plan memo's key
    parsed = pod_model.parse_pod(obj)
    expected = parsed.model_dump_json(by_alias=True, exclude_none=True).encode()
    assert pod_cache.from_pod(parsed, namespace="", source="mutate").document == expected
    assert json.loads(expected)["spec"] == json.loads(parsed.spec_json())


def test_a_pod_json_cannot_encode_as_utf8_is_kept_as_json_dumps_writes_it() -> None:
    obj = named(raw("tightly-coupled-database"), name="db-\ud800")
    kept = pod_cache.trimmed(obj, namespace="prod", source="validate")
    assert kept.document == json.dumps(pod_cache._dump(pod_model.parse_pod(obj))).encode()
    assert kept.obj["metadata"]["name"] == "db-\ud800"


@pytest.mark.parametrize(("name", "obj"), _every_fixture_pod(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_fingerprint_of_a_generate_name_pod_is_the_digest_of_its_trimmed_dump(
    name: str, obj: dict[str, Any]
) -> None:
    # replicas share it through a memo keyed on the spec's JSON: the same digest as of the whole trimmed dump
    pending = copy.deepcopy(obj)
    pending["metadata"].pop("name", None)
    pending["metadata"]["generateName"] = "web-"
    parsed = pod_model.parse_pod(pending)
    expected = pod_cache._fingerprint(pod_cache._dump(parsed))
    assert pod_cache.from_pod(parsed, namespace="", source="mutate").fingerprint == expected
    assert pod_cache.from_pod(pod_model.parse_pod(pending), namespace="", source="mutate").fingerprint == expected


def test_the_fingerprint_of_a_spec_json_cannot_encode_is_the_digest_of_its_dump() -> None:
    pending = named(raw("generate-name-train"), cpu="2")
    pending["spec"]["containers"][0]["name"] = "train-\ud800"
    parsed = pod_model.parse_pod(pending)
    assert parsed.metadata.generate_name and not parsed.metadata.name
    kept = pod_cache.from_pod(parsed, namespace="ml", source="mutate")
    assert kept.fingerprint == pod_cache._fingerprint(pod_cache._dump(parsed))
