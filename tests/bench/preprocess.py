"""Driver of tests/bench/preprocess: see that script.

Every contender runs on the same input with 2 threads, `--runs` times in alternation
(the machine is shared and noisy: a contender's runs are spread over the whole
benchmark, not bunched), and the table gives each one's median wall and CPU time, its
peak RSS, and ratios against probeflow.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-preprocess"
COORDINATOR = ROOT / "target" / "release" / "coordinator"


def measured(cmd: list[str]) -> tuple[float, float, float]:
    """Runs cmd under /usr/bin/time -v; returns (wall s, CPU s (user + sys), peak RSS MB)."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    h, m, s = wall.groups()
    seconds = int(h or 0) * 3600 + int(m) * 60 + float(s)
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", proc.stderr).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", proc.stderr).group(1))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return seconds, user + system, rss_kb / 1024


def contenders(inp: Path, threads: int) -> dict[str, list[str]]:
    """Each contender's command (a fresh output each run)."""
    glob = f"{inp}/*.parquet"
    py = sys.executable
    out = WORK / "probeflow-out"
    job = WORK / "job.toml"
    job.write_text(
        f"""[input]
url = "{glob}"
[output]
url = "{out}"
shards = 64
[run]
workers = {threads}
memory_per_worker = "2GiB"
scratch = "{WORK / 'scratch'}"
"""
    )
    duck_out = WORK / "duckdb-out.parquet"
    polars_out = WORK / "polars-out.parquet"
    return {
        "Parquet decode floor (pyarrow, all columns)": [
            py, "-c",
            f"import pyarrow as pa, pyarrow.dataset as d; pa.set_cpu_count({threads}); "
            f"pa.set_io_thread_count({threads}); d.dataset('{inp}', format='parquet').to_table()",
        ],
        "probeflow: the whole job (local, 2 GiB each)": [
            "sh", "-c", f"rm -rf '{out}' && exec '{COORDINATOR}' run '{job}'",
        ],
        "Polars: group_by + sort_by → Parquet": [
            "env", f"POLARS_MAX_THREADS={threads}", py, "-c",
            "import polars as pl; "
            f"pl.scan_parquet('{glob}').group_by('src_addr').agg("
            "pl.struct('event_time', 'dst_addr', 'rtt', 'ip_version').sort_by('event_time')"
            f").sink_parquet('{polars_out}')",
        ],
        "DuckDB: GROUP BY + LIST(ORDER BY) → Parquet": [
            py, "-c",
            f"import duckdb; c = duckdb.connect(); c.execute(\"SET threads={threads}\"); "
            "c.execute(\"COPY (SELECT src_addr, LIST(struct_pack(event_time, dst_addr, rtt, ip_version) "
            f"ORDER BY event_time) AS measurements FROM read_parquet('{glob}') GROUP BY src_addr) "
            f"TO '{duck_out}' (FORMAT parquet)\")",
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", type=int, nargs="?", default=20_000_000)
    ap.add_argument("--runs", type=int, default=3, help="runs of each contender, alternating")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", action="append", default=[], help="leave out contenders whose label has this")
    args = ap.parse_args()

    inp = WORK / f"input-{args.rows}"
    marker = inp / ".complete"
    if not marker.exists():
        shutil.rmtree(inp, ignore_errors=True)
        print(f"generating {args.rows} rows into {inp} …", flush=True)
        subprocess.run([str(COORDINATOR), "generate", "--rows", str(args.rows), "--out", str(inp)], check=True)
        marker.touch()
    commands = {k: v for k, v in contenders(inp, args.threads).items() if not any(s in k for s in args.skip)}
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in commands}
    for r in range(args.runs):
        for label, cmd in commands.items():
            runs[label].append(measured(cmd))
            wall, cpu, rss = runs[label][-1]
            print(f"  run {r + 1}: {label}: {wall:.1f} s wall, {cpu:.1f} CPU s, {rss:.0f} MB", flush=True)

    def median(label: str, i: int) -> float:
        return statistics.median(x[i] for x in runs[label])

    ours = "probeflow: the whole job (local, 2 GiB each)"
    size = sum(f.stat().st_size for f in inp.glob("*.parquet")) / 1e9
    print(f"\n{args.rows} input rows ({size:.2f} GB of Parquet), {args.threads} threads each, "
          f"median of {args.runs} alternating runs")
    print(f"{'':<46} {'wall s':>7} {'CPU s':>7} {'peak RSS MB':>12} {'÷ probeflow wall':>17} {'÷ probeflow CPU':>16}")
    for label in commands:
        wall, cpu, rss = median(label, 0), median(label, 1), max(x[2] for x in runs[label])
        ratio = "" if ours not in runs else f"{wall / median(ours, 0):>16.2f}x {cpu / median(ours, 1):>15.2f}x"
        print(f"{label:<46} {wall:>7.1f} {cpu:>7.1f} {rss:>12.0f} {ratio}")
    if ours in runs:
        per_row = median(ours, 1) / args.rows * 1e9
        print(f"probeflow: {per_row:.0f} CPU ns per input row")


if __name__ == "__main__":
    main()
