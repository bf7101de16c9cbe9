"""A long chaos run on the multi-host bed (a benchmark, not a test; needs root):

    .venv/bin/python tests/bench/cluster_bed_chaos.py [--rows 4000000] [--workers 4]
        [--lease 3] [--every 3] [--delay-ms 20] [--seed 1] [--map-rows 50000]
        [--bin target/release] [--overlapping] [--store moto|ceph] [--baseline]

Generates ROWS rows, runs the job in local mode for the reference bytes, then runs it in
cluster mode on the bed (tests/cluster_bed) with WORKERS workers while chaos.py makes a
random fault every ~EVERY seconds (worker killed, paused or cut off past the lease,
coordinator killed and restarted) and the store proxy adds DELAY_MS per request with
SlowDown, 500s and resets on a small fraction. Prints every fault and its recovery,
the count per kind, the wall time, and whether the shards are local mode's bytes; and
the work: task-seconds that workers spent on attempts (from their logs: `running` to
`task ended`, or to the log's last line for an attempt its worker never ended) against
those of the accepted attempts, whose difference is the work redone. `--baseline` first
runs the same job on a bed of its own without faults, for its task-seconds and time.
`--store ceph` puts Ceph's radosgw on the store host instead of moto's server.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster_bed"))
sys.path.insert(0, str(ROOT / "tests"))  # support.*


STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")
FIELD = re.compile(r"(\w+)=(\S+)")


def stamp(line: str) -> float | None:
    m = STAMP.match(line)
    if m is None:
        return None
    return datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()


def task_seconds(bed) -> tuple[float, float, int, int]:
    """(task-seconds of every attempt run, of the accepted ones, attempts run, tasks
    accepted), from the worker and coordinator logs on `bed`."""
    accepted: dict[str, str] = {}
    spent: dict[tuple[str, str], float] = {}
    runs = 0
    for host in bed.hosts.values():
        for log in sorted(host.home.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()
            if log.name.startswith("coordinator"):
                for line in lines:
                    if ": journaled " in line:
                        f = dict(FIELD.findall(line))
                        if "task" in f:
                            accepted[f["task"]] = f["attempt"]
                continue
            if not log.name.startswith("worker"):
                continue
            last = next((t for t in map(stamp, reversed(lines)) if t is not None), None)
            open_runs: dict[tuple[str, str], float] = {}
            for line in lines:
                f = dict(FIELD.findall(line))
                key = (f.get("task", ""), f.get("attempt", ""))
                if ": running " in line and "task" in f:
                    open_runs[key] = stamp(line) or 0.0
                    runs += 1
                elif ": task ended " in line and "ms" in f:
                    open_runs.pop(key, None)
                    spent[key] = spent.get(key, 0.0) + int(f["ms"]) / 1000
            for key, started in open_runs.items():  # never ended: killed, cut, paused
                spent[key] = spent.get(key, 0.0) + max(0.0, (last or started) - started)
    total = sum(spent.values())
    kept = sum(spent.get((t, a), 0.0) for t, a in accepted.items())
    return total, kept, runs, len(accepted)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--lease", type=int, default=3)
    ap.add_argument("--every", type=float, default=3.0)
    ap.add_argument("--delay-ms", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--map-rows", type=int, default=50_000, help="the job's rows_per_map_task")
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release")
    ap.add_argument("--overlapping", action="store_true",
                    help="also the overlapping faults (chaos.py's OVERLAPPING)")
    ap.add_argument("--store", choices=("moto", "ceph"), default="moto", help="the store host's S3 server")
    ap.add_argument("--baseline", action="store_true",
                    help="first run the job on the bed without faults (its task-seconds and time)")
    args = ap.parse_args()
    os.environ["PROBEFLOW_COORDINATOR"] = str(args.bin / "coordinator")
    os.environ["PROBEFLOW_WORKER"] = str(args.bin / "worker")
    from bed import Bed, require_namespaces  # noqa: E402
    from chaos import Chaos  # noqa: E402
    import test_bed  # noqa: E402

    require_namespaces()
    work = Path(tempfile.mkdtemp(prefix="bed-chaos-"))
    inputs = test_bed.generate_input(work, args.rows)
    local = work / "local.toml"
    local.write_text(test_bed.job_text(f"{inputs}/*.parquet", work / "local-out", "local", "", 60,
                                       map_rows=args.map_rows))
    test_bed.run(["run", str(local)])
    want = test_bed.shards_of(json.loads((work / "local-out" / "manifest.json").read_text()))

    if args.baseline:
        import time  # noqa: PLC0415

        bed = Bed(work / "bed-baseline", workers=args.workers, store_server=args.store)
        try:
            started = time.time()
            coordinator = test_bed.start_job(bed, inputs, lease=args.lease, map_rows=args.map_rows)
            for w in [h for h in bed.hosts if re.fullmatch(r"w\d+", h)]:
                test_bed.start_worker(bed, w, log="worker-1")
            assert coordinator.wait(timeout=3600) == 0, bed.log("coord", "coordinator")[-3000:]
            took_base = time.time() - started
            assert test_bed.output_shards(bed) == want
            base = task_seconds(bed)
        finally:
            bed.close()
        print(f"without faults: {took_base:.0f} s; {base[0]:.0f} task-seconds in {base[2]} attempts "
              f"({base[3]} tasks)")
    bed = Bed(work / "bed", workers=args.workers, store_server=args.store)
    try:
        chaos = Chaos(bed, inputs, test_bed.start_job, test_bed.start_worker, lease=args.lease,
                      lock=args.lease + 1, every=args.every, seed=args.seed, map_rows=args.map_rows,
                      overlapping=args.overlapping,
                      store_faults=dict(delay_ms=args.delay_ms, slowdown=0.02, error=0.01, reset=0.01))
        took = chaos.run(timeout=3600)
        same = test_bed.output_shards(bed) == want
        proxy = [line for line in bed.log("store", "proxy").splitlines() if line.startswith("fault ")]
        total, kept, runs, tasks = task_seconds(bed)
    finally:
        bed.close()
    print(f"work: {total:.0f} task-seconds in {runs} attempts of {tasks} tasks; the accepted attempts' "
          f"{kept:.0f}; redone {total - kept:.0f} task-seconds ({(total - kept) / max(kept, 1e-9):.1%})"
          + (f"; without faults {base[0]:.0f} task-seconds" if args.baseline else ""))
    print(f"{args.rows} rows, {args.workers} workers, lease {args.lease} s: {sum(chaos.counts.values())} faults "
          f"({', '.join(f'{k} {v}' for k, v in sorted(chaos.counts.items()))}) and {len(proxy)} store faults "
          f"in {took:.0f} s, {chaos.coord_runs} coordinator runs; local mode's bytes: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
