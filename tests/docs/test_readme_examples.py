"""The README's examples, extracted and run as written (a reader copies them into a shell).

Every ``bash`` / ``python`` block in README.md carries a marker comment right above it:
``<!-- readme-test: run -->`` (run here), ``<!-- readme-test: run with the enforcer -->`` (run while
the workstation example's enforcer is up) or ``<!-- readme-test: skip (why) -->``.  A block without a
marker fails the test, so no example escapes it.

The blocks run in a scratch directory that links the repository's ``.venv``, ``numaguard_cli`` and
``docs`` (what the examples name), with one substitution: the port ``8443`` becomes a free one,
since other suites on this machine run servers too.  The enforcer they start is stopped by the
example itself (``kill %1``) and, should a command fail first, by a trap.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"<!-- readme-test: (run with the enforcer|run|skip \([^)]+\)) -->\n$")
HANG_GUARD = 240  # seconds; a hung example fails instead of blocking the suite
SEED_DATABASE_CPUS = "1-3,17-19"


@dataclass(frozen=True)
class Example:
    mode: str
    language: str
    code: str
    line: int


def examples(text: str) -> list[Example]:
    found: list[Example] = []
    for match in FENCE.finditer(text):
        language = match.group(1)
        if language not in ("bash", "sh", "python"):
            continue
        line = text.count("\n", 0, match.start()) + 1
        marker = MARKER.search(text[: match.start()])  # the marker line right above the fence, or nothing
        if marker is None:
            raise AssertionError(f"README.md line {line}: a {language} example without a readme-test marker")
        found.append(Example(marker.group(1).split(" (")[0], language, match.group(2), line))
    return found


EXAMPLES = examples(README.read_text())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in (".venv", "numaguard_cli", "docs"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def run_bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    guarded = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", guarded], cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD
    )


def test_an_example_without_a_marker_is_refused() -> None:
    marked = "<!-- readme-test: run -->\n```bash\ntrue\n```\n"
    assert [e.mode for e in examples(marked)] == ["run"]
    with pytest.raises(AssertionError, match="line 8: a bash example without a readme-test marker"):
        examples(marked + "\ntext\n\n```bash\nfalse\n```\n")


def test_every_example_is_marked_and_some_run() -> None:
    modes = [e.mode for e in EXAMPLES]
    assert modes.count("run") >= 2 and "run with the enforcer" in modes


@pytest.mark.skipif(shutil.which("curl") is None, reason="the examples use curl")
def test_the_readme_examples_run_as_written_and_give_the_seed_database_its_cpus(workspace: Path) -> None:
    port = str(free_port())
    runnable = [e for e in EXAMPLES if e.mode == "run"]
    for example in runnable:
        assert example.language == "bash", f"line {example.line}: only bash blocks run on their own"
        done = run_bash(example.code.replace("8443", port), workspace)
        assert done.returncode == 0, (
            f"README.md line {example.line} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
        if "numaguard plan" in example.code:
            assert SEED_DATABASE_CPUS in done.stdout
        if "numaguard enforcer" in example.code:
            assert SEED_DATABASE_CPUS in done.stdout.splitlines()  # the line the example prints for the database
            assert "database" in done.stdout and "pod_exclusive" in done.stdout  # numaguard allocations -o wide

    start = next(e for e in runnable if "numaguard enforcer" in e.code)
    launch = [line for line in start.code.splitlines() if "numaguard enforcer" in line or "/readyz" in line]
    for example in (e for e in EXAMPLES if e.mode == "run with the enforcer"):
        assert example.language == "python"
        script = "\n".join(launch) + f"\n.venv/bin/python - <<'PY'\n{example.code}\nPY\nkill %1\n"
        done = run_bash(script.replace("8443", port), workspace)
        assert done.returncode == 0, f"README.md line {example.line} failed:\n{done.stderr[-3000:]}"
        assert "'node': 'my-node'" in done.stdout


# -- docs/operations.md ---------------------------------------------------------------------------------

OPERATIONS = REPO / "docs" / "operations.md"
OVERLAY = re.compile(r"<!-- operations-test: kustomization -->\n```yaml\n(.*?)^```", re.S | re.M)


def test_every_example_of_the_operations_guide_is_marked() -> None:
    found = examples(OPERATIONS.read_text())
    assert found and all(e.mode == "skip" for e in found)  # cluster commands: none runs here


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl renders the overlay")
def test_the_documented_image_override_rewrites_every_numaguard_container(tmp_path: Path) -> None:
    """The overlay of "Build and push the image", as written, over the repository's manifests."""
    import yaml

    match = OVERLAY.search(OPERATIONS.read_text())
    assert match is not None
    overlay = tmp_path / "my-overlay"
    overlay.mkdir()
    (tmp_path / "manifests").symlink_to(REPO / "manifests")
    (overlay / "kustomization.yaml").write_text(match.group(1))
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=HANG_GUARD
    )
    assert rendered.returncode == 0, rendered.stderr
    images = []
    for document in yaml.safe_load_all(rendered.stdout):
        spec = (document or {}).get("spec", {}).get("template", {}).get("spec", {})
        images += [c["image"] for c in spec.get("containers", []) + spec.get("initContainers", [])]
    assert len(images) >= 2  # the webhook Deployment and the enforcer DaemonSet
    assert set(images) == {"registry.example.com/platform/numaguard:0.1.0"}
