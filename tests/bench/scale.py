"""The engine at the source database's scale, by simulation (a benchmark, not a test).

    .venv/bin/python tests/bench/scale.py [--bin DIR] [--maps 1000,5000,20000]
                                          [--partitions 1024] [--workers 4]

Runs the probe-rows job in cluster mode with `--maps` map tasks (a Parquet input of that
many rows, one row per map task) and `--partitions` partitions (so as many reduce
tasks), the real coordinator, scheduler, journal and transport, and worker processes
that do no work: `PROBEFLOW_FAULT=simulate-tasks` (test builds only) makes each report
the result a task of that shape gives. Prints, per size: wall time, tasks per second
through the coordinator, the coordinator's peak RSS, and the largest message field any
process encoded. Then, for the largest size, kills the coordinator once every map is
journaled and restarts it: the time to replay the journal and to finish.

With `--scrape N` it then measures what watching costs, at the largest size: N pairs of
runs, interleaved (one without a scraper, one with `/metrics`, `/api/v1/status` and `/`
fetched every second from the coordinator's `--http` listener), their tasks per second
and the ratio of the medians; then one run with `--scrape-workers` (64) simulating
workers, scraped every second: the largest `/metrics` and its fetch time (p50, max).

DIR must hold binaries built with the fault-injection feature, e.g.

    CARGO_TARGET_DIR=target/sim cargo build --release --bins \\
        --features probeflow-jobs/fault-injection
    .venv/bin/python tests/bench/scale.py --bin target/sim/release
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
COOKIE = "scale-0123456789abcdef0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PeakRss:
    """Polls a process's peak resident set (VmHWM) until it exits."""

    def __init__(self, pid: int):
        self.pid, self.peak_kib = pid, 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        while True:
            try:
                text = status.read_text()
            except OSError:
                return
            m = re.search(r"VmHWM:\s+(\d+) kB", text)
            if m:
                self.peak_kib = max(self.peak_kib, int(m.group(1)))
            time.sleep(0.05)


def job(work: Path, maps: int, partitions: int, port: int) -> Path:
    table = pa.table({"x": pa.array(range(maps), pa.int64())})
    (work / "input").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, work / "input" / "rows.parquet", row_group_size=maps)
    spec = work / "job.toml"
    spec.write_text(f"""
[input]
url = "{work / 'input'}/*.parquet"
rows_per_map_task = 1
[output]
url = "{work / 'out'}"
shards = {partitions}
[run]
mode = "cluster"
listen = "127.0.0.1:{port}"
workers = 1
memory_per_worker = "256MiB"
scratch = "{work / 'scratch'}"
lease_seconds = 60
""")
    return spec


def env() -> dict:
    return dict(os.environ, PROBEFLOW_COOKIE=COOKIE, NO_COLOR="1", RUST_LOG="info,ractor_cluster=warn")


def start_coordinator(bin_dir: Path, spec: Path, log: Path, extra: list[str] = ()) -> subprocess.Popen:
    out = open(log, "w")
    return subprocess.Popen([str(bin_dir / "coordinator"), "run", str(spec), *extra], env=env(),
                            stdout=out, stderr=out)


def wait_listening(port: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit("the coordinator never listened")


def start_workers(bin_dir: Path, work: Path, port: int, n: int, tag: str) -> list[subprocess.Popen]:
    procs = []
    for i in range(n):
        log = open(work / f"worker-{tag}-{i}.log", "w")
        procs.append(subprocess.Popen(
            [str(bin_dir / "worker"), "--join", f"127.0.0.1:{port}", "--name", f"w{i}", "--memory", "256MiB",
             "--scratch", str(work / "worker-scratch"), "--give-up-after", "120"],
            env=dict(env(), PROBEFLOW_FAULT="simulate-tasks"), stdout=log, stderr=log))
    return procs


def largest_message(work: Path) -> int:
    sizes = [int(m) for log in work.glob("*.log")
             for m in re.findall(r"largest message field sent bytes=(\d+)", log.read_text())]
    return max(sizes, default=0)


def fresh_job(base: Path, name: str, maps: int, partitions: int) -> tuple[Path, int, Path]:
    """An empty work directory `base/name`, a free port and the job file: (work, port, spec)."""
    work = base / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    port = free_port()
    return work, port, job(work, maps, partitions, port)


def one_size(bin_dir: Path, base: Path, maps: int, partitions: int, workers: int) -> dict:
    work, port, spec = fresh_job(base, f"maps-{maps}", maps, partitions)
    started = time.time()
    coordinator = start_coordinator(bin_dir, spec, work / "coordinator.log")
    rss = PeakRss(coordinator.pid)
    wait_listening(port)
    procs = start_workers(bin_dir, work, port, workers, "run")
    code = coordinator.wait()
    wall = time.time() - started
    for p in procs:
        p.wait(timeout=60)
    if code != 0:
        raise SystemExit(f"coordinator failed:\n{(work / 'coordinator.log').read_text()[-3000:]}")
    tasks = maps + partitions
    journal = sum(f.stat().st_size for f in (work / "out" / "_job" / "journal").iterdir())
    return dict(maps=maps, tasks=tasks, wall=wall, rate=tasks / wall, rss_mib=rss.peak_kib / 1024,
                message=largest_message(work), journal_mib=journal / 2**20)


def resume(bin_dir: Path, base: Path, maps: int, partitions: int, workers: int) -> dict:
    work, port, spec = fresh_job(base, f"resume-{maps}", maps, partitions)
    coordinator = start_coordinator(bin_dir, spec, work / "coordinator-0.log")
    wait_listening(port)
    procs = start_workers(bin_dir, work, port, workers, "resume")
    journal = work / "out" / "_job" / "journal"
    while len(list(journal.glob("map-*.json"))) < maps:
        if coordinator.poll() is not None:
            raise SystemExit("the coordinator ended before the maps were journaled")
        time.sleep(0.2)
    # Everything killed once the maps are journaled: the restart replays them.
    for p in [coordinator, *procs]:
        p.send_signal(signal.SIGKILL)
        p.wait()
    entries = len(list(journal.glob("*.json"))) - 1
    restarted = time.time()
    coordinator = start_coordinator(bin_dir, spec, work / "coordinator-1.log")
    wait_listening(port)
    procs = start_workers(bin_dir, work, port, workers, "resumed")
    code = coordinator.wait()
    total = time.time() - restarted
    for p in procs:
        p.wait(timeout=120)
    log = (work / "coordinator-1.log").read_text()
    if code != 0:
        raise SystemExit(f"the restarted coordinator failed:\n{log[-3000:]}")
    replay = re.search(r"journal replayed results=(\d+) seconds=([0-9.]+)", log)
    return dict(entries=entries, replay_s=float(replay.group(2)) if replay else float("nan"), total_s=total)


class Scraper:
    """Fetches `paths` from `base` every second until stopped: each /metrics's size and
    fetch time."""

    def __init__(self, base: str, paths: list[str]):
        self.base, self.paths = base, paths
        self.metrics: list[tuple[int, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        import urllib.request  # noqa: PLC0415
        while not self.stop.is_set():
            began = time.perf_counter()
            for path in self.paths:
                try:
                    t0 = time.perf_counter()
                    with urllib.request.urlopen(self.base + path, timeout=5) as r:
                        body = r.read()
                    if path == "/metrics":
                        self.metrics.append((len(body), time.perf_counter() - t0))
                except OSError:
                    pass  # not listening yet, or gone
            self.stop.wait(max(0.0, 1.0 - (time.perf_counter() - began)))

    def finish(self) -> list[tuple[int, float]]:
        self.stop.set()
        self.thread.join()
        return self.metrics


def watched_run(bin_dir: Path, base: Path, name: str, maps: int, partitions: int, workers: int,
                scrape: bool) -> tuple[float, list[tuple[int, float]]]:
    """One run, scraped every second or not: its tasks per second and the scrapes."""
    work, port, spec = fresh_job(base, name, maps, partitions)
    http = free_port()
    started = time.time()
    coordinator = start_coordinator(bin_dir, spec, work / "coordinator.log",
                                    ["--http", str(http), "--linger", "0"])
    scraper = Scraper(f"http://127.0.0.1:{http}", ["/metrics", "/api/v1/status", "/"]) if scrape else None
    wait_listening(port)
    procs = start_workers(bin_dir, work, port, workers, name)
    code = coordinator.wait()
    wall = time.time() - started
    scrapes = scraper.finish() if scraper else []
    for p in procs:
        p.wait(timeout=120)
    if code != 0:
        raise SystemExit(f"coordinator failed:\n{(work / 'coordinator.log').read_text()[-3000:]}")
    return (maps + partitions) / wall, scrapes


def watching_cost(bin_dir: Path, base: Path, maps: int, partitions: int, workers: int, pairs: int,
                  many_workers: int) -> None:
    import statistics  # noqa: PLC0415
    rates: dict[bool, list[float]] = {False: [], True: []}
    fetches: list[tuple[int, float]] = []
    for i in range(pairs):
        for scrape in (False, True):
            rate, scrapes = watched_run(bin_dir, base, f"watch-{i}-{int(scrape)}", maps, partitions, workers,
                                        scrape)
            rates[scrape].append(rate)
            fetches += scrapes
            print(f"  pair {i}: {'scraped' if scrape else 'unscraped':>9} {rate:>8.0f} tasks/s", flush=True)
    plain, watched = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"{maps + partitions} tasks, {workers} workers, median of {pairs}: {plain:.0f} tasks/s unscraped, "
          f"{watched:.0f} scraped every second: ratio {watched / plain:.3f}")
    if fetches:
        times = sorted(t for _, t in fetches)
        print(f"{workers} workers: {len(fetches)} scrapes of /metrics, largest "
              f"{max(n for n, _ in fetches) / 1024:.1f} KiB, fetch p50 {times[len(times) // 2] * 1e3:.1f} ms, "
              f"max {times[-1] * 1e3:.1f} ms")
    _, scrapes = watched_run(bin_dir, base, "watch-many", maps, partitions, many_workers, True)
    if not scrapes:
        print(f"{many_workers} workers: the job ended before its first scrape")
        return
    sizes = [n for n, _ in scrapes]
    times = sorted(t for _, t in scrapes)
    print(f"{many_workers} workers: {len(scrapes)} scrapes of /metrics, largest {max(sizes) / 1024:.1f} KiB, "
          f"fetch p50 {times[len(times) // 2] * 1e3:.1f} ms, max {times[-1] * 1e3:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "debug")
    ap.add_argument("--maps", default="1000,5000,20000")
    ap.add_argument("--partitions", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--work", type=Path, default=ROOT / "target" / "bench-scale")
    ap.add_argument("--scrape", type=int, default=0, metavar="N",
                    help="then N interleaved pairs of runs without and with a scraper (see above)")
    ap.add_argument("--scrape-workers", type=int, default=64)
    ap.add_argument("--no-sizes", action="store_true", help="skip the sizes and the resume: only --scrape")
    args = ap.parse_args()
    sizes = [int(m) for m in args.maps.split(",")]
    print(f"binaries: {args.bin}; {args.partitions} partitions; {args.workers} simulating workers")
    if args.no_sizes:
        watching_cost(args.bin, args.work, max(sizes), args.partitions, args.workers, args.scrape,
                      args.scrape_workers)
        return
    print(f"{'maps':>7} {'tasks':>7} {'wall s':>8} {'tasks/s':>8} {'coord. peak RSS':>16} "
          f"{'largest msg':>12} {'journal':>9}")
    for maps in sizes:
        r = one_size(args.bin, args.work, maps, args.partitions, args.workers)
        print(f"{r['maps']:>7} {r['tasks']:>7} {r['wall']:>8.1f} {r['rate']:>8.0f} "
              f"{r['rss_mib']:>12.1f} MiB {r['message']:>8} B {r['journal_mib']:>5.1f} MiB", flush=True)
    r = resume(args.bin, args.work, max(sizes), args.partitions, args.workers)
    print(f"resume after SIGKILL with {r['entries']} journal entries: replayed in {r['replay_s']:.2f} s, "
          f"the rest of the job done {r['total_s']:.1f} s after the restart")
    if args.scrape:
        watching_cost(args.bin, args.work, max(sizes), args.partitions, args.workers, args.scrape,
                      args.scrape_workers)


if __name__ == "__main__":
    main()
