"""The first pod of each of 8 new workloads: ``filter`` then ``prioritize`` in process, 100 prefilled nodes.

For instruction counts (robust on a shared host), subtract a run that only builds the cluster::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python -m bench.extender_first_pod setup      # the cluster and the bodies only
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python -m bench.extender_first_pod calls      # the same plus 8 x (filter + prioritize)

``calls`` prints a digest of the 16 JSON answers (equal digests: byte-identical answers, e.g. against
a base tree) and the extender's cache (hits, misses); ``cpu`` prints each filter's CPU milliseconds
(``time.process_time``) with the collector tuned as ``numaguard extender`` tunes it.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import uuid

from bench import bench_extender


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "calls"
    if mode == "cpu":
        from servicekit import gc_tuning

        gc_tuning.tune_for_serving(gc_tuning.ANSWER_CACHING)
    cluster, rng = bench_extender.prefilled(100, 300, 11)
    bodies = []
    for index, template in enumerate(bench_extender.workloads(rng, 8)):
        raw = json.loads(json.dumps(template))
        raw["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/latency/{index}"))
        feasible = [n for n in cluster.names if cluster.fits(n, bench_extender._requests(raw))]
        bodies.append(json.dumps({"Pod": raw, "Nodes": None, "NodeNames": feasible}))
    if mode == "setup":
        return 0
    answers = []
    spent = []
    for body in bodies:
        started = time.process_time()
        filtered = cluster.extender.filter(json.loads(body))
        spent.append(time.process_time() - started)
        scores = cluster.extender.prioritize({**json.loads(body), "NodeNames": filtered["NodeNames"]})
        answers.append(json.dumps(filtered) + json.dumps(scores))
    if mode == "cpu":
        print("filter CPU ms per first pod:", " ".join(f"{s * 1000:.1f}" for s in spent))
    else:
        print(hashlib.sha256("".join(answers).encode()).hexdigest(), cluster.extender.cache_stats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
