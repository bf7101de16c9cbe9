"""What store latency costs the preprocessing job on the multi-host bed (a benchmark, not
a test; needs root):

    .venv/bin/python tests/bench/cluster_bed_latency.py [--rows 2000000] [--shards 16]
        [--delays 0,50,200] [--bin target/release]

Generates ROWS rows once, then for each delay runs the job in cluster mode on the bed
(tests/cluster_bed): a coordinator and 2 workers on hosts of their own, input and output
on the store host, every store request of the job through fault_proxy.py adding the
delay (no other fault). Prints the wall time per delay and its ratio to the first, and
checks every run wrote the same shards.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster_bed"))
sys.path.insert(0, str(ROOT / "tests"))  # support.*


def summarize(trace: Path, bed) -> None:
    """Prints, per host and kind of object, the requests, their bytes and the span of
    time they ran in."""
    import collections
    hosts = {h.address: name for name, h in bed.hosts.items()}
    kinds = collections.defaultdict(lambda: [0, 0, float("inf"), 0.0, 0.0])
    for line in trace.read_text().splitlines():
        start, end, peer, method, path, up, down = line.split("\t")
        path = path.split("?")[0]
        if "/shuffle/" in path:
            what = "shuffle index" if path.endswith(".index") else "shuffle"
        elif "/_job/" in path:
            what = "_job/" + path.split("/_job/")[1].split("/")[0]
        elif path.endswith(".array_record"):
            what = "shard"
        else:
            what = path.rsplit("/", 1)[-1][:30] if "." in path.rsplit("/", 1)[-1] else path[:30]
        k = kinds[(hosts.get(peer, peer), what, method)]
        k[0] += 1
        k[1] += int(up) + int(down)
        k[2] = min(k[2], float(start))
        k[3] = max(k[3], float(end))
        k[4] += float(end) - float(start)
    print(f"{'host':6} {'object':22} {'method':6} {'requests':>8} {'MB':>8} {'first':>7} {'last':>7} {'busy s':>7}")
    for (host, what, method), (n, b, first, last, busy) in sorted(kinds.items(), key=lambda kv: kv[1][2]):
        print(f"{host:6} {what:22} {method:6} {n:8d} {b / 1e6:8.1f} {first:7.1f} {last:7.1f} {busy:7.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--delays", default="0,50,200")
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release")
    ap.add_argument("--trace", type=Path, default=None,
                    help="a folder: each run's store requests (fault_proxy.py --trace) go to "
                         "<folder>/<delay>ms.tsv, and a summary by kind of object is printed")
    args = ap.parse_args()
    os.environ["PROBEFLOW_COORDINATOR"] = str(args.bin / "coordinator")
    os.environ["PROBEFLOW_WORKER"] = str(args.bin / "worker")
    from bed import Bed, require_namespaces  # noqa: E402
    import test_bed  # noqa: E402

    require_namespaces()
    test_bed.SHARDS = args.shards
    work = Path(tempfile.mkdtemp(prefix="bed-latency-"))
    inputs = test_bed.generate_input(work, args.rows)
    results = []
    for delay in [int(d) for d in args.delays.split(",")]:
        bed = Bed(work / f"bed-{delay}", workers=2)
        try:
            trace = {}
            if args.trace is not None:
                args.trace.mkdir(parents=True, exist_ok=True)
                trace = {"trace": args.trace / f"{delay}ms.tsv"}
            through = bed.start_proxy(delay_ms=delay, **trace)
            started = time.time()
            coordinator = test_bed.start_job(bed, inputs, env=through)
            for w in ("w1", "w2"):
                test_bed.start_worker(bed, w, env=through)
            rc = coordinator.wait(timeout=3600)
            took = time.time() - started
            if rc != 0:
                sys.exit(bed.log("coord", "coordinator")[-3000:])
            shards = test_bed.output_shards(bed)
            tasks = re.search(r"\((\d+) tasks run", bed.log("coord", "coordinator"))
            results.append((delay, took, shards, tasks.group(1) if tasks else "?"))
            if trace:
                summarize(trace["trace"], bed)
        finally:
            bed.close()
    base = results[0][1]
    print(f"{args.rows} rows, {args.shards} shards, 2 workers on the bed; store requests through the proxy")
    for delay, took, shards, tasks in results:
        print(f"  {delay:4d} ms per request: {took:7.1f} s  ({took / base:4.1f}x the first)  tasks {tasks}")
    assert all(r[2] == results[0][2] for r in results), "the runs wrote different shards"
    print("  every run wrote the same shards")


if __name__ == "__main__":
    main()
