"""MaxText steps/s on CPU: probeflow's reader vs MaxText's synthetic data, same shapes.

    .venv312/bin/python bench/maxtext_steps.py [--steps 40] [--rows 200000]

(.venv312 is made by tests/run.) Makes a data set with the preprocessing job
(target/release/coordinator, built if missing), then trains the tiny model of the
integration test (2 layers, width 64, vocabulary 267) twice, one run after the other:
``dataset_type=network`` through ``probeflow.maxtext_train`` and MaxText's
``dataset_type=synthetic``. Prints the median seconds per step (compilation steps left
out) and the ratio: the reader must not be what limits training.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "hardware=cpu", "skip_jax_distributed_system=true", "base_emb_dim=64", "base_num_query_heads=2",
    "base_num_kv_heads=2", "head_dim=32", "base_mlp_dim=128", "base_num_decoder_layers=2",
    "attention=dot_product", "enable_checkpointing=false", "eval_interval=-1", "log_period=1",
]


def step_seconds(output: str) -> list[float]:
    return [float(m.group(1)) for m in re.finditer(r"completed step: \d+, seconds: ([\d.]+)", output)]


def train(base: Path, name: str, args: list[str], steps: int, shape: list[str]) -> list[float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    cmd = [sys.executable, "-m", "probeflow.maxtext_train", "network_small.yml", *args,
           f"run_name={name}", f"base_output_directory={base}", f"steps={steps}", *TINY, *shape]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stderr[-4000:]}")
    return step_seconds(proc.stdout + proc.stderr)


def reader_seconds_per_batch(out: Path, seq_len: int, batch: int, n: int = 2000) -> float:
    """The same batches without MaxText: seconds per batch from probeflow.Dataset."""
    import time  # noqa: PLC0415

    import probeflow  # noqa: PLC0415

    with probeflow.Dataset(out, seq_len=seq_len, batch_size=batch, shard_index=0, shard_count=1) as ds:
        next(ds)
        start = time.perf_counter()
        for _ in range(n):
            next(ds)
        return (time.perf_counter() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--per-device-batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    coordinator = ROOT / "target" / "release" / "coordinator"
    if not coordinator.exists():
        subprocess.run(["cargo", "build", "--release", "--bin", "coordinator"], cwd=ROOT, check=True)
    shape = [f"max_target_length={a.seq_len}", f"per_device_batch_size={a.per_device_batch}"]
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        job = base / "job.toml"
        job.write_text(
            f'[input]\nsynthetic = {{ rows = {a.rows}, seed = 1 }}\n'
            f'[output]\nurl = "{base / "out"}"\nshards = 4\n'
            f'[split]\ntest_fraction = 0.1\nseed = 17\n'
            f'[run]\nmode = "local"\nworkers = 2\nmemory_per_worker = "512MiB"\nscratch = "{base / "scratch"}"\n'
        )
        subprocess.run([str(coordinator), "run", str(job)], check=True, capture_output=True)
        configs = {
            "probeflow (dataset_type=network)": ["dataset_type=network", f"network_train_files={base / 'out'}"],
            "MaxText synthetic data": ["dataset_type=synthetic"],
        }
        steady: dict[str, list[float]] = {name: [] for name in configs}
        # Alternate the runs so that the machine's noise hits both alike.
        for r in range(a.rounds):
            for i, (name, args) in enumerate(configs.items()):
                steady[name] += train(base, f"run{r}-{i}", args, a.steps, shape)[2:]  # first steps compile
        reader_ms = reader_seconds_per_batch(base / "out", a.seq_len, a.per_device_batch) * 1000
    print(f"tiny model, seq {a.seq_len}, per-device batch {a.per_device_batch}, "
          f"{a.rounds} × {a.steps} steps each, CPU ({os.cpu_count()} cores)")
    medians = {}
    for name, secs in steady.items():
        medians[name] = statistics.median(secs)
        print(f"{name:34} median {medians[name] * 1000:8.1f} ms/step  {1 / medians[name]:7.2f} steps/s")
    net, syn = medians.values()
    print(f"steps/s probeflow / synthetic: {syn / net:.2f}")
    print(f"the reader alone: {reader_ms:.3f} ms per batch ({reader_ms / (net * 1000):.2%} of a step)")


if __name__ == "__main__":
    main()
