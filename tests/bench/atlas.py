"""Benchmark: RIPE Atlas dumps read by the job, against RIPE's own parser and against the
job on the same packets as Parquet.

    .venv/bin/python tests/bench/atlas.py [--gb 1.0] [--memory 256MiB]

Generates one hourly dump of `--gb` GB of JSON (tests/support/atlas.py's corpus: every
firmware's fields, dups, errors, timeouts, private and public sources), written as RIPE
writes them (multistream bzip2, 900 kB streams), then in one run, one core each:

* `probeflow`: `coordinator run` on the dump (local mode, 1 worker, `--memory`), its
  wall and CPU time and peak RSS (the bound is 1.25 × memory + 100 MB);
* `sagan`: `python -c` reading the same dump with `bz2` and sagan's `Result.get`, per
  line, doing nothing with the packets (the least a converter does);
* `probeflow-parquet`: the job on the same kept packets as Parquet (the conversion of
  tests/e2e/test_atlas.py), to show what reading JSON costs over reading Parquet.

Prints results/s and packets/s of each, and the ratios. Needs the release build
(`cargo build --release --bin coordinator`).
"""

from __future__ import annotations

import argparse
import bz2
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.atlas import generated_results  # noqa: E402
from support.probe_rows import write_job  # noqa: E402

COORDINATOR = ROOT / "target" / "release" / "coordinator"
WORK = ROOT / "target" / "bench-atlas"


def measured(cmd: list[str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MiB, stdout) of cmd under /usr/bin/time -v."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{cmd[:3]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    h, m, s = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr).groups()
    wall = int(h or 0) * 3600 + int(m) * 60 + float(s)
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", proc.stderr).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", proc.stderr).group(1))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) / 1024
    return wall, user + system, rss, proc.stdout


def make_dump(path: Path, gb: float) -> tuple[int, int]:
    """Writes the dump; returns (lines, bytes of JSON)."""
    target = int(gb * 1e9)
    written = lines = 0
    block = 20_000
    seed = 0
    with open(path, "wb") as f:
        chunk = bytearray()
        while written < target:
            for line in generated_results(block, seed=seed, probes=12_000 // 4)[:block]:
                data = line.encode() + b"\n"
                chunk += data
                written += len(data)
                lines += 1
                if len(chunk) >= 900_000:
                    f.write(bz2.compress(bytes(chunk), 9))
                    chunk.clear()
            seed += 1
        if chunk:
            f.write(bz2.compress(bytes(chunk), 9))
    return lines, written


SAGAN = """
import bz2, sys
from ripe.atlas.sagan import Result
results = packets = 0
with bz2.open(sys.argv[1], "rt") as f:
    for line in f:
        try:
            r = Result.get(line, on_error=Result.ACTION_IGNORE, on_malformation=Result.ACTION_IGNORE)
        except Exception:
            continue
        if r.type == "ping":
            results += 1
            packets += len(r.packets)
print(results, packets)
"""


def job(tmp: Path, name: str, url: Path, memory: str, atlas: bool) -> Path:
    out = tmp / f"out-{name}"
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    return write_job(tmp / f"{name}.toml", {
        "input": {"url": url, **({"format": "ripe_atlas"} if atlas else {})},
        "output": {"url": out, "shards": 64},
        "run": {"mode": "local", "workers": 1, "memory_per_worker": memory, "scratch": tmp / "scratch"},
    })


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--skip-sagan", action="store_true")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    dump = WORK / f"ping-2020-09-13T1200-{args.gb}GB.bz2"
    if not dump.exists():
        t = time.time()
        lines, size = make_dump(dump, args.gb)
        print(f"generated {dump.name}: {lines} lines, {size / 1e9:.2f} GB of JSON, "
              f"{dump.stat().st_size / 1e6:.0f} MB bz2 ({time.time() - t:.0f} s)")
    wall, cpu, rss, _ = measured([str(COORDINATOR), "run", str(job(WORK, "atlas", dump, args.memory, True))])
    manifest = json.loads((WORK / "out-atlas" / "manifest.json").read_text())
    t = manifest["totals"]
    results, packets, kept = t["atlas"]["results"], t["atlas"]["packets"], t["kept_measurements"]
    memory_mib = int(re.match(r"(\d+)MiB", args.memory).group(1)) if args.memory.endswith("MiB") else None
    bound = f" (bound {1.25 * memory_mib + 100:.0f} MiB)" if memory_mib else ""
    rows = [("probeflow (ripe_atlas)", wall, cpu, rss)]
    print(f"probeflow: {results} results, {packets} packets, {kept} kept; peak RSS {rss:.0f} MiB{bound}")

    # The same kept packets as Parquet: the job's own shards → a table of packets is
    # not what a user has, so convert the dump by the documented rules.
    parquet = WORK / "atlas-packets.parquet"
    if not parquet.exists():
        import pyarrow.parquet as pq
        sys.path.insert(0, str(ROOT / "tests" / "e2e"))
        from test_atlas import _as_parquet_rows  # noqa: PLC0415
        with bz2.open(dump, "rt") as f:
            table = _as_parquet_rows(line.rstrip("\n") for line in f)
        pq.write_table(table, parquet, row_group_size=1_000_000)
    pw, pc, prss, _ = measured([str(COORDINATOR), "run", str(job(WORK, "parquet", parquet, args.memory, False))])
    rows.append(("probeflow (same packets, Parquet)", pw, pc, prss))
    pm = json.loads((WORK / "out-parquet" / "manifest.json").read_text())
    same = [s["blake3"] for s in pm["shards"]] == [s["blake3"] for s in manifest["shards"]]
    print(f"Parquet run: same shards as the dump's: {same}")

    if not args.skip_sagan:
        sw, sc, srss, out = measured([sys.executable, "-c", SAGAN, str(dump)])
        rows.append(("sagan (python -c, parse only)", sw, sc, srss))
        print(f"sagan: {out.strip()} (results, packets)")

    print(f"\n| contender | wall s | CPU s | peak RSS MiB | results/s | packets/s | wall vs probeflow |")
    print("|---|---|---|---|---|---|---|")
    for name, w, c, r in rows:
        print(f"| {name} | {w:.1f} | {c:.1f} | {r:.0f} | {results / w:,.0f} | {packets / w:,.0f} | {w / wall:.2f}× |")


if __name__ == "__main__":
    main()
