"""The admission webhook as a service: ``/mutate`` capacity under wrk and latency at a fixed rate, against an echo.

Run: ``.venv/bin/python -m bench.bench_webhook [--quick] [--json PATH] [--compare-with CHECKOUT]`` (or the
``webhook`` section of ``python -m bench``).

Two servers, each its own process under the same uvicorn set-up
(:mod:`bench.servers`: uvloop, httptools, TLS from the same reloading context,
JSON logs at ``info`` as shipped): the real webhook, and a bare FastAPI
endpoint that answers ``POST /mutate`` with the request body (the floor any
Python webhook on this stack pays).  Before anything is timed, the echo must
return every body unchanged and the webhook must allow and patch every pod.

1. Capacity, measured with wrk (:mod:`bench.wrk`; a C load generator that, unlike
   a Python client, saturates a Python server on 2 cores): ``connections``
   keep-alive TLS connections for ``wrk_seconds`` per run.  Two workloads:

   * *replicas*: the seed pods' CREATE reviews (seed-1 ``tightly-coupled-database``,
     a Guaranteed pod with pod-level resources and two sidecars, and seed-2
     ``ml-workload``, ``tests/fixtures/reviews/create-mutate-*.json``) in turn, each
     request a new pod of its template as a ReplicaSet makes them: its own name (the
     template's name and a suffix) and its own request uid.  Replicas of a workload
     share their spec, so after the first review of each the webhook's plan memo
     (:mod:`webhook.plan_memo`) answers the planning;
   * *new specs*: the seed-1 review with the database container's memory (request
     and limit) set to one of 4,000 values, a different one per request, so no
     review finds its plan in the memo (512 entries): every pod is planned.

   In every round the three runs (webhook replicas, echo, webhook new specs) go
   in turn, the order reversed every other round (W E W, W E W reversed, ...), and
   every figure is the median over rounds: the two servers meet the same machine.
   The server's CPU seconds per request over the same runs (``/proc``) are
   reported too: they depend less on the other tenants of the machine than
   requests per second do.
2. Latency at a fixed rate (the bench's own load process, :mod:`bench.load`, open
   loop: requests start on a schedule, latency counted from the scheduled
   start): ``rate`` requests per second of the replica workload, p50 and p99.

Before/after: ``--compare-with CHECKOUT`` also launches the webhook of another
checkout (``mkdir /tmp/base && git archive <commit> | tar -x -C /tmp/base``) with
the same settings and measures it in the same rounds, so a change is judged
side by side; both must give the same answers to every body, byte for byte.

Measured, never asserted: a goal missed is reported as such; only wrong answers
(an echo that differs, a pod not patched, an HTTP error) fail the table.  This
module is a measuring tool: it must not be imported by product code or by tests
of product code.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import load, proc, report, servers, wrk
from servicekit import certs, tls

THROUGHPUT_GOAL = 0.5  # issue 16: the webhook keeps at least half the echo's requests per second under wrk
THROUGHPUT_MOONSHOT = 0.8
LATENCY_P99_GOAL_MS = 5.0  # at the fixed rate below
# the "new specs" workload: the seed-1 database container's "12Gi" becomes "<12288 + i>Mi", i < NEW_SPEC_COUNT
NEW_SPEC_TOKEN = "12Gi"
NEW_SPEC_FORMAT = "%dMi"
NEW_SPEC_START = 12 * 1024
NEW_SPEC_COUNT = 4000  # > the plan memo's 512 entries, and 12Gi + 4000Mi still fits the pod's 16Gi budget
# the "replicas" workload: REPLICA_TOKEN, in a seed pod's name suffix and its request uid's last group, becomes
# "%012x" of the request's number: a new pod of the same template in every request, as a ReplicaSet makes them
REPLICA_TOKEN = "@replica@"
REPLICA_FORMAT = "%012x"
REPLICA_COUNT = 1 << 32
# Beyond these, the figures say more about the other tenants of the machine than about the servers: say so.
BUSY_PRESSURE = 0.20
LAG_TOLERANCE_MS = 5.0


@dataclass(frozen=True)
class Effort:
    """How long to measure; ``quick`` keeps ``python -m bench --quick`` short, at the price of noise."""

    rounds: int
    wrk_seconds: float
    connections: int
    wrk_threads: int
    warmup: float
    rate: float
    latency_seconds: float

    @classmethod
    def of(cls, quick: bool) -> Effort:
        if quick:
            return cls(rounds=2, wrk_seconds=8.0, connections=16, wrk_threads=2, warmup=0.5, rate=200.0,
                       latency_seconds=4.0)  # fmt: skip
        return cls(rounds=4, wrk_seconds=20.0, connections=16, wrk_threads=2, warmup=2.0, rate=200.0,
                   latency_seconds=10.0)  # fmt: skip

    def latency_load(self) -> load.LoadEffort:
        return load.LoadEffort(self.rounds, self.connections, self.warmup, 0.0, self.rate, self.latency_seconds)


@dataclass(frozen=True)
class Workload:
    """What one wrk run sends: bodies in turn, optionally with a token replaced by a per-request value.

    ``replicas``: each seed body is first made a template (:func:`replica_template`), its name and uid carrying
    the token.
    """

    name: str
    bodies: tuple[Path, ...]
    vary: wrk.Vary | None = None
    replicas: bool = False

    @functools.cached_property
    def texts(self) -> list[str]:
        """The bodies' texts (read and templated once per workload)."""
        texts = [path.read_text() for path in self.bodies]
        return [replica_template(text) for text in texts] if self.replicas else texts

    def files(self, directory: Path) -> tuple[Path, ...]:
        """The bodies as wrk and the load process read them (the seed files themselves, or templates written here)."""
        if not self.replicas:
            return self.bodies
        written = []
        for path, text in zip(self.bodies, self.texts, strict=True):
            written.append(directory / f"replica-{path.name}")
            written[-1].write_text(text)
        return tuple(written)

    def body(self, index: int) -> bytes:
        """Request number ``index`` as wrk sends it."""
        text = self.texts[index % len(self.texts)].encode()
        return text if self.vary is None else self.vary.applied(text, index)


def replica_template(review_text: str) -> str:
    """A CREATE review of a pod as the template of its replicas: :data:`REPLICA_TOKEN` in its name and uid."""
    review = json.loads(review_text)
    request = review["request"]
    name = f"{request['name']}-{REPLICA_TOKEN}"
    request["name"] = name
    request["object"]["metadata"]["name"] = name
    request["uid"] = f"{request['uid'].rsplit('-', 1)[0]}-{REPLICA_TOKEN}"
    return json.dumps(review, indent=2) + "\n"  # as the fixtures are written


REPLICAS = Workload(
    "replicas", servers.SEED_CREATE_BODIES, wrk.Vary(REPLICA_TOKEN, REPLICA_FORMAT, 0, REPLICA_COUNT), replicas=True
)
NEW_SPECS = Workload(
    "new specs",
    servers.SEED_CREATE_BODIES[:1],
    wrk.Vary(NEW_SPEC_TOKEN, NEW_SPEC_FORMAT, NEW_SPEC_START, NEW_SPEC_COUNT),
)


BASELINE = "baseline"  # the target name of the webhook of another checkout (``--compare-with``)


@contextlib.contextmanager
def launched_servers(
    workdir: Path, bundle: certs.Bundle, baseline: Path | None = None
) -> Iterator[dict[str, servers.Launched]]:
    """The webhook and the echo (and the baseline's webhook), started the same way (:mod:`bench.servers`)."""
    wanted: list[tuple[str, str, Path]] = [("webhook", "webhook", servers.ROOT), ("echo", "echo", servers.ROOT)]
    if baseline is not None:
        wanted.append((BASELINE, "webhook", baseline))
    with contextlib.ExitStack() as stack:
        started: dict[str, servers.Launched] = {}
        for target, app, tree in wanted:
            port = servers.free_port()
            command = servers.server_command(app, port=port, certs_dir=bundle.directory, log_level="info")
            log_file = workdir / f"{target}.log"
            launch = servers.launched(
                target, command, port=port, bundle=bundle, ready_path="/healthz", log_file=log_file, cwd=tree
            )
            started[target] = stack.enter_context(launch)
        yield started


def check_answers(started: dict[str, servers.Launched], bundle: certs.Bundle) -> str:
    """Before timing anything: the echo returns each body, each webhook allows and patches each pod (a new spec too)."""
    echo = started["echo"]
    bodies = {f"replica {i} of {path.name}": REPLICAS.body(i) for i, path in enumerate(REPLICAS.bodies)}
    bodies["a new spec"] = NEW_SPECS.body(NEW_SPEC_COUNT - 1)
    problems: list[str] = []
    with httpx.Client(verify=tls.client_context(bundle.cert("ca")), timeout=30) as client:
        for name, body in bodies.items():
            echoed = client.post(f"{echo.url}/mutate", content=body, headers=load.JSON_HEADERS)
            if echoed.status_code != 200 or echoed.content != body:
                problems.append(f"echo changed {name}")
            answers = set()
            for webhook in (server for target, server in started.items() if target != "echo"):
                reviewed = client.post(f"{webhook.url}/mutate", content=body, headers=load.JSON_HEADERS)
                answer = reviewed.json().get("response", {}) if reviewed.status_code == 200 else {}
                answers.add(json.dumps(answer, sort_keys=True))
                if not answer.get("allowed") or answer.get("patchType") != "JSONPatch":
                    problems.append(f"{webhook.name} did not patch {name}: {reviewed.status_code} {reviewed.text[:99]}")
            if len(answers) > 1:
                problems.append(f"the webhook and the baseline answer {name} differently")
    return "FAIL: " + "; ".join(problems) if problems else "allowed + patched"


def run_wrk(started: dict[str, servers.Launched], workdir: Path, effort: Effort) -> list[tuple[str, wrk.WrkRun]]:
    """Every round: webhook (replicas), echo, webhook (new specs) [, baseline (both)]; reversed every other round."""
    script = wrk.write_script(workdir)
    webhook, echo = started["webhook"], started["echo"]
    plan = [(webhook, REPLICAS), (echo, REPLICAS), (webhook, NEW_SPECS)]
    if BASELINE in started:
        plan += [(started[BASELINE], REPLICAS), (started[BASELINE], NEW_SPECS)]
    runs: list[tuple[str, wrk.WrkRun]] = []
    for round_ in range(effort.rounds):
        for server, workload in plan if round_ % 2 == 0 else reversed(plan):
            measured = wrk.run(
                target=server.name,
                url=server.url,
                path="/mutate",
                bodies=workload.files(workdir),
                vary=workload.vary,
                pid=server.pid,
                script=script,
                connections=effort.connections,
                threads=effort.wrk_threads,
                seconds=effort.wrk_seconds,
            )
            runs.append((workload.name, measured))
    return runs


@dataclass
class Results:
    effort: Effort
    answers: str
    wrk_runs: list[tuple[str, wrk.WrkRun]]
    windows: list[load.Window]  # open loop, per server and round
    load_average: tuple[float, float, float]
    baseline: Path | None = None

    def wrk_median(self, target: str, workload: str, metric: Callable[[wrk.WrkRun], float]) -> float:
        values = [metric(r) for w, r in self.wrk_runs if r.target == target and w == workload]
        return statistics.median(values) if values else 0.0

    def open_median(self, target: str, metric: Callable[[load.Window], float]) -> float:
        values = [metric(w) for w in self.windows if w.target == target]
        return statistics.median(values) if values else 0.0

    def failures(self) -> int:
        return sum(r.errors for _, r in self.wrk_runs) + sum(w.failures for w in self.windows)

    def cpu_pressure(self) -> float:
        """The machine's median CPU pressure over the open-loop windows (-1 without PSI)."""
        return statistics.median(w.cpu_pressure for w in self.windows) if self.windows else -1.0

    def summary(self) -> dict[str, Any]:
        def capacity(target: str, workload: str) -> dict[str, float]:
            return {
                "requests_per_second": self.wrk_median(target, workload, lambda r: r.per_second),
                "server_cpu_us_per_request": self.wrk_median(target, workload, lambda r: r.cpu_us_per_request),
                "wrk_latency_p99_ms": self.wrk_median(target, workload, lambda r: r.latency_p99_ms),
            }

        echo = capacity("echo", REPLICAS.name)
        webhook = {w.name: capacity("webhook", w.name) for w in (REPLICAS, NEW_SPECS)}
        echo_rps = echo["requests_per_second"]
        ratios = {name: (c["requests_per_second"] / echo_rps if echo_rps else 0.0) for name, c in webhook.items()}
        targets = ("webhook", "echo", BASELINE) if self.baseline is not None else ("webhook", "echo")
        latency = {
            target: {
                "p50_ms": self.open_median(target, load.latency_p50),
                "p99_ms": self.open_median(target, load.latency_p99),
                "load_process_send_lag_p99_ms": self.open_median(target, load.send_lag_p99),
            }
            for target in targets
        }
        baseline: dict[str, Any] = {}
        if self.baseline is not None:
            base = {w.name: capacity(BASELINE, w.name) for w in (REPLICAS, NEW_SPECS)}
            baseline = {
                "tree": str(self.baseline),
                "webhook": base,
                "throughput_ratio": {
                    name: (c["requests_per_second"] / echo_rps if echo_rps else 0.0) for name, c in base.items()
                },
            }
        return {
            "wrk": {"echo": echo, "webhook": webhook, "throughput_ratio": ratios, "goal": THROUGHPUT_GOAL},
            "baseline": baseline,
            "fixed_rate": {"rate": self.effort.rate, **latency, "p99_goal_ms": LATENCY_P99_GOAL_MS},
            "failed_requests": self.failures(),
            "machine_cpu_pressure": self.cpu_pressure(),
            "load_average_at_start": self.load_average,
            "answers": self.answers,
        }


def run(quick: bool = False, *, effort: Effort | None = None, baseline: Path | None = None) -> Results:
    """Measure everything; ``effort`` overrides what ``quick`` chooses (the smoke test's tiny runs).

    ``baseline``: a checkout of another commit whose webhook is measured in the same rounds (before/after).
    """
    effort = effort or Effort.of(quick)
    wrk.ensure()
    load_average = proc.load_average()
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        workdir = Path(tmp)
        bundle = servers.issue_certs(workdir / "certs")
        with launched_servers(workdir, bundle, baseline) as started:
            answers = check_answers(started, bundle)
            wrk_runs = run_wrk(started, workdir, effort)
            targets = [load.Target(name, server.url, server.pid) for name, server in started.items()]
            windows = load.run_load(
                targets, bundle, effort.latency_load(), "open", REPLICAS.files(workdir), vary=REPLICAS.vary
            )
    return Results(effort, answers, wrk_runs, windows, load_average, baseline)


def _ms(value: float) -> str:
    return f"{value:.2f} ms"


def _verdict(ratio: float) -> str:
    if ratio >= THROUGHPUT_MOONSHOT:
        return f"meets the {THROUGHPUT_MOONSHOT:g} moonshot"
    return f"{'meets' if ratio >= THROUGHPUT_GOAL else 'misses'} the {THROUGHPUT_GOAL:g} goal"


def rows_of(results: Results) -> list[dict[str, str]]:
    s = results.summary()
    effort = results.effort
    section = "webhook service"
    failed = s["failed_requests"]
    load_check = f"FAIL: {failed} requests failed" if failed else results.answers
    if s["machine_cpu_pressure"] > BUSY_PRESSURE:
        load_check += f"; busy machine (CPU pressure {s['machine_cpu_pressure']:.0%})"
    echo = s["wrk"]["echo"]
    wrk_how = f"wrk -c{effort.connections} -t{effort.wrk_threads}, {effort.wrk_seconds:g} s x {effort.rounds}"
    rows = []
    descriptions = {
        REPLICAS.name: "replica pods (seed-1+2 CREATE, each a new name and uid; plan memo hits)",
        NEW_SPECS.name: f"every pod a new spec (seed-1, {NEW_SPEC_COUNT:,} memory sizes; plan memo misses)",
    }
    for workload, description in descriptions.items():
        web = s["wrk"]["webhook"][workload]
        ratio = s["wrk"]["throughput_ratio"][workload]
        rows.append(
            {
                "section": section,
                "case": f"/mutate capacity, {description}, {wrk_how}",
                "ours": f"{web['requests_per_second']:,.0f} req/s",
                "reference": f"echo {echo['requests_per_second']:,.0f} req/s",
                "ratio": f"{ratio:.2f} of echo",
                "check": f"{_verdict(ratio)}; {load_check}",
            }
        )
        rows.append(
            {
                "section": section,
                "case": f"/mutate server CPU per request, {workload} (same wrk runs)",
                "ours": f"{web['server_cpu_us_per_request']:,.0f} µs",
                "reference": f"echo {echo['server_cpu_us_per_request']:,.0f} µs",
                "ratio": f"{web['server_cpu_us_per_request'] / echo['server_cpu_us_per_request']:.1f}x echo"
                if echo["server_cpu_us_per_request"]
                else "-",
                "check": "-",
            }
        )
    if s["baseline"]:
        tree = Path(s["baseline"]["tree"]).name
        for workload in descriptions:
            base = s["baseline"]["webhook"][workload]
            web = s["wrk"]["webhook"][workload]
            ratio = s["baseline"]["throughput_ratio"][workload]
            rows.append(
                {
                    "section": section,
                    "case": f"/mutate capacity, {workload}: baseline webhook from {tree} (same rounds)",
                    "ours": f"{base['requests_per_second']:,.0f} req/s, {base['server_cpu_us_per_request']:,.0f} µs",
                    "reference": f"this tree {web['requests_per_second']:,.0f} req/s",
                    "ratio": f"{ratio:.2f} of echo",
                    "check": load_check,
                }
            )
    fixed = s["fixed_rate"]
    web_lat, echo_lat = fixed["webhook"], fixed["echo"]
    lag = max(web_lat["load_process_send_lag_p99_ms"], echo_lat["load_process_send_lag_p99_ms"])
    verdict = "meets" if web_lat["p99_ms"] <= LATENCY_P99_GOAL_MS else "misses"
    latency_check = f"{verdict} p99 <= {LATENCY_P99_GOAL_MS:g} ms; {load_check}"
    if lag > LAG_TOLERANCE_MS:
        latency_check += f"; load process late by {lag:.0f} ms (p99)"
    if s["baseline"]:
        base_lat = fixed[BASELINE]
        latency_check += f"; baseline p50 {_ms(base_lat['p50_ms'])}, p99 {_ms(base_lat['p99_ms'])}"
    rows.append(
        {
            "section": section,
            "case": (
                f"/mutate latency at {effort.rate:g} req/s, replica pods, each a new name and uid (own open-loop "
                f"client, {effort.latency_seconds:g} s x {effort.rounds})"
            ),
            "ours": f"p50 {_ms(web_lat['p50_ms'])}, p99 {_ms(web_lat['p99_ms'])}",
            "reference": f"echo p50 {_ms(echo_lat['p50_ms'])}, p99 {_ms(echo_lat['p99_ms'])}",
            "ratio": f"p50 +{web_lat['p50_ms'] - echo_lat['p50_ms']:.2f} ms",
            "check": latency_check,
        }
    )
    return rows


def table_rows(quick: bool) -> list[dict[str, str]]:
    return rows_of(run(quick))


def _run_summary(workload: str, r: wrk.WrkRun) -> dict[str, Any]:
    return {"workload": workload, **asdict(r), "per_second": r.per_second, "cpu_us_per_request": r.cpu_us_per_request}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds (noisier)")
    parser.add_argument("--json", type=Path, help="also write the figures, per run, as JSON here")
    parser.add_argument(
        "--compare-with",
        type=Path,
        metavar="CHECKOUT",
        help="also measure the webhook of this checkout of another commit in the same rounds (before/after), "
        "e.g. one made by `git worktree add /tmp/base <commit>`",
    )
    args = parser.parse_args(argv)
    results = run(args.quick, baseline=args.compare_with.resolve() if args.compare_with else None)
    rows = rows_of(results)
    for row in rows:
        print(" | ".join(row[k] for k in ("case", "ours", "reference", "ratio", "check")))
    if args.json is not None:
        report.write_json(
            args.json,
            "bench_webhook",
            args.quick,
            {
                "summary": results.summary(),
                "effort": asdict(results.effort),
                "wrk_runs": [_run_summary(w, r) for w, r in results.wrk_runs],
                "open_loop_windows": [load.window_summary(w) for w in results.windows],
            },
        )
    return 1 if any(row["check"].startswith("FAIL") for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
