"""Cluster-mode overhead benchmark (not a test): the 20M-row job with 1, 2 and 4 worker
processes on this machine, and 2 with mutual TLS, next to local mode, one after the other.

    .venv/bin/python tests/bench/cluster.py [INPUT_DIR]

INPUT_DIR defaults to target/bench-preprocess/input (made by tests/bench/preprocess).
Prints wall time per run and how the workers' time splits into task work (from each
worker's "task ended" log lines) and the rest (joining, polling, waiting for the map
phase to finish, the coordinator's bookkeeping): the coordination overhead.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target" / "release"
COOKIE = "bench-0123456789abcdef0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(work: Path, name: str, inputs: Path, mode: str, port: int, workers: int,
        certs: Path | None = None) -> Path:
    spec = work / f"{name}.toml"
    tls = "" if certs is None else (
        f'[run.tls]\ncert = "{certs / "coordinator.pem"}"\nkey = "{certs / "coordinator.key"}"\n'
        f'ca = "{certs / "ca.pem"}"\n'
    )
    spec.write_text(
        f'[input]\nurl = "{inputs}/*.parquet"\n[output]\nurl = "{work / name}"\nshards = 64\n'
        f'[split]\ntest_fraction = 0.1\nseed = 17\n[run]\nmode = "{mode}"\nworkers = {workers}\n'
        f'listen = "127.0.0.1:{port}"\nmemory_per_worker = "2GiB"\nscratch = "{work / "scratch"}"\n{tls}'
    )
    return spec


def main() -> None:
    inputs = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target" / "bench-preprocess" / "input")
    if not list(inputs.glob("*.parquet")):
        sys.exit(f"no Parquet input in {inputs}: run tests/bench/preprocess first")
    subprocess.run(["cargo", "build", "--release", "--bins"], cwd=ROOT, check=True)
    work = ROOT / "target" / "bench-cluster"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = dict(os.environ, PROBEFLOW_COOKIE=COOKIE, NO_COLOR="1",
               RUST_LOG="info,worker=debug,probeflow=debug,ractor_cluster=warn")
    rows = []
    start = time.perf_counter()
    subprocess.run([str(BIN / "coordinator"), "run", str(job(work, "local-2", inputs, "local", 0, 2))],
                   env=env, check=True, capture_output=True)
    rows.append(("local mode, 2 worker actors", time.perf_counter() - start, None))
    certs = work / "certs"
    subprocess.run([str(ROOT / "infra" / "make-certs"), str(certs), "--host", "127.0.0.1", "--workers", "4"],
                   check=True, capture_output=True)
    for n, tls in ((1, False), (2, False), (4, False), (2, True)):
        port = free_port()
        name = f"cluster-{n}{'-tls' if tls else ''}"
        spec = job(work, name, inputs, "cluster", port, n, certs if tls else None)
        logs = [work / f"{name}-worker-{i}.log" for i in range(n)]
        start = time.perf_counter()
        coordinator = subprocess.Popen([str(BIN / "coordinator"), "run", str(spec)], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        workers = [
            subprocess.Popen([str(BIN / "worker"), "--join", f"127.0.0.1:{port}", "--name", f"w{i}",
                              "--memory", "2GiB", "--scratch", str(work / "scratch"),
                              *(["--tls-cert", str(certs / f"worker-{i + 1}.pem"),
                                 "--tls-key", str(certs / f"worker-{i + 1}.key"),
                                 "--tls-ca", str(certs / "ca.pem")] if tls else [])],
                             env=env, stdout=subprocess.DEVNULL, stderr=open(logs[i], "w"))
            for i in range(n)
        ]
        out, _ = coordinator.communicate()
        for w in workers:
            w.wait()
        wall = time.perf_counter() - start
        if coordinator.returncode != 0:
            sys.exit(f"cluster run with {n} workers failed:\n{out.decode()[-2000:]}")
        task_ms = sum(int(m) for log in logs for m in re.findall(r"task ended.*?ms=(\d+)", log.read_text()))
        label = f"cluster mode, {n} worker process{'es' if n > 1 else ''}{', TLS' if tls else ''}"
        rows.append((label, wall, task_ms / 1000 / (wall * n)))
    print(f"{inputs}: {sum(1 for _ in inputs.glob('*.parquet'))} files, 64 shards, 2 GiB sort memory per worker")
    print(f"{'':41} {'wall s':>8} {'task work':>10} {'coordination + idle':>20}")
    for name, wall, busy in rows:
        extra = "" if busy is None else f"{busy:10.0%} {1 - busy:20.0%}"
        print(f"{name:41} {wall:8.1f} {extra}")


if __name__ == "__main__":
    main()
