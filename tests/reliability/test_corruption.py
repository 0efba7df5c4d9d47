"""A damaged state file is caught by the real enforcer process, and the documented recovery brings the node back.

For each kind of damage (truncated, one bit flipped, written by a newer
numaguard, not ours at all) the enforcer is started over the damaged file and
must: report it on ``/readyz`` (503, a stable reason, a message naming the file
and what is wrong) and in its log; keep answering reads; refuse every
state-changing call with 503 ``StateUnavailable`` naming ``numaguard
recover-state``; leave the damaged file untouched; and refuse to be recovered
under its feet.  Then the operator's sequence, exactly as documented (stop the
enforcer, ``numaguard recover-state --mode <mode>``, start it), must give a
ready node that accepts writes: from the backup (the base the last start's
compaction replaced) or empty.  The journal that continues the base is damaged
the same ways (a flipped bit in an acknowledged record, the file deleted) and
must be caught the same way: never replayed in part, never skipped.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from reliability_kit import (
    EnforcerNode,
    allocation_request,
    fixture_pod,
    guaranteed_pod,
)

from enforcer.state import checkpoint

pytestmark = pytest.mark.timeout(180)


def truncate(path: Path) -> None:
    content = path.read_bytes()
    path.write_bytes(content[: len(content) * 2 // 3])


def flip_one_bit(path: Path) -> None:
    """Flip the low bit of one digit inside ``data``: still JSON, still a number, a different allocation."""
    content = bytearray(path.read_bytes())
    start = content.index(b'"data"')
    digits = [i for i in range(start, len(content)) if chr(content[i]).isdigit()]
    position = random.Random(7).choice(digits)
    content[position] ^= 0x01
    path.write_bytes(bytes(content))


def from_a_newer_numaguard(path: Path) -> None:
    """An intact file of version N+1, checksummed as such: refused, never misread."""
    envelope = json.loads(path.read_text())
    version = checkpoint.CURRENT_VERSION + 1
    envelope["version"] = version
    envelope["checksum"] = checkpoint.checksum_of(envelope["data"], version)
    path.write_text(json.dumps(envelope, indent=2))


def flip_one_bit_in_the_journal(path: Path) -> None:
    """Flip the low bit of one digit of the last acknowledged record: checksummed, so caught."""
    journal_path = path.with_name(path.name + ".journal")
    content = bytearray(journal_path.read_bytes())
    start = content.rindex(b'{"checksum"')
    digits = [i for i in range(start + 80, len(content)) if chr(content[i]).isdigit()]
    content[random.Random(7).choice(digits)] ^= 0x01
    journal_path.write_bytes(bytes(content))


def delete_the_journal(path: Path) -> None:
    path.with_name(path.name + ".journal").unlink()


def the_kubelets_cpu_manager_state(path: Path) -> None:
    """Someone copied the kubelet's checkpoint over ours."""
    kubelet = {"policyName": "static", "defaultCpuSet": "0,5-31", "entries": {}, "checksum": 1234567890}
    path.write_text(json.dumps(kubelet))


@dataclass(frozen=True)
class Damage:
    name: str
    apply: Callable[[Path], None]
    reason: str
    message_says: str
    recovery: str  # the recover-state mode the operator picks


DAMAGES = [
    Damage("truncated", truncate, "CheckpointCorrupt", "truncated", "from-backup"),
    Damage("bit-flipped", flip_one_bit, "CheckpointCorrupt", "checksum mismatch", "from-backup"),
    Damage("newer-version", from_a_newer_numaguard, "CheckpointVersionUnsupported", "newer numaguard", "quarantine"),
    Damage("foreign-format", the_kubelets_cpu_manager_state, "CheckpointVersionUnsupported", "not a", "quarantine"),
    Damage("journal-bit-flipped", flip_one_bit_in_the_journal, "CheckpointCorrupt", "checksum mismatch", "from-backup"),
    Damage("journal-deleted", delete_the_journal, "CheckpointCorrupt", "is missing", "from-backup"),
]


def _files(path: Path) -> dict[str, bytes | None]:
    journal_path = path.with_name(path.name + ".journal")
    return {p.name: (p.read_bytes() if p.exists() else None) for p in (path, journal_path)}


# Each case starts, damages, restarts and recovers a real enforcer (~9 s here): the default run keeps one
# case per recovery path (from-backup for the base, quarantine, from-backup for the journal); the others
# run with `-m slow`, and every damage is also detected at unit level in tests/enforcer/state.
DEFAULT_DAMAGES = {"bit-flipped", "newer-version", "journal-bit-flipped"}


@pytest.mark.parametrize(
    "damage",
    [pytest.param(d, id=d.name, marks=() if d.name in DEFAULT_DAMAGES else pytest.mark.slow) for d in DAMAGES],
)
def test_a_damaged_state_file_is_reported_refuses_writes_and_recover_state_brings_the_node_back(
    node: EnforcerNode, damage: Damage
) -> None:
    pods = [
        fixture_pod("tightly-coupled-database", name="db"),
        fixture_pod("burstable-web", name="web"),
        guaranteed_pod("last", 2),
    ]
    with node.running() as enforcer, node.writer(enforcer) as http:
        for pod in pods[:2]:
            node.cgroups.add_pod(pod)
            assert http.post("/allocations", json=allocation_request(pod)).status_code == 201
    for _ in range(2):  # each start writes a new base; the one it replaces becomes the backup
        with node.running() as enforcer, node.writer(enforcer) as http:
            assert http.get("/readyz").status_code == 200
    with node.running() as enforcer, node.writer(enforcer) as http:
        node.cgroups.add_pod(pods[2])
        assert http.post("/allocations", json=allocation_request(pods[2])).status_code == 201
    damage.apply(node.state_path)
    damaged = _files(node.state_path)

    with node.running() as enforcer, node.writer(enforcer) as http:
        ready = http.get("/readyz")
        assert ready.status_code == 503
        body = ready.json()
        assert (body["ready"], body["reason"], body["checks"]["state"]) == (False, damage.reason, False)
        assert str(node.state_path) in body["message"] and damage.message_says in body["message"], body["message"]

        listing = http.get("/allocations")
        assert listing.status_code == 200
        assert listing.json()["state"] == {
            "available": False,
            "reason": damage.reason,
            "message": body["message"],
            "path": str(node.state_path),
        }
        assert http.get("/topology").status_code == 200
        assert f'numaguard_enforcer_state_problem{{reason="{damage.reason}"}} 1.0' in http.get("/metrics").text

        uid = pods[0]["metadata"]["uid"]
        refusals = [
            http.post("/allocations", json=allocation_request(guaranteed_pod("new", 1))),
            http.delete(f"/allocations/{uid}"),
            http.post(f"/allocations/{uid}/resize", json={"pod": pods[0]}),
        ]
        for refused in refusals:
            assert refused.status_code == 503, refused.text
            assert refused.json()["reason"] == "StateUnavailable"
            assert "numaguard recover-state" in refused.json()["message"]

        under_its_feet = node.recover_state(damage.recovery)
        assert under_its_feet.returncode != 0
        assert "in use by a running enforcer" in under_its_feet.stderr
        assert _files(node.state_path) == damaged
    assert _files(node.state_path) == damaged, "the enforcer rewrote the damaged files"
    assert damage.reason in node.log.read_text()

    check = node.recover_state("check")
    status = "corrupt" if damage.reason == "CheckpointCorrupt" else "unsupported"
    assert check.returncode == 1 and f"state: {status}:" in check.stdout, check.stdout
    recovered = node.recover_state(damage.recovery)
    assert recovered.returncode == 0, recovered.stderr
    assert node.recover_state("check").returncode == 0

    with node.running() as enforcer, node.writer(enforcer) as http:
        assert http.get("/readyz").json()["ready"] is True
        held = sorted(item["name"] for item in http.get("/allocations").json()["items"])
        # the backup is the base of the start before the last: the last pod is missing; quarantine starts empty
        assert held == (["db", "web"] if damage.recovery == "from-backup" else [])
        again = guaranteed_pod("after-recovery", 1)
        node.cgroups.add_pod(again)
        assert http.post("/allocations", json=allocation_request(again)).status_code == 201
        if held:
            assert http.delete(f"/allocations/{pods[0]['metadata']['uid']}").json()["released"] is True
