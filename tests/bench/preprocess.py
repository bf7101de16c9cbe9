"""Driver of tests/bench/preprocess: see that script."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-preprocess"
COORDINATOR = ROOT / "target" / "release" / "coordinator"


def measured(cmd: list[str]) -> tuple[float, float]:
    """Runs cmd under /usr/bin/time -v; returns (wall seconds, peak RSS MB)."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{proc.stdout}\n{proc.stderr}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    h, m, s = wall.groups()
    seconds = int(h or 0) * 3600 + int(m) * 60 + float(s)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return seconds, rss_kb / 1024


def main(rows: int) -> None:
    inp = WORK / "input"
    marker = inp / f".rows-{rows}"
    if not marker.exists():
        shutil.rmtree(inp, ignore_errors=True)
        print(f"generating {rows} rows into {inp} …", flush=True)
        subprocess.run([str(COORDINATOR), "generate", "--rows", str(rows), "--out", str(inp)], check=True)
        marker.touch()
    glob = f"{inp}/*.parquet"
    py = sys.executable

    floor = measured([py, "-c", f"import pyarrow.dataset as d; d.dataset('{inp}', format='parquet').to_table()"])

    out = WORK / "probeflow-out"
    shutil.rmtree(out, ignore_errors=True)
    job = WORK / "job.toml"
    job.write_text(
        f"""[input]
url = "{glob}"
[output]
url = "{out}"
shards = 64
[run]
workers = 2
memory_per_worker = "2GiB"
scratch = "{WORK / 'scratch'}"
"""
    )
    ours = measured([str(COORDINATOR), "run", str(job)])

    duck_out = WORK / "duckdb-out.parquet"
    query = (
        "import duckdb; c = duckdb.connect(); c.execute(\"SET threads=2\"); "
        f"c.execute(\"COPY (SELECT src_addr, LIST(struct_pack(event_time, dst_addr, rtt, ip_version) "
        f"ORDER BY event_time) AS measurements FROM read_parquet('{glob}') GROUP BY src_addr) "
        f"TO '{duck_out}' (FORMAT parquet)\")"
    )
    duck = measured([py, "-c", query])

    print(f"\n{rows} input rows, 2 cores")
    print(f"{'':<42} {'wall s':>8} {'peak RSS MB':>12} {'time vs probeflow':>18}")
    for label, (t, rss) in [
        ("Parquet decode floor (pyarrow, all columns)", floor),
        ("probeflow local mode (2 workers × 2 GiB)", ours),
        ("DuckDB GROUP BY + LIST(ORDER BY) → Parquet", duck),
    ]:
        print(f"{label:<42} {t:>8.1f} {rss:>12.0f} {t / ours[0]:>17.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000_000)
