"""Benchmark (not a test): reading an output from an object store through a warm shard
cache, against the same output on local disk.

Starts moto's S3 server on loopback, uploads OUTPUT (default: out/demo, made by the
README's run command), reads it once through a fresh cache (cold: every shard
downloaded), then alternates local and remote (warm cache) reads of the same batches on
one core, and prints non-padding tokens/s per round, the medians and their ratio.

    VIRTUAL_ENV=.venv .venv/bin/maturin develop --release -m python/Cargo.toml
    .venv/bin/python tests/bench/remote_cache.py [OUTPUT] [--batches N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "probeflow-bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tokens_per_second(path: str, batches: int, cache: str) -> float:
    import probeflow  # noqa: PLC0415  (after the environment is set)

    ds = probeflow.Dataset(path, seq_len=1024, batch_size=16, seed=1, shard_index=0, shard_count=1,
                           num_threads=1, prefetch=4, cache_dir=cache)
    next(ds)  # open, first block built: not part of the rate
    start = time.perf_counter()
    tokens = 0
    for _ in range(batches):
        b = next(ds)
        tokens += int((b["inputs_segmentation"] != 0).sum())
    rate = tokens / (time.perf_counter() - start)
    ds.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("output", nargs="?", default=str(ROOT / "out" / "demo"))
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    moto = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    port = free_port()
    server = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ALLOW_HTTP="true",
                      AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
                      AWS_REGION="us-east-1")
    import boto3  # noqa: PLC0415

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    for _ in range(150):
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:  # noqa: BLE001  (not up yet)
            time.sleep(0.2)
    out = Path(args.output)
    for f in sorted(out.rglob("*")):
        if f.is_file() and "_job" not in f.parts:
            client.upload_file(str(f), BUCKET, f"out/{f.relative_to(out)}")
    url = f"s3://{BUCKET}/out"
    cache = tempfile.mkdtemp(prefix="probeflow-cache-")
    try:
        import probeflow  # noqa: PLC0415

        start = time.perf_counter()
        cold = tokens_per_second(url, args.batches, cache)
        print(f"cold cache: {time.perf_counter() - start:.2f} s for the first {args.batches + 1} batches "
              f"({probeflow.cache_stats()['downloaded_bytes'] / 1e6:.1f} MB downloaded); "
              f"{cold / 1e6:.1f} M tokens/s after the first batch")
        local, remote = [], []
        for _ in range(args.rounds):
            local.append(tokens_per_second(str(out), args.batches, cache))
            remote.append(tokens_per_second(url, args.batches, cache))
        print("round  local M tok/s  remote (warm) M tok/s")
        for i, (a, b) in enumerate(zip(local, remote)):
            print(f"{i:5}  {a / 1e6:13.1f}  {b / 1e6:21.1f}")
        lm, rm = statistics.median(local), statistics.median(remote)
        print(f"median {lm / 1e6:13.1f}  {rm / 1e6:21.1f}   remote/local = {rm / lm:.3f}")
        print(f"cache counters: {probeflow.cache_stats()}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
