"""The pod-set fingerprint of github.com/k8stopologyawareschedwg/podfingerprint (``pfp0v001...``), exactly.

scheduler-plugins' NodeResourceTopologyMatch keeps an *overreserve* cache: after it places a pod it
subtracts the pod's requests from every zone of the node's NodeResourceTopology until the exporter's
object is known to include that pod.  It knows that by recomputing this fingerprint over the pods it
sees on the node and comparing it with the object's ``nodeTopologyPodsFingerprint`` attribute
(``podFingerprintForNodeTopology`` / ``checkPodFingerprintForNode`` in
pkg/noderesourcetopology/cache); without the attribute the node is never resynced.

The algorithm (podfingerprint.go, ``Prefix = "pfp0"``, ``Version = "v001"``): for each pod,
``xxhash64(name, seed = xxhash64(namespace))``; sort the 64-bit values; feed each as 8 little-endian
bytes to one xxhash64 (seed 0); the fingerprint is ``"pfp0v001" + hex(big-endian digest)``.  The
upstream test vectors (testdata/compat-*.txt / .sign) are checked in the tests.  Pure Python XXH64:
a node holds at most a few hundred pods, microseconds each.

With ``nodeTopologyPodsFingerprintMethod: with-exclusive-resources`` the scheduler counts only the pods
its ``resourcerequests.AreExclusiveForPod`` selects (pkg/noderesourcetopology/resourcerequests):
Guaranteed QoS and an app container or restartable init container requesting an integral CPU count,
memory or hugepages.  :func:`has_exclusive_resources` applies the same rule to the pods the enforcer
holds, so both sides count the same set.
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.resources import CPU, MEMORY, PodResources, is_hugepages

PREFIX = "pfp0"
VERSION = "v001"
ANNOTATION = "topology.node.k8s.io/fingerprint"
ATTRIBUTE = "nodeTopologyPodsFingerprint"
ATTRIBUTE_METHOD = "nodeTopologyPodsFingerprintMethod"
METHOD_ALL = "all"
METHOD_WITH_EXCLUSIVE_RESOURCES = "with-exclusive-resources"

_M = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 (the reference algorithm, as github.com/OneOfOne/xxhash computes it)."""
    n, i = len(data), 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M
        while i + 32 <= n:
            v1 = _round(v1, int.from_bytes(data[i : i + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 8 : i + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 16 : i + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 24 : i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h = ((h ^ _round(0, v)) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _M
        h = (_rotl(h, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    return h ^ (h >> 32)


def sign(pods: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of a set of ``(namespace, name)`` pairs (order does not matter)."""
    hashes = sorted(xxh64(name.encode(), xxh64(namespace.encode())) for namespace, name in pods)
    digest = xxh64(b"".join(h.to_bytes(8, "little") for h in hashes))
    return PREFIX + VERSION + digest.to_bytes(8, "big").hex()


def has_exclusive_resources(pod: PodResources) -> bool:
    """scheduler-plugins ``AreExclusiveForPod`` on the enforcer's view of a pod (see the module docstring)."""
    if pod.qos_class != "Guaranteed":
        return False
    for container in pod.containers:
        if not container.is_long_running:  # regular init containers finish: not steady-state consumers
            continue
        for name, value in container.resources.requests.items():
            if name == CPU and value > 0 and value % 1000 == 0:
                return True
            if (name == MEMORY or is_hugepages(name)) and value > 0:
                return True
    return False
