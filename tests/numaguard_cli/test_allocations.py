"""``numaguard allocations``: the table and JSON it prints, its watch loop, and its answers to a real enforcer API.

Rendering and the watch loop run on the recorded enforcer answers for seed
scenario 1 (``tests/fixtures/views``).  The end-to-end tests serve those
answers from a small FastAPI app under uvicorn over TLS (servicekit's
certificates), guarded by the enforcer's own read authentication (a client
certificate or the bearer token), and run the CLI in process.
"""

from __future__ import annotations

import datetime
import io
import json
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse
from hypothesis import given
from hypothesis import strategies as st

from enforcer.service import auth, deps
from numaguard_cli import allocations, allocations_view, main
from servicekit import certs, serve, tls
from shared import contract, quantity

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "views"
TOKEN = "cli-test-token"
DATABASE = "default/tightly-coupled-database"


def recorded(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def seed_snapshot(**changes: Any) -> allocations_view.Snapshot:
    raw_allocations = {**recorded("seed-1-allocations.json"), **changes.pop("allocations", {})}
    raw_topology = {**recorded("seed-1-topology.json"), **changes.pop("topology", {})}
    return allocations_view.Snapshot(
        contract.AllocationList.model_validate(raw_allocations),
        contract.TopologyView.model_validate(raw_topology),
        raw_allocations,
        raw_topology,
    )


# -- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowCase:
    description: str
    pod: str
    container: str
    expected: tuple[str, ...]


ROWS = [
    RowCase(
        "pod-exclusive database: its CPUs and memory on NUMA 0, no CFS quota",
        DATABASE,
        "database",
        (DATABASE, "database", "pod_exclusive", "1-3,17-19", "0", "pod_exclusive", "0", "none"),
    ),
    RowCase(
        "sidecar in the pod shared pool, capped by the pod's quota",
        DATABASE,
        "metrics-exporter",
        (DATABASE, "metrics-exporter", "pod_shared", "4,20", "0", "pod_shared", "0", "pod"),
    ),
    RowCase(
        "node-exclusive container of a container-level pod",
        "shop/web",
        "nginx",
        ("shop/web", "nginx", "node_exclusive", "5-6,21-22", "0", "node_exclusive", "0", "none"),
    ),
    RowCase(
        "burstable container in the node shared pool spans both NUMA nodes, memory unbound",
        "jobs/batch",
        "worker",
        ("jobs/batch", "worker", "node_shared", "0,7-16,23-31", "0,1", "node_shared", "-", "none"),
    ),
]


@pytest.mark.parametrize("case", ROWS, ids=lambda c: c.description)
def test_table_row_shows_assignment_cpus_numa_nodes_and_cfs_quota(case: RowCase) -> None:
    rows = {(r.pod, r.container): r for r in allocations_view.container_rows(seed_snapshot())}
    assert rows[(case.pod, case.container)].cells() == case.expected


def test_rows_are_sorted_by_pod_and_keep_the_enforcers_container_order() -> None:
    rows = allocations_view.container_rows(seed_snapshot())
    assert [(r.pod, r.container) for r in rows] == [
        (DATABASE, "metrics-exporter"),
        (DATABASE, "backup-agent"),
        (DATABASE, "database"),
        ("jobs/batch", "worker"),
        ("shop/web", "nginx"),
    ]


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [("1-3,17-19", "0"), ("7,8", "0,1"), ("24-31", "1"), ("", "-"), (None, "-"), ("99", "?"), ("1,99", "0,?")],
    ids=["one node", "two nodes", "second node", "empty", "none", "cpu unknown", "partly unknown"],
)
def test_cpu_numa_nodes_are_derived_from_the_cpu_list_through_the_topology(cpus: str | None, expected: str) -> None:
    numa_of = allocations_view.numa_of_cpus(recorded("seed-1-topology.json")["topology"])
    assert allocations_view.cpu_numa_nodes(cpus, numa_of) == expected


def test_free_resources_per_numa_node_show_cpus_free_of_total_and_memory_free_of_allocatable() -> None:
    header, numa0, numa1 = allocations_view.numa_rows(seed_snapshot().topology)
    assert header[-2:] == ("memory FREE/ALLOC", "hugepages-1Gi FREE/ALLOC")
    assert numa0 == ("0", "2/16", "2", "12", "7,23", "34.9Gi/54.9Gi", "8Gi/8Gi")
    assert numa1 == ("1", "16/16", "0", "0", "8-15,24-31", "56Gi/56Gi", "8Gi/8Gi")


def test_table_has_a_header_the_rows_the_pools_and_the_numa_summary() -> None:
    text = allocations_view.render_table(seed_snapshot())
    lines = text.splitlines()
    assert lines[0] == "node node-a: 3 pods, 5 containers"
    assert re.split(r"\s{2,}", lines[1]) == list(allocations_view.TABLE_HEADER)
    assert lines[4].split() == [DATABASE, "database", "pod_exclusive", "1-3,17-19", "0", "pod_exclusive", "0", "none"]
    assert "node shared pool: 0,7-16,23-31   reserved CPUs: 0,16" in lines
    assert lines[-2].split()[:5] == ["0", "2/16", "2", "12", "7,23"]


def test_table_says_so_when_the_node_has_no_allocations() -> None:
    text = allocations_view.render_table(seed_snapshot(allocations={"items": []}))
    assert text.splitlines()[:2] == ["node node-a: 0 pods, 0 containers", "no allocations"]


def test_table_says_free_resources_are_unknown_when_the_enforcer_has_no_state() -> None:
    text = allocations_view.render_table(seed_snapshot(topology={"numaNodes": []}))
    assert text.splitlines()[-1] == "free resources unknown: the enforcer has no state loaded"


def test_table_lists_a_deferred_resize_with_its_reason() -> None:
    raw = recorded("seed-1-allocations.json")
    raw["items"][0]["resize"] = {
        "state": "Deferred",
        "reason": "InsufficientCPU",
        "message": "2 more exclusive CPUs are not free on NUMA 0",
        "since": "2026-01-02T03:04:05Z",
    }
    text = allocations_view.render_table(seed_snapshot(allocations=raw))
    assert (
        f"  {DATABASE}: Deferred InsufficientCPU: 2 more exclusive CPUs are not free on NUMA 0 "
        "(since 2026-01-02T03:04:05+00:00)"
    ) in text.splitlines()


def test_json_output_is_both_bodies_exactly_as_the_enforcer_served_them() -> None:
    raw = recorded("seed-1-allocations.json")
    raw["items"][0]["cgroups"] = {"inSync": True, "checkedAt": "2026-01-02T03:04:05Z"}  # an enforcer extra
    snapshot = seed_snapshot(allocations=raw)
    document = json.loads(allocations_view.render_json(snapshot))
    assert document == {"allocations": raw, "topology": recorded("seed-1-topology.json")}
    assert "\n" not in allocations_view.render_json(snapshot, compact=True)


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0"), (1023, "1023"), (1024, "1Ki"), (1536, "1.5Ki"), (64 << 30, "64Gi"), (58950942720, "54.9Gi")],
)
def test_bytes_are_shown_in_the_largest_binary_unit(count: int, text: str) -> None:
    assert quantity.human_bytes(count) == text


UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}


@given(st.integers(min_value=0, max_value=1 << 62))
def test_human_bytes_is_exact_whenever_it_shows_no_decimal_and_within_5_percent_otherwise(count: int) -> None:
    text = quantity.human_bytes(count)
    number = text.rstrip("KMGTPEi")
    value = float(number) * UNITS[text[len(number) :]]
    if "." in number:
        assert abs(value - count) <= 0.05 * count
    else:
        assert int(number) * UNITS[text[len(number) :]] == count


# -- the watch loop ------------------------------------------------------------------------------


def answers(*results: str | Exception) -> Callable[[], str]:
    queue = list(results)

    def poll() -> str:
        result = queue.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    return poll


def run_watch(poll: Callable[[], str], *, count: int | None = None, **options: Any) -> tuple[int, str, list[float]]:
    out, slept = io.StringIO(), list[float]()
    options.setdefault("sleep", slept.append)
    code = allocations.watch(
        poll,
        interval=2.0,
        count=count,
        out=out,
        clear_screen=options.pop("clear_screen", False),
        now=lambda: datetime.datetime(2026, 1, 2, 3, 4, 5),
        **options,
    )
    return code, out.getvalue(), slept


def test_watch_draws_an_answer_only_when_it_changed() -> None:
    code, out, slept = run_watch(answers("a", "a", "b", "b"), count=4)
    assert (code, out, slept) == (0, "a\nb\n", [2.0, 2.0, 2.0])


def test_watch_on_a_terminal_clears_the_screen_and_stamps_each_redraw() -> None:
    _, out, _ = run_watch(answers("a"), count=1, clear_screen=True, title="numaguard allocations")
    assert out == f"{allocations.CLEAR_SCREEN}Every 2s: numaguard allocations    03:04:05\n\na\n"


def test_ctrl_c_ends_the_watch_with_exit_code_0() -> None:
    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    code, out, _ = run_watch(answers("a", "b"), sleep=interrupted)
    assert (code, out) == (0, "a\n")


def test_watch_shows_an_unreachable_enforcer_and_redraws_when_it_is_back() -> None:
    gone = allocations.EnforcerUnreachable("cannot reach the enforcer at https://node-a:8443")
    code, out, _ = run_watch(answers("a", gone, "a"), count=3)
    assert code == 0
    assert out.splitlines() == [
        "a",
        "numaguard allocations: cannot reach the enforcer at https://node-a:8443 (polling again every 2s)",
        "a",
    ]


def test_watch_stops_at_a_refused_token_since_polling_again_cannot_fix_it() -> None:
    with pytest.raises(allocations.Forbidden):
        run_watch(answers("a", allocations.Forbidden("refused")), count=3)


# -- against a served API, over TLS ---------------------------------------------------------------


def seed_api(token_file: Path) -> FastAPI:
    app = FastAPI()
    app.state.authenticator = auth.Authenticator(auth.TokenFile(token_file))

    async def refuse(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, auth.AuthenticationRequired | auth.AccessDenied)
        status = 401 if isinstance(error, auth.AuthenticationRequired) else 403
        body = contract.ErrorBody(reason=error.reason, message=error.message)
        return JSONResponse(body.model_dump(by_alias=True), status_code=status)

    app.add_exception_handler(auth.AuthenticationRequired, refuse)
    app.add_exception_handler(auth.AccessDenied, refuse)

    @app.get("/allocations")
    def list_allocations(_: deps.Reader, namespace: Annotated[str | None, Query()] = None) -> Any:
        body = recorded("seed-1-allocations.json")
        body["items"] = [i for i in body["items"] if namespace is None or i["namespace"] == namespace]
        return body

    @app.get("/topology")
    def topology(_: deps.Reader) -> Any:
        return recorded("seed-1-topology.json")

    return app


@dataclass(frozen=True)
class Enforcer:
    url: str
    bundle: certs.Bundle
    token_file: Path
    directory: Path

    def cli(self, *extra: str, ca: bool = True) -> list[str]:
        return ["allocations", "--enforcer", self.url, *(["--ca", str(self.bundle.cert("ca"))] if ca else []), *extra]


@pytest.fixture(scope="module")
def enforcer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Enforcer]:
    directory = tmp_path_factory.mktemp("enforcer")
    bundle = certs.issue_bundle(directory / "certs")
    token_file = directory / "token"
    token_file.write_text(TOKEN + "\n")
    context = tls.server_context(tls.TLSFiles.in_directory(bundle.directory, "enforcer"))
    with serve.BackgroundServer(seed_api(token_file), ssl_context=context) as server:
        yield Enforcer(f"https://127.0.0.1:{server.port}", bundle, token_file, directory)


def cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_with_the_token_prints_the_table(enforcer: Enforcer, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, enforcer.cli("--token-file", str(enforcer.token_file)))
    assert (code, err) == (0, "")
    assert out == allocations_view.render_table(seed_snapshot()) + "\n"


def test_cli_json_output_is_what_the_enforcer_served(enforcer: Enforcer, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, enforcer.cli("--token-file", str(enforcer.token_file), "-o", "json"))
    assert code == 0
    assert json.loads(out) == {
        "allocations": recorded("seed-1-allocations.json"),
        "topology": recorded("seed-1-topology.json"),
    }


def test_cli_with_the_operator_client_certificate_prints_the_table(
    enforcer: Enforcer, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, key = enforcer.bundle.cert("operator-client"), enforcer.bundle.key("operator-client")
    code, out, _ = cli(capsys, enforcer.cli("--cert", str(cert), "--key", str(key)))
    assert code == 0
    assert DATABASE in out


def test_cli_namespace_option_lists_only_that_namespace(enforcer: Enforcer, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, enforcer.cli("--token-file", str(enforcer.token_file), "-n", "shop"))
    assert code == 0
    assert out.splitlines()[0] == "node node-a: 1 pod, 1 containers"
    assert "shop/web" in out and DATABASE not in out


def test_cli_watch_prints_an_unchanged_answer_once(enforcer: Enforcer, capsys: pytest.CaptureFixture[str]) -> None:
    argv = enforcer.cli("--token-file", str(enforcer.token_file), "-o", "json", "--watch", "--count", "2")
    code, out, _ = cli(capsys, [*argv, "--interval", "0.01"])
    assert code == 0
    (line,) = out.splitlines()
    assert json.loads(line)["allocations"]["node"] == "node-a"


@dataclass(frozen=True)
class FailureCase:
    description: str
    extra: Callable[[Enforcer], list[str]]
    expected: str
    with_ca: bool = True


def _other_ca_client(enforcer: Enforcer) -> list[str]:
    stranger = certs.issue_client_certificate(certs.create_ca("other-ca"), "numaguard-operator")
    cert, key = enforcer.directory / "stranger.crt", enforcer.directory / "stranger.key"
    certs.write_pair(stranger, cert, key)
    return ["--cert", str(cert), "--key", str(key)]


def _wrong_token(enforcer: Enforcer) -> list[str]:
    wrong = enforcer.directory / "wrong-token"
    wrong.write_text("not-the-token")
    return ["--token-file", str(wrong)]


FAILURES = [
    FailureCase("wrong token is a 403", _wrong_token, "refused these credentials (HTTP 403: the bearer token is not"),
    FailureCase("no credentials is a 401", lambda e: [], "needs credentials (HTTP 401"),
    FailureCase(
        "an enforcer certificate the system CAs do not trust",
        lambda e: ["--token-file", str(e.token_file)],
        "pass the CA that signed the enforcer's certificate with --ca",
        with_ca=False,
    ),
    FailureCase(
        "a name the enforcer certificate does not carry",
        lambda e: ["--token-file", str(e.token_file), "--tls-server-name", "elsewhere.example"],
        "--tls-server-name",
    ),
    FailureCase("a client certificate from another CA", _other_ca_client, "signed by the enforcer's CA and in date"),
    FailureCase(
        "a token file that does not exist",
        lambda e: ["--token-file", str(e.directory / "missing")],
        "cannot read token file",
    ),
]


@pytest.mark.parametrize("case", FAILURES, ids=lambda c: c.description)
def test_cli_failure_exits_1_with_a_message_that_says_why(
    enforcer: Enforcer, capsys: pytest.CaptureFixture[str], case: FailureCase
) -> None:
    code, out, err = cli(capsys, enforcer.cli(*case.extra(enforcer), ca=case.with_ca))
    assert (code, out) == (1, "")
    assert err.startswith("numaguard allocations: ")
    assert case.expected in err
    assert TOKEN not in err


def test_cli_against_a_port_nobody_listens_on_says_the_enforcer_is_unreachable(
    enforcer: Enforcer, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago; nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["allocations", "--enforcer", f"https://127.0.0.1:{port}", "--ca", str(enforcer.bundle.cert("ca"))]
    code, _, err = cli(capsys, [*argv, "--token-file", str(enforcer.token_file)])
    assert code == 1
    assert f"cannot reach the enforcer at https://127.0.0.1:{port}" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--enforcer", "node-a:8443"], "--enforcer must be a URL"),
        (["--enforcer", "https://"], "--enforcer must be a URL"),
        (["--enforcer", "https://node-a:port"], "is not a URL: Invalid port"),
        (["--enforcer", "https://node-a:8443", "--key", "k.pem"], "--key needs --cert"),
        (["--enforcer", "https://node-a:8443", "--count", "2"], "--count needs --watch"),
    ],
    ids=["no scheme", "no host", "bad port", "key without cert", "count without watch"],
)
def test_cli_usage_mistakes_exit_2_before_any_request(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, _, err = cli(capsys, ["allocations", *argv])
    assert code == 2
    assert expected in err


def test_cli_warns_before_sending_the_token_over_plain_http(
    enforcer: Enforcer, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["allocations", "--enforcer", f"http://127.0.0.1:{port}", "--token-file", str(enforcer.token_file)]
    code, _, err = cli(capsys, argv)
    assert code == 1
    assert err.splitlines()[0] == (
        "numaguard allocations: warning: the bearer token goes over plain http: anyone on the path can read it"
    )
