"""Driver of tests/bench/preprocess: see that script.

Every contender runs on the same input with 2 threads, `--runs` times in alternation
(the machine is shared and noisy: a contender's runs are spread over the whole
benchmark, not bunched), and the table gives each one's median wall and CPU time, its
peak RSS, and ratios against probeflow.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-preprocess"
COORDINATOR = ROOT / "target" / "release" / "coordinator"
FLOOR = ROOT / "target" / "release" / "examples" / "floor"


STAGE = re.compile(r"(\w+)_s=([\d.]+)")


def stage_seconds(log: str) -> dict[str, float]:
    """Sums the task time per stage of probeflow's `map timings` / `reduce timings`
    debug lines (scan, validate, shuffle, commit; sort, rows, upload). A map's commit
    and a reduce's upload run behind the worker's next task: their times overlap
    others'."""
    totals: dict[str, float] = {}
    for line in log.splitlines():
        if " timings " in line:
            for name, seconds in STAGE.findall(line):
                totals[name] = totals.get(name, 0.0) + float(seconds)
    return totals


def measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, str]:
    """Runs cmd under /usr/bin/time -v; returns (wall s, CPU s (user + sys), peak RSS MB,
    its stderr)."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    h, m, s = wall.groups()
    seconds = int(h or 0) * 3600 + int(m) * 60 + float(s)
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", proc.stderr).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", proc.stderr).group(1))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return seconds, user + system, rss_kb / 1024, proc.stderr


FLOOR_LINE = re.compile(r"floor (\w+): rows=(\d+) bytes=(\d+) wall_s=([\d.]+) cpu_s=([\d.]+)")


def floor(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one floor stage (jobs/probe_rows/examples/floor.rs: the job's own
    read of its five input columns, or its shards re-written from their rows), as the
    floor measures itself (a write's reading back of the rows is not counted)."""
    proc = subprocess.run([str(FLOOR), *args], capture_output=True, text=True)
    found = FLOOR_LINE.search(proc.stdout)
    if proc.returncode != 0 or not found:
        sys.exit(f"floor {args[0]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return float(found.group(4)), float(found.group(5))


def stage_walls(out: Path) -> dict[str, float]:
    """Each stage's wall time in the finished job's output, from `coordinator status
    --json` (planned to last task done)."""
    proc = subprocess.run([str(COORDINATOR), "status", "--json", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"coordinator status failed:\n{proc.stderr[-3000:]}")
    import json  # noqa: PLC0415

    stages = json.loads(proc.stdout)["stages"]
    return {s["name"]: s["finished_at"] - s["planned_at"] for s in stages if s.get("finished_at")}


def outputs() -> list[Path]:
    """What the contenders write: removed after each run, so that the next one (and a
    200M-row benchmark with all of them) has the disk to itself."""
    return [WORK / "probeflow-out", WORK / "scratch", WORK / "floor-scratch", WORK / "duckdb-out.parquet",
            WORK / "polars-out.parquet"]


def remove_outputs() -> None:
    for path in outputs():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def contenders(inp: Path, threads: int, shards: int) -> dict[str, list[str]]:
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
shards = {shards}
[run]
workers = {threads}
memory_per_worker = "2GiB"
scratch = "{WORK / 'scratch'}"
"""
    )
    duck_out = WORK / "duckdb-out.parquet"
    polars_out = WORK / "polars-out.parquet"
    return {
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


def generate_atlas(rows: int, out: Path, seed: int = 45, files: int = 8, even: bool = False) -> None:
    """`rows` measurements at RIPE Atlas's shape into `files` Parquet files under `out`
    (the demo generator's columns: src_addr, dst_addr (Utf8), ip_version (Int32), rtt
    (Float64 ms, -1.0 for a failed ping), event_time (Int64 unix s)), one file at a time
    (a 200M-row input in about 1.5 GB of memory).

    * sources: rows / 600, between 10 000 and 100 000, 58 % IPv4 and 42 % IPv6 (Atlas has
      ~12 000 probes at a time and tens of thousands over its history);
    * history lengths: heavy-tailed (log-normal, sigma 1.2: the median half the mean, the
      longest tens of times the mean), and the 3 longest hold 3 % of the rows each: past
      one 8 MiB row from 20M rows on (a measurement is ~20 bytes in a row);
    * each source pings 40 anchors of its own family among 3 000 in turn, over 30 days
      for the longest histories and a stretch of 30-100 % of that for the others (probes
      come and go), at a rate that makes its count; files cover consecutive stretches of
      time, in time order, each holding the sources active then, as Atlas's dumps do;
    * RTT: log-normal per (source, anchor) path around 40 ms with 20 % jitter; 3 % failed.

    `even`: every source the same history, over the whole 30 days (rows / 2 000
    sources, 10 000 to 100 000: 200M rows are 100 000 sources × 2 000 measurements).
    """
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    n = int(min(100_000, max(10_000, rows // (2_000 if even else 600))))
    weights = rng.lognormal(0.0, 1.2, n)
    top = np.argsort(weights)[-3:]
    weights[top] = 0.0
    weights *= 0.91 / weights.sum()
    weights[top] = 0.03
    if even:
        weights = np.full(n, 1.0 / n)
        top = np.arange(n)
    counts = np.floor(weights * rows).astype(np.int64)
    counts[np.argmax(counts)] += rows - counts.sum()
    v6 = rng.random(n) >= 0.58
    octets = rng.integers(1, 223, (n, 4))
    src = np.array([
        f"2a00:{o[0]:x}{o[1]:02x}:{o[2]:x}::{i:x}" if six else f"{o[0]}.{o[1]}.{o[2]}.{o[3]}"
        for i, (o, six) in enumerate(zip(octets, v6))
    ], dtype=object)
    anchors = 3_000
    a_octets = rng.integers(1, 223, (anchors, 3))
    anchor_v4 = np.array([f"193.{o[0]}.{o[1]}.{o[2] % 250 + 1}" for o in a_octets], dtype=object)
    anchor_v6 = np.array([f"2001:67c:{o[0]:x}:{o[1]:x}::{o[2]:x}" for o in a_octets], dtype=object)
    src_dict = pa.array(src, pa.string())
    dst_dict = pa.array(np.concatenate([anchor_v4, anchor_v6]), pa.string())
    base = np.exp(np.log(40.0) + 0.8 * rng.standard_normal(n * 40)).reshape(n, 40)
    # Source k measures from begin[k] for dur[k] seconds (30 days for the 3 longest, a
    # uniform 30-100 % of that for the others: probes come and go), its measurement i at
    # begin[k] + i * interval[k] (+ jitter): the longer the history, the faster the rate.
    begin_time, span = 1_767_225_600, 30 * 86_400
    dur = span * rng.uniform(0.3, 1.0, n)
    dur[top] = span
    begin = begin_time + rng.random(n) * (span - dur)
    interval = dur / np.maximum(counts, 1)
    out.mkdir(parents=True, exist_ok=True)
    edges = begin_time + np.linspace(0, span, files + 1)
    edges[-1] += 1.0
    for f in range(files):
        # Each source's measurements whose time falls in this file's stretch.
        lo = np.clip(np.ceil((edges[f] - begin) / interval), 0, counts).astype(np.int64)
        hi = np.clip(np.ceil((edges[f + 1] - begin) / interval), 0, counts).astype(np.int64)
        k = hi - lo
        source = np.repeat(np.arange(n), k)
        nth = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k) + np.repeat(lo, k)
        part_rng = np.random.default_rng([seed, f])
        m = len(source)
        jitter = part_rng.random(m) * np.minimum(interval[source], 40.0)
        event_time = (begin[source] + nth * interval[source] + jitter).astype(np.int64)
        order = np.argsort(event_time, kind="stable")
        source, nth, event_time = source[order], nth[order], event_time[order]
        path = nth % 40
        anchor = (source * 7919 + path * 104729) % anchors
        rtt = base[source, path] * np.exp(0.2 * part_rng.standard_normal(m))
        rtt[part_rng.random(m) < 0.03] = -1.0
        six = v6[source]
        table = pa.table({
            "src_addr": pa.DictionaryArray.from_arrays(pa.array(source.astype(np.int32)), src_dict)
            .cast(pa.string()),
            "dst_addr": pa.DictionaryArray.from_arrays(
                pa.array(np.where(six, anchor + anchors, anchor).astype(np.int32)), dst_dict)
            .cast(pa.string()),
            "ip_version": pa.array(np.where(six, 6, 4).astype(np.int32)),
            "rtt": pa.array(rtt),
            "event_time": pa.array(event_time.astype(np.int64)),
        })
        pq.write_table(table, out / f"part-{f:05d}.parquet", row_group_size=131_072, compression="zstd")
        del table, source, nth, event_time, order, path, anchor, rtt, six, jitter
    longest = int(counts.max())
    print(f"{'even' if even else 'atlas'} shape: {n} sources; longest history {longest} rows, median {int(np.median(counts))}; "
          f"{int((counts >= 400_000).sum())} sources of 400k+ rows; time span {span / 86400:.0f} days",
          flush=True)


def generate_export(rows: int, out: Path, seed: int = 46, files: int = 8, sources: int | None = None) -> None:
    """`rows` measurements shaped as a warehouse export of RIPE Atlas (BigQuery's `EXPORT
    DATA`, a Spark job's output) into `files` zstd Parquet files under `out`, one file at
    a time:

    * sources: `sources`, or rows / 600 between 10 000 and 100 000 (33 333 at 20M rows),
      58 % IPv4 and 42 % IPv6, histories Zipf-skewed as the demo's (exponent 0.85: the
      largest ~3 %);
    * every file holds every source, its rows in random order (an export is partitioned
      by the warehouse's workers, not by source or time): each file draws its rows'
      sources from the same weights, and each row a time uniform over the source's
      stretch of the 30 days;
    * columns: `src_addr`, `dst_addr` (Utf8), `ip_version` (Int32), `rtt` (Float32 ms,
      -1.0 for a failed ping), `event_time` (`timestamp[us, UTC]`), and an extra column
      the job does not read, `prb_id` (Int32), as an export of the whole table has;
    * destinations and RTTs as `generate_atlas`'s (40 anchors of the source's family among
      3 000, log-normal paths around 40 ms with 20 % jitter, 3 % failed).
    """
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    n = sources or int(min(100_000, max(10_000, rows // 600)))
    weights = rng.permutation(np.arange(1, n + 1, dtype=np.float64) ** -0.85)
    weights /= weights.sum()
    v6 = rng.random(n) >= 0.58
    octets = rng.integers(1, 223, (n, 4))
    src = np.array([
        f"2a00:{o[0]:x}{o[1]:02x}:{o[2]:x}::{i:x}" if six else f"{o[0]}.{o[1]}.{o[2]}.{o[3]}"
        for i, (o, six) in enumerate(zip(octets, v6))
    ], dtype=object)
    anchors = 3_000
    a_octets = rng.integers(1, 223, (anchors, 3))
    anchor_v4 = np.array([f"193.{o[0]}.{o[1]}.{o[2] % 250 + 1}" for o in a_octets], dtype=object)
    anchor_v6 = np.array([f"2001:67c:{o[0]:x}:{o[1]:x}::{o[2]:x}" for o in a_octets], dtype=object)
    src_dict = pa.array(src, pa.string())
    dst_dict = pa.array(np.concatenate([anchor_v4, anchor_v6]), pa.string())
    probe_ids = rng.permutation(n).astype(np.int32) + 1_000
    base = np.exp(np.log(40.0) + 0.8 * rng.standard_normal(n * 40)).reshape(n, 40)
    begin_us, span_us = 1_767_225_600 * 1_000_000, 30 * 86_400 * 1_000_000
    dur = (span_us * rng.uniform(0.3, 1.0, n)).astype(np.int64)
    begin = begin_us + (rng.random(n) * (span_us - dur)).astype(np.int64)
    out.mkdir(parents=True, exist_ok=True)
    per_file = np.full(files, rows // files)
    per_file[: rows % files] += 1
    for f in range(files):
        part_rng = np.random.default_rng([seed, f])
        source = part_rng.choice(n, size=int(per_file[f]), p=weights).astype(np.int64)
        m = len(source)
        event_time = begin[source] + (part_rng.random(m) * dur[source]).astype(np.int64)
        path = part_rng.integers(0, 40, m)
        anchor = (source * 7919 + path * 104729) % anchors
        rtt = (base[source, path] * np.exp(0.2 * part_rng.standard_normal(m))).astype(np.float32)
        rtt[part_rng.random(m) < 0.03] = -1.0
        six = v6[source]
        table = pa.table({
            "prb_id": pa.array(probe_ids[source]),
            "src_addr": pa.DictionaryArray.from_arrays(pa.array(source.astype(np.int32)), src_dict)
            .cast(pa.string()),
            "dst_addr": pa.DictionaryArray.from_arrays(
                pa.array(np.where(six, anchor + anchors, anchor).astype(np.int32)), dst_dict)
            .cast(pa.string()),
            "ip_version": pa.array(np.where(six, 6, 4).astype(np.int32)),
            "rtt": pa.array(rtt, pa.float32()),
            "event_time": pa.array(event_time, pa.timestamp("us", tz="UTC")),
        })
        pq.write_table(table, out / f"part-{f:05d}.parquet", row_group_size=131_072, compression="zstd")
        del table, source, event_time, path, anchor, rtt, six
    counts = np.floor(weights * rows)
    print(f"export shape: {n} sources in every file, random order; largest history ~{int(counts.max())} rows, "
          f"median ~{int(np.median(counts))}; timestamp[us] times, float32 RTTs, an extra column",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", type=int, nargs="?", default=20_000_000)
    ap.add_argument("--runs", type=int, default=3, help="runs of each contender, alternating")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", action="append", default=[], help="leave out contenders whose label has this")
    ap.add_argument("--shape", choices=("demo", "atlas", "even", "export"), default="demo",
                    help="demo: the demo generator's (rows/200 sources, Zipf); atlas: RIPE Atlas's "
                         "(fewer sources with long, heavy-tailed histories: generate_atlas); even: "
                         "Atlas's columns and times, every source the same history (rows/2000 sources); "
                         "export: a warehouse's export (every file every source in random order, "
                         "timestamp[us] times, float32 RTTs, an extra column: generate_export)")
    ap.add_argument("--shards", type=int, default=64, help="probeflow's [output] shards")
    ap.add_argument("--files", type=int, default=8, help="input files (export shape; one generated at a time)")
    ap.add_argument("--sources", type=int, help="distinct sources (export shape; default rows/600, 10k-100k)")
    args = ap.parse_args()

    inp = WORK / (f"input-{args.rows}" if args.shape == "demo" else f"input-{args.shape}-{args.rows}")
    if args.shape == "export" and (args.files != 8 or args.sources):
        inp = inp.with_name(f"{inp.name}-f{args.files}-s{args.sources or 'default'}")
    marker = inp / ".complete"
    if not marker.exists():
        shutil.rmtree(inp, ignore_errors=True)
        print(f"generating {args.rows} rows ({args.shape} shape) into {inp} …", flush=True)
        if args.shape == "demo":
            subprocess.run([str(COORDINATOR), "generate", "--rows", str(args.rows), "--out", str(inp)],
                           check=True)
        elif args.shape == "export":
            generate_export(args.rows, inp, files=args.files, sources=args.sources)
        else:
            generate_atlas(args.rows, inp, even=args.shape == "even")
        marker.touch()
    commands = {k: v for k, v in contenders(inp, args.threads, args.shards).items()
                if not any(s in k for s in args.skip)}
    ours = "probeflow: the whole job (local, 2 GiB each)"
    # probeflow logs each task's stage times at debug level (to stderr, not the terminal).
    debug = {**os.environ, "RUST_LOG": "probeflow=debug"}
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in commands}
    stages: list[dict[str, float]] = []
    walls: list[dict[str, float]] = []
    floors: dict[str, list[tuple[float, float]]] = {"read": [], "write": []}
    files = sorted(str(f) for f in inp.glob("*.parquet"))
    threads = ["--threads", str(args.threads)]
    remove_outputs()
    for r in range(args.runs):
        if ours in commands:
            floors["read"].append(floor(["read", *threads, *files]))
        for label, cmd in commands.items():
            wall, cpu, rss, log = measured(cmd, debug if label == ours else None)
            if label == ours:
                stages.append(stage_seconds(log))
                walls.append(stage_walls(WORK / "probeflow-out"))
                floors["write"].append(floor(["write", *threads, "--scratch", str(WORK / "floor-scratch"),
                                              str(WORK / "probeflow-out")]))
            remove_outputs()
            runs[label].append((wall, cpu, rss))
            print(f"  run {r + 1}: {label}: {wall:.1f} s wall, {cpu:.1f} CPU s, {rss:.0f} MB", flush=True)

    def median(label: str, i: int) -> float:
        return statistics.median(x[i] for x in runs[label])

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
        names = sorted({name for run in stages for name in run})
        print("probeflow's task time by stage, summed over its tasks (median of runs; a task's "
              "time includes its waits): " + ", ".join(
                  f"{name} {statistics.median(run.get(name, 0.0) for run in stages):.2f} s" for name in names))
        print_floor(floors, walls, median(ours, 0), median(ours, 1), args.rows)


def print_floor(floors: dict[str, list[tuple[float, float]]], walls: list[dict[str, float]],
                job_wall: float, job_cpu: float, rows: int) -> None:
    """The job against its floor (medians of the runs): each stage's wall time as a
    multiple of its floor's (map: read, validate, partition, shuffle write, against the
    read floor; reduce: fetch, sort, encode, compress, write, against the write floor),
    the whole job's, and CPU per row."""
    def med(stage: str, i: int) -> float:
        return statistics.median(x[i] for x in floors[stage])

    read_wall, read_cpu, write_wall, write_cpu = med("read", 0), med("read", 1), med("write", 0), med("write", 1)
    floor_wall, floor_cpu = read_wall + write_wall, read_cpu + write_cpu
    print(f"\nthe floor (the job's own read of its 5 columns; its shards re-written from their rows): "
          f"read {read_wall:.2f} s wall ({read_cpu:.1f} CPU s), write {write_wall:.2f} s ({write_cpu:.1f} CPU s)")
    print(f"{'':<10} {'job wall s':>10} {'floor wall s':>13} {'× floor':>8}")
    for stage, floor_s in (("map", read_wall), ("reduce", write_wall)):
        job_s = statistics.median(w.get(stage, 0.0) for w in walls)
        print(f"{stage:<10} {job_s:>10.2f} {floor_s:>13.2f} {job_s / floor_s:>7.2f}x")
    print(f"{'whole job':<10} {job_wall:>10.2f} {floor_wall:>13.2f} {job_wall / floor_wall:>7.2f}x")
    print(f"CPU per row: the job {job_cpu / rows * 1e9:.0f} ns, the floor {floor_cpu / rows * 1e9:.0f} ns "
          f"({job_cpu / floor_cpu:.2f}x)")


if __name__ == "__main__":
    main()
