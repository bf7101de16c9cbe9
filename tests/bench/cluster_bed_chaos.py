"""A long chaos run on the multi-host bed (a benchmark, not a test; needs root):

    .venv/bin/python tests/bench/cluster_bed_chaos.py [--rows 4000000] [--workers 4]
        [--lease 3] [--every 3] [--delay-ms 20] [--seed 1] [--map-rows 50000]
        [--bin target/release] [--overlapping]

Generates ROWS rows, runs the job in local mode for the reference bytes, then runs it in
cluster mode on the bed (tests/cluster_bed) with WORKERS workers while chaos.py makes a
random fault every ~EVERY seconds (worker killed, paused or cut off past the lease,
coordinator killed and restarted) and the store proxy adds DELAY_MS per request with
SlowDown, 500s and resets on a small fraction. Prints every fault and its recovery,
the count per kind, the wall time, and whether the shards are local mode's bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster_bed"))
sys.path.insert(0, str(ROOT / "tests"))  # support.*


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

    bed = Bed(work / "bed", workers=args.workers)
    try:
        chaos = Chaos(bed, inputs, test_bed.start_job, test_bed.start_worker, lease=args.lease,
                      lock=args.lease + 1, every=args.every, seed=args.seed, map_rows=args.map_rows,
                      overlapping=args.overlapping,
                      store_faults=dict(delay_ms=args.delay_ms, slowdown=0.02, error=0.01, reset=0.01))
        took = chaos.run(timeout=3600)
        same = test_bed.output_shards(bed) == want
        proxy = [line for line in bed.log("store", "proxy").splitlines() if line.startswith("fault ")]
    finally:
        bed.close()
    print(f"{args.rows} rows, {args.workers} workers, lease {args.lease} s: {sum(chaos.counts.values())} faults "
          f"({', '.join(f'{k} {v}' for k, v in sorted(chaos.counts.items()))}) and {len(proxy)} store faults "
          f"in {took:.0f} s; local mode's bytes: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
