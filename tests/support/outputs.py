"""Finished probe-rows outputs for the reader tests, the reader as a script, and a process tree's peak memory."""

from __future__ import annotations

from pathlib import Path
import subprocess
import sys

from support.probe_rows import SHARDS, write_job
from support.run import COORDINATOR, run


def make_output(workdir: Path, name: str, shards: int = SHARDS) -> Path:
    inp = workdir / "input"
    if not inp.exists():
        run(["generate", "--rows", "20000", "--out", str(inp), "--seed", "9"])
    out = workdir / name
    spec = write_job(workdir / f"{name}.toml", {
        "input": {"url": f"{inp}/*.parquet"},
        "output": {"url": out, "shards": shards, "array_record_options": "group_size:1,uncompressed"},
        "split": {"test_fraction": 0.3},
        "run": {"workers": 1, "memory_per_worker": "128MiB", "scratch": workdir / "scratch"},
    })
    run(["run", str(spec)])
    return out


READER = r"""
import hashlib, json, sys
import probeflow
args = json.loads(sys.argv[1])
ds = probeflow.Dataset(args["path"], args.get("split", "train"), seq_len=256, batch_size=4,
                       seed=5, shard_index=args.get("rank", 0), shard_count=args.get("ranks", 1),
                       block_rows=args.get("block_rows", 64), num_epochs=1,
                       **args.get("options", {}))
if "state" in args:
    ds.set_state(args["state"])
h = hashlib.blake2b(digest_size=16)
batches = 0
for batch in ds:
    for key in sorted(batch):
        h.update(key.encode())
        h.update(batch[key].tobytes())
    batches += 1
    if batches == args.get("stop_after"):
        break
print(json.dumps({"digest": h.hexdigest(), "batches": batches, "files": ds.files if ds.weights is None else None,
                  "stats": probeflow.cache_stats(), "state": ds.get_state()}))
"""


MEASURE = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(p.stderr[-3000:])
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def coordinator_run_measured(*args: str) -> tuple[int, int, str]:
    """Runs the coordinator with `args`: its exit code, its peak resident memory in MiB,
    measured in a fresh process (RUSAGE_CHILDREN is the peak of its own children only),
    and the end of its stderr."""
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(COORDINATOR), *args],
                          capture_output=True, text=True)
    code, peak_mib = map(int, proc.stdout.split())
    return code, peak_mib, proc.stderr


def coordinator_peak_mib(*args: str) -> int:
    """Runs the coordinator with `args` to success; its peak resident memory in MiB."""
    code, peak_mib, stderr = coordinator_run_measured(*args)
    assert code == 0, stderr
    return peak_mib
