"""The training reader from Python: batches, determinism, ranks, state, fork, Grain."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import probeflow
from probeflow import tokenizer
from dataset_fixtures import KEYS, contexts, dataset, reshard, same, take, write_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """See `write_shards`."""
    return write_shards(tmp_path_factory.mktemp("shards"))


def test_batches_have_maxtext_shape_and_decode_into_the_rows(shards):
    path, truth = shards
    with dataset(path) as ds:
        assert ds.num_rows == 80
        batches = take(ds, 30)
    for b in batches:
        assert sorted(b) == sorted(KEYS)
        for k in KEYS:
            assert b[k].shape == (4, 256) and b[k].dtype == np.int32
        assert np.array_equal(b["targets"][:, :-1], b["inputs"][:, 1:])
        assert np.array_equal(b["targets_segmentation"][:, :-1], b["inputs_segmentation"][:, 1:])
        assert (b["targets"][:, -1] == 0).all() and (b["targets_segmentation"][:, -1] == 0).all()
        assert np.array_equal(b["targets_position"], b["inputs_position"])
        for i in range(4):
            for ctx in tokenizer.segments(b["inputs"][i], b["inputs_segmentation"][i]):
                seg_positions = np.arange(len(ctx))
                ms = tokenizer.detokenize(ctx)
                assert ms, "empty context"
                src = ms[0]["src_addr"]
                rows = truth[src]
                for m in ms:
                    assert m["src_addr"] == src
                    if m["time"] is not None:
                        assert (m["time"], m["dst_addr"], m["rtt_code"]) in rows["timed"]
                    else:
                        assert (m["dst_addr"], m["rtt_code"]) in rows["untimed"]
                assert len(seg_positions) <= 256
        # Positions restart at 0 for every context.
        seg = b["inputs_segmentation"]
        starts = (seg != 0) & np.concatenate([np.ones((4, 1), bool), seg[:, 1:] != seg[:, :-1]], axis=1)
        assert (b["inputs_position"][starts] == 0).all()


def test_same_options_same_batches_whatever_prefetch_and_threads(shards):
    path, _ = shards
    a = take(dataset(path, prefetch=0, num_threads=1), 50)
    b = take(dataset(path, prefetch=16, num_threads=4), 50)
    assert len(a) == 50 and same(a, b)
    c = take(dataset(path, seed=3), 50)
    assert not same(a, c)


def test_padding_is_small_with_packing(shards):
    path, _ = shards
    packed = take(dataset(path, seq_len=1024, batch_size=8, block_rows=256), 40)
    pad = 1 - sum((b["inputs_segmentation"] != 0).sum() for b in packed) / (40 * 8 * 1024)
    unpacked = take(dataset(path, seq_len=1024, batch_size=8, packing=False), 40)
    pad_off = 1 - sum((b["inputs_segmentation"] != 0).sum() for b in unpacked) / (40 * 8 * 1024)
    assert pad < 0.01, pad
    assert pad_off > pad
    for b in unpacked:
        assert b["inputs_segmentation"].max() <= 1


def test_ranks_are_disjoint_and_cover_every_row(shards):
    path, truth = shards
    # One context per row visit in a finite epoch without packing: collect sources per rank.
    def sources(index, count):
        ds = dataset(path, shard_index=index, shard_count=count, num_epochs=1, packing=False,
                     contexts_per_row=1, seq_len=4096, batch_size=1, tokens_per_measurement=1_000_000)
        seen = []
        for b in ds:
            for ctx in tokenizer.segments(b["inputs"][0], b["inputs_segmentation"][0]):
                seen.append(tokenizer.detokenize(ctx)[0]["src_addr"])
        return seen

    for world in (1, 3):
        per_rank = [sources(r, world) for r in range(world)]
        flat = [s for rank in per_rank for s in rank]
        # Every row visited once: small rows (all measurements) count once per row, and
        # sources with several rows (parts) appear once per part.
        assert len(flat) >= len(truth)
        assert set(flat) == set(truth)
        for i in range(world):
            for j in range(i + 1, world):
                assert not set(per_rank[i]) & set(per_rank[j])


def test_state_round_trip_after_hundreds_of_batches(shards):
    path, _ = shards
    ds = dataset(path, batch_size=2)
    take(ds, 300)
    state = ds.get_state()
    json.dumps(state)
    expected = take(ds, 40)
    fresh = dataset(path, batch_size=2, prefetch=1)
    fresh.set_state(json.loads(json.dumps(state)))
    assert same(take(fresh, 40), expected)
    with pytest.raises(probeflow.InvalidInputError, match="batch_size"):
        dataset(path, batch_size=3).set_state(state)
    with pytest.raises(probeflow.InvalidInputError):
        fresh.set_state({"epoch": 0})


@pytest.mark.parametrize("old, new", [(1, 3), (4, 2), (3, 5), (8, 1)])
def test_elastic_resume_reads_every_context_once(shards, old, new):
    """W ranks stop mid-epoch (mid-block, one in the next epoch, one never started);
    W' ranks continue from all their states: every context of the two epochs exactly
    once, with packing."""
    path, _ = shards
    opts = dict(num_epochs=2, block_rows=5, batch_size=3)
    everything = sorted(contexts(dataset(path, **opts)))
    seen = []
    states = []
    for r in range(old):
        ds = dataset(path, shard_index=r, shard_count=old, **opts)
        if r == old - 1 and old > 1:
            while ds.get_state()["epoch"] == 0:
                seen += contexts(take(ds, 1))
        steps = [0, 7, 2, 11, 1, 4, 9, 3][r] if old > 1 else 17
        seen += contexts(take(ds, steps))
        states.append(json.loads(json.dumps(ds.get_state())))
        ds.close()
    for r in range(new):
        ds = dataset(path, shard_index=r, shard_count=new, **dict(opts, batch_size=2 + r % 2))
        ds.set_states(list(reversed(states)))
        state = ds.get_state()
        assert state["version"] == 2 and state["shard_count"] == new and state["changes"]
        seen += contexts(ds)
    assert sorted(seen) == everything


def test_elastic_resume_refuses_incomplete_or_foreign_states(shards):
    path, _ = shards
    states = []
    for r in range(3):
        ds = dataset(path, shard_index=r, shard_count=3)
        take(ds, 2)
        states.append(ds.get_state())
    target = dataset(path, shard_index=0, shard_count=2)
    with pytest.raises(probeflow.StateError, match="every rank"):
        target.set_states(states[:2])
    with pytest.raises(probeflow.StateError, match="seed"):
        dataset(path, shard_count=2, seed=4).set_states(states)
    with pytest.raises(probeflow.StateError, match="not a list of probeflow iterator states"):
        target.set_states([{"epoch": 0}])


def test_a_state_restores_only_into_the_rows_it_was_taken_on(shards, tmp_path):
    """A state taken on one output is refused by another output of as many rows (the
    same input with another shard count), by set_state and by set_states, and it
    restores into a copy of the same output in another directory."""
    path, _ = shards
    other = reshard(path, tmp_path / "four", 4)
    ds = dataset(path)
    take(ds, 5)
    state = ds.get_state()
    assert len(state["rows_digest"]) == 64
    expected = take(ds, 10)
    foreign = dataset(other)
    assert foreign.num_rows == ds.num_rows
    with pytest.raises(probeflow.StateError, match="other rows"):
        foreign.set_state(state)
    with pytest.raises(probeflow.StateError, match="other rows"):
        foreign.set_states([state])
    with pytest.raises(probeflow.StateError, match="other rows"):
        dataset(other, shard_count=2).set_states([state])
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in glob.glob(path):
        shutil.copy(f, copy)
    moved = dataset(str(copy / "shard-*.array_record"))
    moved.set_state(state)
    assert same(take(moved, 10), expected)
    # A state of an older version says nothing of its rows: refused, saying why.
    old = {k: v for k, v in state.items() if k != "rows_digest"}
    with pytest.raises(probeflow.StateError, match="no rows_digest"):
        dataset(path).set_state(old)


THREADS_CANNOT_START = r"""
import json, resource, sys
import probeflow
path = sys.argv[1]
opts = dict(seq_len=256, batch_size=4, block_rows=16, shard_index=0, shard_count=1)
next(probeflow.Dataset(path, num_threads=1, **opts))
vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
# Address space for a few more thread stacks, not for 200.
resource.setrlimit(resource.RLIMIT_AS, (vm + 64 * 2**20, resource.RLIM_INFINITY))
try:
    next(probeflow.Dataset(path, num_threads=200, **opts))
    print(json.dumps(None))
except Exception as e:
    print(json.dumps([type(e).__name__, [c.__name__ for c in type(e).__mro__], str(e)]))
"""


def test_threads_that_cannot_start_are_not_an_input_error(shards):
    """Sampler threads the system refuses to start raise probeflow.ThreadError (a
    RuntimeError), not InvalidInputError: nothing is wrong with the input."""
    path, _ = shards
    # One malloc arena: glibc reserves 64 MiB of address space for each new arena, so a
    # thread that gets one under the 64 MiB headroom can fail an allocation and abort
    # the process instead of failing to start (the likely cause of one SIGABRT here in
    # ~25 runs).
    env = dict(os.environ, MALLOC_ARENA_MAX="1")
    proc = subprocess.run([sys.executable, "-c", THREADS_CANNOT_START, path],
                          capture_output=True, text=True, check=True, env=env)
    name, mro, message = json.loads(proc.stdout)
    assert name == "ThreadError" and "RuntimeError" in mro and "ValueError" not in mro, (name, mro)
    assert "cannot start sampler threads" in message, message


def test_finite_epochs_end_and_closed_datasets_refuse(shards):
    path, _ = shards
    ds = dataset(path, num_epochs=1)
    n = len(list(ds))
    assert n > 10
    with pytest.raises(StopIteration):
        next(ds)
    ds.close()
    assert ds.closed
    with pytest.raises(ValueError, match="closed"):
        next(ds)
    assert "probeflow.Dataset" in repr(ds)


def test_bad_options_and_paths_are_clear_errors(shards, tmp_path):
    path, _ = shards
    with pytest.raises(probeflow.InvalidInputError, match="seq_len"):
        dataset(path, seq_len=16)
    with pytest.raises(probeflow.InvalidInputError, match="shard_index"):
        dataset(path, shard_index=3, shard_count=2)
    with pytest.raises(probeflow.InvalidInputError, match="strategy"):
        dataset(path, strategy="zigzag")
    with pytest.raises(probeflow.InvalidInputError, match="no files match"):
        dataset(str(tmp_path / "*.array_record"))
    with pytest.raises(FileNotFoundError):
        dataset(str(tmp_path / "missing.array_record"))
    bad = tmp_path / "bad.array_record"
    bad.write_bytes(b"not an array record file" * 100)
    with pytest.raises(probeflow.FormatError, match="bad.array_record"):
        dataset(str(bad))


def test_geometric_stride_strategy(shards):
    path, truth = shards
    for b in take(dataset(path, strategy="geometric_stride"), 10):
        for ctx in tokenizer.segments(b["inputs"][0], b["inputs_segmentation"][0]):
            assert tokenizer.detokenize(ctx)[0]["src_addr"] in truth


def test_safe_after_fork(shards):
    path, _ = shards
    ds = dataset(path, prefetch=4, num_threads=2)
    take(ds, 5)  # parent's producer threads are running
    expected = take(dataset(path, prefetch=0, num_threads=1), 25)[5:]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's threads do not exist here
        os.close(r)
        try:
            got = take(ds, 20)
            ok = same(got, expected)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1" and status == 0
    assert same(take(ds, 20), expected)  # the parent goes on unaffected


def test_row_data_source(shards):
    path, truth = shards
    src = probeflow.RowDataSource(path)
    assert len(src) == 80
    row = src[3]
    assert row["src_addr"] in truth and row["n_measurements"] == len(row["event_time"])
    with pytest.raises(IndexError):
        src[80]
    assert "RowDataSource" in repr(src)


def test_grain_pipeline_and_checkpoint(shards, tmp_path):
    import grain  # in tests/requirements.txt: a missing grain fails the test, not skips it

    from probeflow.grain import IterDataset

    path, _ = shards
    ds = IterDataset(path, seq_len=256, batch_size=4, block_rows=16, shard_index=0, shard_count=1)
    it = iter(ds.map(lambda b: b["inputs"].sum()))
    first = [next(it) for _ in range(30)]
    state = it.get_state()
    json.dumps(state)
    after = [next(it) for _ in range(10)]
    handler = grain.checkpoint.CheckpointHandler()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    handler.save(ckpt, item=it)
    it2 = iter(ds.map(lambda b: b["inputs"].sum()))
    handler.restore(ckpt, item=it2)
    assert [next(it2) for _ in range(10)] == [next(it) for _ in range(10)]
    it3 = iter(ds.map(lambda b: b["inputs"].sum()))
    it3.set_state(state)
    assert [next(it3) for _ in range(10)] == after
    # Sliced for two workers: disjoint streams.
    a, b = IterDataset(path, seq_len=256, batch_size=4, shard_index=0, shard_count=1), IterDataset(path, seq_len=256, batch_size=4, shard_index=0, shard_count=1)
    a.set_slice(slice(0, None, 2))
    b.set_slice(slice(1, None, 2))
    assert not np.array_equal(next(iter(a))["inputs"], next(iter(b))["inputs"])
    assert first
