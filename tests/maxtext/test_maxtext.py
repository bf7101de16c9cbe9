"""MaxText integration on CPU: real maxtext 0.2.5 trains a tiny model from probeflow shards.

The data set is made by the preprocessing job (``coordinator generate`` + ``coordinator
run``); what MaxText received is read back from ``network_batch_log`` and checked
against the job's Parquet input with pyarrow. Runs in the Python 3.12 virtualenv that
``tests/run`` sets up (``tests/requirements-maxtext.txt``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
import types
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import probeflow
from probeflow import maxtext_input, tokenizer
from probeflow.maxtext_input import NetworkConfigError, NetworkOptions
from probeflow.maxtext_train import split_arguments
from support.run import COORDINATOR, ROOT, free_port


# The tiny model of the issue: 2 layers, width 64, vocabulary 267, sequences of 128.
TINY = [
    "hardware=cpu",
    "skip_jax_distributed_system=true",
    "max_target_length=128",
    "per_device_batch_size=4",
    "base_emb_dim=64",
    "base_num_query_heads=2",
    "base_num_kv_heads=2",
    "head_dim=32",
    "base_mlp_dim=128",
    "base_num_decoder_layers=2",
    "attention=dot_product",
    "checkpoint_period=2",
    "log_period=1",
]
STEPS = 8
STOP = 4


def run(args, **kw):
    proc = subprocess.run(args, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise AssertionError(f"{args[:4]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A job output (4 shards, train, val and test) and the truth from the job's input:
    {src: {"timed": {(time, dst, code)}, "untimed": {(dst, code)}}}."""
    d = tmp_path_factory.mktemp("network")
    run([str(COORDINATOR), "generate", "--rows", "60000", "--out", str(d / "input"), "--seed", "4"])
    job = d / "job.toml"
    job.write_text(
        f"""
[input]
url = "{d / 'input'}"
[output]
url = "{d / 'out'}"
shards = 4
[split]
test_fraction = 0.2
val_fraction = 0.2
seed = 17
[run]
mode = "local"
workers = 2
memory_per_worker = "256MiB"
scratch = "{d / 'scratch'}"
"""
    )
    run([str(COORDINATOR), "run", str(job)])
    truth: dict[str, dict] = defaultdict(lambda: {"timed": set(), "untimed": set()})
    for f in sorted((d / "input").glob("*.parquet")):
        t = pq.read_table(f).to_pydict()
        for src, dst, rtt, time in zip(t["src_addr"], t["dst_addr"], t["rtt"], t["event_time"]):
            code = probeflow.rtt_encode(rtt)
            rows = truth[probeflow.canonical_addr(src)]
            dst = probeflow.canonical_addr(dst)
            rows["timed"].add((time, dst, code))
            rows["untimed"].add((dst, code))
    return d / "out", dict(truth)


def train(out: Path, base: Path, run_name: str, steps: int, log: Path, extra=(), env=None) -> str:
    """One MaxText training run through probeflow.maxtext_train; returns its output.
    ``extra`` keys come last (a ``network_train_files`` there replaces ``out``)."""
    env = dict(env or os.environ, JAX_PLATFORMS="cpu")
    if any(e.startswith("network_train_files=") for e in extra):
        files = []
    else:
        files = [f"network_train_files={out}"]
    proc = run(
        [
            sys.executable, "-m", "probeflow.maxtext_train", "network_small.yml",
            "dataset_type=network", *files, f"network_batch_log={log}",
            "network_seed=5", f"run_name={run_name}", f"base_output_directory={base}",
            f"steps={steps}", *TINY, *extra,
        ],
        env=env,
        cwd=base,
    )
    return proc.stdout + proc.stderr


def batches(log: Path, stream: str = "train") -> list[dict]:
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [b for b in lines if b["stream"] == stream]


def losses(output: str) -> dict[int, float]:
    return {
        int(m.group(1)): float(m.group(2))
        for m in re.finditer(r"completed step: (\d+), .*? loss: ([-+\w.]+)", output)
    }


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    """An uninterrupted run to STEPS, and one stopped after STOP steps then resumed."""
    out, _ = data
    base = tmp_path_factory.mktemp("maxtext")
    # The uninterrupted run also evaluates (the val split) every 4 steps.
    full = train(out, base, "full", STEPS, base / "full.jsonl", ["eval_interval=4", "eval_steps=2"])
    first = train(out, base, "resumed", STOP, base / "first.jsonl", ["eval_interval=-1"])
    second = train(out, base, "resumed", STEPS, base / "second.jsonl", ["eval_interval=-1"])
    return base, full, first, second


def test_training_reads_probeflow_batches_and_checkpoints_the_stream(data, runs):
    out, truth = data
    base, full, _, _ = runs
    loss = losses(full)
    assert sorted(loss) == list(range(STEPS)), full[-3000:]
    assert all(math.isfinite(x) for x in loss.values())
    log = batches(base / "full.jsonl")
    assert len(log) == STEPS
    measurements = 0
    for b in log:
        inputs = np.array(b["inputs"], dtype=np.int32)
        seg = np.array(b["inputs_segmentation"], dtype=np.int32)
        assert inputs.shape == (4, 128)
        assert (seg != 0).mean() > 0.75, "packed sequences are mostly tokens"
        for i in range(inputs.shape[0]):
            for ctx in tokenizer.segments(inputs[i], seg[i]):
                ms = tokenizer.detokenize(ctx)
                assert ms
                rows = truth[ms[0]["src_addr"]]
                for m in ms:
                    assert m["src_addr"] == ms[0]["src_addr"]
                    if m["time"] is not None:
                        assert (m["time"], m["dst_addr"], m["rtt_code"]) in rows["timed"]
                    else:
                        assert (m["dst_addr"], m["rtt_code"]) in rows["untimed"]
                    measurements += 1
    assert measurements > STEPS * 4 * 3
    # MaxText evaluated after steps 0 and 4, each time the val split from its start:
    # the output has one, so eval reads it, never train or test rows.
    evaluation = batches(base / "full.jsonl", "eval")
    assert [b["position"] for b in evaluation] == [[0, 0, 0], [0, 0, 4]] * 2
    assert evaluation[0]["sha256"] == evaluation[2]["sha256"]
    eval_sources = set().union(*(sources_of({k: np.array(b[k]) for k in ("inputs", "inputs_segmentation")}) for b in evaluation))
    assert eval_sources and {probeflow.split_of(s, 17, 0.2, 0.2) for s in eval_sources} == {"val"}
    evals = re.findall(r"Completed eval after train step (\d+), loss=([\d.]+)", full)
    assert [int(step) for step, _ in evals] == [0, 4] and all(math.isfinite(float(x)) for _, x in evals)
    # Every checkpoint holds the reader's state after the batches of its steps.
    checkpoints = base / "full" / "checkpoints"
    steps = sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit())
    assert steps == [0, 2, 4, 6, STEPS - 1]
    for step in steps[:-1]:
        state = json.loads((checkpoints / str(step) / "iter" / "process_0-of-1.json").read_text())
        assert [state["epoch"], state["block"], state["sequence"]] == log[step + 1]["position"]
        assert state["seed"] == 5 and state["seq_len"] == 128 and state["batch_size"] == 4


def test_resume_continues_the_exact_stream(runs):
    base, _, first, second = runs
    full = [b["sha256"] for b in batches(base / "full.jsonl")]
    before = [b["sha256"] for b in batches(base / "first.jsonl")]
    after = [b["sha256"] for b in batches(base / "second.jsonl")]
    assert before == full[:STOP]
    # The second run restored step STOP - 1 (model and data stream) and trained on.
    assert sorted(losses(second)) == list(range(STOP, STEPS)), second[-3000:]
    assert after == full[STOP:STEPS]


def config(batch: int, seq: int = 128) -> types.SimpleNamespace:
    """The MaxText config fields the factories read."""
    return types.SimpleNamespace(
        global_batch_size_to_load=batch,
        global_batch_size_to_load_eval=batch,
        max_target_length=seq,
        packing=True,
        generate_padding_batch_train=False,
        generate_padding_batch_eval=False,
    )


def sources_of(batch: dict) -> set[str]:
    return set(probes_of(batch))


def test_two_hosts_see_disjoint_rows(data, monkeypatch):
    import jax
    from jax.sharding import Mesh

    out, _ = data
    mesh = Mesh(np.array(jax.devices()), ("data",))
    options = NetworkOptions(train_files=str(out), seed=2, prefetch=2)
    seen_eval, seen_train = [], []
    for host in (0, 1):
        monkeypatch.setattr(jax, "process_index", lambda host=host: host)
        evaluation = maxtext_input.make_eval_iterator(options, config(8), mesh, [0, 1])
        local = evaluation.local_iterator
        assert isinstance(local, maxtext_input.NetworkBatchIterator)
        assert local._dataset.options["shard_index"] == host and local._dataset.options["batch_size"] == 4
        seen_eval.append(set().union(*(sources_of(b) for b in local)))
        training = maxtext_input.make_train_iterator(options, config(8), mesh, [0, 1])
        seen_train.append(set().union(*(sources_of(next(training.local_iterator)) for _ in range(3))))
        evaluation.close()
        training.close()
    assert seen_eval[0] and seen_eval[1] and not seen_eval[0] & seen_eval[1]
    assert not seen_train[0] & seen_train[1]
    # Together the hosts cover the val split (eval's, as the output has one): every
    # row (one per source here).
    val_rows = probeflow.RowDataSource(str(out), split="val")
    assert seen_eval[0] | seen_eval[1] == {val_rows[i]["src_addr"] for i in range(len(val_rows))}
    # network_eval_split=test reads the test split instead.
    test_options = dataclasses.replace(options, eval_split="test")
    evaluation = maxtext_input.make_eval_iterator(test_options, config(8), mesh, [0, 1])
    test_rows = probeflow.RowDataSource(str(out), split="test")
    seen_test = set().union(*(sources_of(b) for b in evaluation.local_iterator))
    assert seen_test and seen_test <= {test_rows[i]["src_addr"] for i in range(len(test_rows))}
    evaluation.close()


def test_state_is_bytes_and_restores_after_prefetch(data):
    import jax
    from jax.sharding import Mesh

    out, _ = data
    mesh = Mesh(np.array(jax.devices()), ("data",))
    options = NetworkOptions(train_files=str(out), prefetch=8)
    # (MaxText's wrapper closes its local iterator when it is dropped: keep it.)
    wrapper = maxtext_input.make_train_iterator(options, config(4), mesh, [0])
    it = wrapper.local_iterator
    # MaxText's grain checkpointing writes the state itself only without save/load.
    assert not hasattr(it, "save") and not hasattr(it, "load")
    for _ in range(5):
        next(it)
    state = it.get_state()
    assert isinstance(state, bytes) and json.loads(state)["sequence"] == 20
    expected = [maxtext_input.batch_digest(next(it)) for _ in range(6)]
    it.set_state(state)  # batches already prefetched are dropped
    assert [maxtext_input.batch_digest(next(it)) for _ in range(6)] == expected
    other_wrapper = maxtext_input.make_train_iterator(options, config(4), mesh, [0])
    other = other_wrapper.local_iterator
    other.set_state(state)
    assert [maxtext_input.batch_digest(next(other)) for _ in range(6)] == expected
    with pytest.raises(ValueError, match="not a probeflow iterator state"):
        other.set_state(b"\xff")
    with pytest.raises(probeflow.ProbeflowError, match="seed"):
        other.set_state(state.replace(b'"seed": 0', b'"seed": 9'))


def test_eval_stream_is_finite_and_restarts(data):
    import jax
    from jax.sharding import Mesh

    out, _ = data
    mesh = Mesh(np.array(jax.devices()), ("data",))
    evaluation = maxtext_input.make_eval_iterator(NetworkOptions(train_files=str(out)), config(4), mesh, [0])
    first = [maxtext_input.batch_digest(b) for b in evaluation.local_iterator]
    assert first
    evaluation.reset()
    again = [maxtext_input.batch_digest(b) for b in evaluation.local_iterator]
    assert again == first


def test_a_mixture_of_two_sources_and_a_resume_with_other_weights(data, monkeypatch):
    """network_train_weights mixes the sources of network_train_files (here two shard
    files of the output, whose probes are disjoint): proportions follow the weights;
    a checkpoint restored with other weights continues every source where it was."""
    import jax
    from jax.sharding import Mesh

    out, _ = data
    mesh = Mesh(np.array(jax.devices()), ("data",))
    files = sorted(str(f) for f in (out / "train").glob("shard-*.array_record"))[:2]
    rows_a = probeflow.RowDataSource(files[0])
    probes_a = {rows_a[i]["src_addr"] for i in range(len(rows_a))}
    _, options, _ = split_arguments(
        ["base.yml", "dataset_type=network", f"network_train_files={files[0]},{files[1]}",
         "network_train_weights=1,3", f"network_eval_files={out}", "network_packing=false"]
    )
    assert options is not None and options.train_weights == (1.0, 3.0)
    wrapper = maxtext_input.make_train_iterator(options, config(8), mesh, [0])
    it = wrapper.local_iterator
    picked = [src in probes_a for _ in range(40) for src in probes_of(next(it))]
    assert abs(sum(picked) - len(picked) / 4) <= 5 * (len(picked) * 3 / 16) ** 0.5, sum(picked)
    state = it.get_state()
    assert [s["weight"] for s in json.loads(state)["sources"]] == [1.0, 3.0]
    only_a = dataclasses.replace(options, train_weights=(1.0, 0.0))
    resumed = maxtext_input.make_train_iterator(only_a, config(8), mesh, [0])
    resumed.local_iterator.set_state(state)
    after = [src for _ in range(10) for src in probes_of(next(resumed.local_iterator))]
    assert after and all(src in probes_a for src in after)
    wrapper.close()
    resumed.close()
    bad = [
        (["network_train_files=/a,/b", "network_train_weights=1", "network_eval_files=/e"], "one weight per source"),
        (["network_train_files=/a,/b", "network_train_weights=1,2"], "network_eval_files is required"),
        # Bad weights and empty items are refused when the arguments are read.
        (["network_train_files=/a,/b,/c", "network_train_weights=1,,3", "network_eval_files=/e"], "network_train_weights"),
        (["network_train_files=/a,/b", "network_train_weights=1,3,", "network_eval_files=/e"], "network_train_weights"),
        (["network_train_files=/a,/b", "network_train_weights=-1,3", "network_eval_files=/e"], "network_train_weights"),
        (["network_train_files=/a,/b", "network_train_weights=0,0", "network_eval_files=/e"], "network_train_weights"),
        (["network_train_files=/a,/b", "network_train_weights=nan,1", "network_eval_files=/e"], "network_train_weights"),
        (["network_train_files=/a,/b", "network_train_weights=", "network_eval_files=/e"], "network_train_weights"),
        (["network_train_files=/a,,/b", "network_train_weights=1,2,3", "network_eval_files=/e"], "empty source"),
    ]
    for args, message in bad:
        with pytest.raises(NetworkConfigError, match=message):
            split_arguments(["base.yml", "dataset_type=network", *args])


def test_a_mixture_trains_through_maxtext_train(data, tmp_path):
    """A real run on a two-source mixture, with the batch log on: every step trains."""
    out, _ = data
    files = sorted((out / "train").glob("shard-*.array_record"))[:2]
    output = train(
        out, tmp_path, "mix", 3, tmp_path / "mix.jsonl",
        ["eval_interval=-1", f"network_train_files={files[0]},{files[1]}", "network_train_weights=1,3",
         f"network_eval_files={out}"],
    )
    assert sorted(losses(output)) == [0, 1, 2], output[-3000:]
    logged = batches(tmp_path / "mix.jsonl")
    assert len(logged) >= 3 and logged[1]["position"]["picks"] == 4


def test_training_reads_an_output_on_s3_through_the_shard_cache(data, runs, tmp_path):
    """network_train_files=s3://…: a real run against moto's S3 server (from the test
    suite's Python 3.11 environment) trains on exactly the batches of the local output,
    its shards fetched once into network_cache_dir."""
    out, _ = data
    base, _, _, _ = runs
    venv = ROOT / ".venv" / "bin"
    port = free_port()
    server = subprocess.Popen([str(venv / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ALLOW_HTTP="true",
                   AWS_ACCESS_KEY_ID="probeflow", AWS_SECRET_ACCESS_KEY="probeflow-secret",
                   AWS_REGION="us-east-1")
        upload = (
            "import sys, time, boto3, pathlib\n"
            "c = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1')\n"
            "for _ in range(150):\n"
            "    try:\n        c.create_bucket(Bucket='probeflow-mx'); break\n"
            "    except Exception as e:\n        error = e; time.sleep(0.2)\n"
            "else:\n    raise error\n"
            "root = pathlib.Path(sys.argv[2])\n"
            "for f in root.rglob('*'):\n"
            "    if f.is_file(): c.upload_file(str(f), 'probeflow-mx', 'out/' + str(f.relative_to(root)))\n"
        )
        run([str(venv / "python"), "-c", upload, env["AWS_ENDPOINT_URL"], str(out)], env=env)
        cache = tmp_path / "cache"
        output = train(
            out, tmp_path, "s3", 3, tmp_path / "s3.jsonl",
            ["eval_interval=-1", "network_train_files=s3://probeflow-mx/out", f"network_cache_dir={cache}"], env=env,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert sorted(losses(output)) == [0, 1, 2], output[-3000:]
    local = [b["sha256"] for b in batches(base / "full.jsonl")[:3]]
    assert [b["sha256"] for b in batches(tmp_path / "s3.jsonl")[:3]] == local
    train_shards = [s for s in json.loads((out / "manifest.json").read_text())["shards"] if s["split"] == "train"]
    assert sorted(f.name for f in (cache / "shards").glob("*.array_record")) == sorted(
        f"{s['blake3']}.array_record" for s in train_shards
    )


def test_a_data_error_fails_the_run_instead_of_stopping_it_quietly(data, tmp_path):
    """MaxText turns an exception of the data iterator into "Training stopped" and exit
    code 0; probeflow.maxtext_train must exit non-zero and name the error."""
    out, _ = data
    broken = tmp_path / "out"
    shutil.copytree(out, broken)
    for shard in (broken / "train").glob("shard-*.array_record"):
        data_bytes = bytearray(shard.read_bytes())
        # Data chunks only: the footer and the 64 KiB postscript at the end stay intact,
        # so the shard opens and fails when its rows are read, during training.
        for i in range(200, (len(data_bytes) - 65536) // 2):
            data_bytes[i] ^= 0x5A
        shard.write_bytes(bytes(data_bytes))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "probeflow.maxtext_train", "network_small.yml", "dataset_type=network",
         f"network_train_files={broken}", "run_name=broken", f"base_output_directory={tmp_path}", "steps=4",
         "eval_interval=-1", *TINY],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "the data stream failed" in proc.stderr and "shard-" in proc.stderr, proc.stderr[-3000:]


def probes_of(batch: dict) -> list[str]:
    """The probe of every context of a batch, in order."""
    return [
        tokenizer.detokenize(ctx)[0]["src_addr"]
        for i in range(batch["inputs"].shape[0])
        for ctx in tokenizer.segments(batch["inputs"][i], batch["inputs_segmentation"][i])
    ]


def contexts_of(batch: dict) -> set[tuple[int, ...]]:
    """The contexts (input tokens) of a batch (numpy arrays or the batch log's lists)."""
    inputs, seg = np.array(batch["inputs"]), np.array(batch["inputs_segmentation"])
    return {tuple(ctx.tolist()) for i in range(inputs.shape[0]) for ctx in tokenizer.segments(inputs[i], seg[i])}


def simulated_host(out: Path, monkeypatch, host: int, hosts: int, global_batch: int):
    """MaxText's train iterator as host `host` of `hosts` builds it (the trainer's
    reader options: network_seed=5, sequences of 128)."""
    import jax
    from jax.sharding import Mesh

    monkeypatch.setattr(jax, "process_index", lambda: host)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    return maxtext_input.make_train_iterator(
        NetworkOptions(train_files=str(out), seed=5), config(global_batch), mesh, list(range(hosts))
    )


def predicted(out: Path, states: list[bytes], host: int, hosts: int, batch: int, n: int) -> list[str]:
    """The batches the elastic-resume guarantee predicts: host `host` of `hosts`
    continuing from every old host's state (probeflow.Dataset.set_states)."""
    ds = probeflow.Dataset(
        str(out), split="train", seq_len=128, batch_size=batch, shard_index=host, shard_count=hosts,
        packing=True, **NetworkOptions(train_files=str(out), seed=5).reader_options(),
    )
    ds.set_states([json.loads(s) for s in states])
    digests = [maxtext_input.batch_digest(next(ds)) for _ in range(n)]
    ds.close()
    return digests


def test_a_two_host_checkpoint_continues_in_one_process(data, tmp_path, monkeypatch):
    """A checkpoint whose data stream two hosts wrote (simulated: their iterator files)
    restores into one `python -m probeflow.maxtext_train` process, which goes on with
    exactly the predicted batches and repeats nothing the hosts had delivered."""
    out, _ = data
    train(out, tmp_path, "elastic", STOP, tmp_path / "first.jsonl", ["eval_interval=-1"])
    iter_dir = tmp_path / "elastic" / "checkpoints" / str(STOP - 1) / "iter"
    assert [p.name for p in iter_dir.glob("process_*")] == ["process_0-of-1.json"]
    states, delivered = [], set()
    for host in (0, 1):
        wrapper = simulated_host(out, monkeypatch, host, 2, 4)
        for _ in range(STOP):
            delivered |= contexts_of(next(wrapper.local_iterator))
        states.append(wrapper.local_iterator.get_state())
        wrapper.close()
    (iter_dir / "process_0-of-1.json").unlink()
    for host, state in enumerate(states):
        (iter_dir / f"process_{host}-of-2.json").write_bytes(state)
    output = train(out, tmp_path, "elastic", STEPS, tmp_path / "second.jsonl", ["eval_interval=-1"])
    assert sorted(losses(output)) == list(range(STOP, STEPS)), output[-3000:]
    after = batches(tmp_path / "second.jsonl")
    assert [b["sha256"] for b in after] == predicted(out, states, 0, 1, 4, STEPS - STOP)
    assert all(b["shard_count"] == 1 for b in after)
    assert not delivered & set().union(*(contexts_of(b) for b in after))


def test_a_one_process_checkpoint_continues_on_two_hosts(data, runs, monkeypatch, tmp_path):
    """The real one-process checkpoint of the resumed run, restored by two simulated
    hosts through MaxText's restore hook: the predicted batches, disjoint between the
    hosts and from the steps before the checkpoint."""
    import asyncio

    from etils import epath
    from maxtext.common import grain_utility

    out, _ = data
    base, _, _, _ = runs
    iter_dir = epath.Path(base / "resumed" / "checkpoints" / str(STOP - 1) / "iter")
    saved = maxtext_input.read_host_states(iter_dir)
    assert len(saved) == 1
    maxtext_input.install(NetworkOptions(train_files=str(out), seed=5))

    async def restore(checkpointable):
        await (await checkpointable.load(iter_dir))

    got = []
    for host in (0, 1):
        wrapper = simulated_host(out, monkeypatch, host, 2, 4)
        asyncio.run(restore(grain_utility.for_restore(None, STOP - 1, wrapper, 1)))
        got.append([next(wrapper.local_iterator) for _ in range(3)])
        wrapper.close()
        assert [maxtext_input.batch_digest(b) for b in got[host]] == predicted(out, saved, host, 2, 2, 3)
    hosts = [set().union(*(contexts_of(b) for b in g)) for g in got]
    before = set().union(*(contexts_of(b) for b in batches(base / "first.jsonl")))
    assert hosts[0] and hosts[1] and not hosts[0] & hosts[1]
    assert not (hosts[0] | hosts[1]) & before
    # A checkpoint missing a host's file is an error, not a silent restart.
    (tmp_path / "process_0-of-2.json").write_bytes(saved[0])
    with pytest.raises(ValueError, match=r"hosts \[1\] of 2 are missing"):
        maxtext_input.read_host_states(epath.Path(tmp_path))


def test_arguments_are_split_and_checked():
    config_file, options, rest = split_arguments(
        ["base.yml", "dataset_type=network", "network_train_files=/d", "network_seed=3",
         "network_timestamp_modes=0.5,0.25,0.25", "steps=10"]
    )
    assert config_file == "base.yml" and options is not None
    assert options.seed == 3 and options.timestamp_modes == (0.5, 0.25, 0.25)
    assert rest == ["steps=10", "dataset_type=grain", "grain_train_files=/d", "grain_eval_files=/d"]
    assert split_arguments(["base.yml", "dataset_type=synthetic"]) == ("base.yml", None, ["dataset_type=synthetic"])
    bad = [
        (["base.yml", "dataset_type=network"], "network_train_files is required"),
        (["base.yml", "dataset_type=network", "network_train_files=/d", "network_sed=3"], "unknown key 'network_sed'"),
        (["base.yml", "dataset_type=network", "network_train_files=/d", "network_seed=x"], "network_seed"),
        (["base.yml", "dataset_type=network", "network_train_files=/d", "network_eval_split=train"], "auto, val, test"),
        (["base.yml", "network_train_files=/d"], "need dataset_type=network"),
        (["dataset_type=network"], "config file"),
        (["base.yml", "dataset_type=network", "network_train_files=/d", "grain_train_files=/e"], "cannot be combined"),
    ]
    for args, message in bad:
        with pytest.raises(NetworkConfigError, match=message):
            split_arguments(args)


def test_cli_errors_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "probeflow.maxtext_train", "network_small.yml", "dataset_type=network"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2 and "network_train_files is required" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "probeflow.maxtext_train", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "network_train_files" in proc.stdout
