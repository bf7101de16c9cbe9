"""Weighted mixtures of several outputs from Python: proportions, determinism, exact
resume, other weights at resume and on the fly, refused states, Grain."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import probeflow
from probeflow import tokenizer
from dataset_fixtures import contexts, reshard, same, take, write_shards


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Two sources of different probes: A (80 rows), B (50 rows).
    Returns (glob A, glob B, probes of A)."""
    a, truth_a = write_shards(tmp_path_factory.mktemp("a"), group=1, rows=40)
    b, _ = write_shards(tmp_path_factory.mktemp("b"), group=2, rows=25)
    return a, b, set(truth_a)


def mixture(sources, weights, **kw):
    a, b, _ = sources
    kw.setdefault("seq_len", 256)
    kw.setdefault("batch_size", 4)
    kw.setdefault("block_rows", 8)
    kw.setdefault("shard_index", 0)
    kw.setdefault("shard_count", 1)
    return probeflow.Dataset.mixture([(a, weights[0]), (b, weights[1])], **kw)


def source_of(context, probes_a) -> int:
    """0 if the context's probe is one of A's, else 1 (a context is one probe's)."""
    first = tokenizer.detokenize(np.asarray(context, dtype=np.int32))[0]
    return 0 if first["src_addr"] in probes_a else 1


def by_source(ctxs, probes_a):
    out = ([], [])
    for c in ctxs:
        out[source_of(c, probes_a)].append(c)
    return out


def within_bounds(observed, n, p):
    """|observed - n p| within 5 standard deviations of Binomial(n, p)."""
    return abs(observed - n * p) <= 5 * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("rank, ranks", [(0, 1), (1, 2)])
def test_source_proportions_follow_the_weights(sources, rank, ranks):
    """One context per sequence (no packing): the share of A's sequences is within
    statistical bounds of 1/4; the same options give the same batches."""
    kw = dict(packing=False, shard_index=rank, shard_count=ranks, seed=11)
    batches = take(mixture(sources, (1.0, 3.0), **kw), 300)
    ctxs = contexts(batches)
    assert len(ctxs) == 1200
    a, _ = by_source(ctxs, sources[2])
    assert within_bounds(len(a), 1200, 0.25), len(a)
    assert same(batches, take(mixture(sources, (1.0, 3.0), prefetch=0, num_threads=1, **kw), 300))
    other_seed = take(mixture(sources, (1.0, 3.0), **dict(kw, seed=12)), 300)
    assert not same(batches, other_seed)


def test_state_round_trip_says_which_sources_and_weights(sources):
    ds = mixture(sources, (2.0, 1.0), seed=3)
    take(ds, 17)
    state = json.loads(json.dumps(ds.get_state()))
    assert [(s["name"], s["weight"]) for s in state["sources"]] == [(sources[0], 2.0), (sources[1], 1.0)]
    assert state["picks"] == 17 * 4
    expected = take(ds, 30)
    again = mixture(sources, (2.0, 1.0), seed=3, prefetch=1)
    again.set_state(state)
    assert same(take(again, 30), expected)
    assert ds.weights == [2.0, 1.0]
    assert [s["rows"] for s in ds.sources] == [80, 50]
    assert "probeflow.Dataset.mixture(" in repr(ds)


@pytest.mark.parametrize("source", [0, 1])
def test_other_weights_at_resume_lose_and_repeat_no_row_of_the_current_block(sources, source):
    """A 1:1 mixture stops mid-block; it continues with all weight on one source, to
    the end of that source's epoch. That source's contexts before and after are its
    whole epoch (as a mixture with only it picked reads it): nothing of the partly
    read block lost or repeated."""
    only = (1.0, 0.0) if source == 0 else (0.0, 1.0)
    everything = sorted(contexts(mixture(sources, only, num_epochs=1)))
    ds = mixture(sources, (1.0, 1.0), num_epochs=1)
    before = by_source(contexts(take(ds, 9)), sources[2])[source]
    assert 0 < len(before) < len(everything)
    state = ds.get_state()
    after_ds = mixture(sources, only, num_epochs=1)
    after_ds.set_state(state)
    assert after_ds.get_state()["sources"][source]["weight"] == 1.0
    after = contexts(after_ds)
    assert all(source_of(c, sources[2]) == source for c in after)
    assert sorted(before + after) == everything


def test_set_weights_changes_the_picks_from_the_last_batch_returned(sources):
    ds = mixture(sources, (1.0, 1.0), prefetch=8)
    take(ds, 5)
    ds.set_weights([0.0, 1.0])
    assert ds.weights == [0.0, 1.0]
    tail = contexts(take(ds, 20))
    assert all(source_of(c, sources[2]) == 1 for c in tail)
    # The same as resuming from the state at that point with the new weights.
    replay = mixture(sources, (1.0, 1.0), prefetch=0)
    take(replay, 5)
    state = replay.get_state()
    resumed = mixture(sources, (0.0, 1.0))
    resumed.set_state(state)
    assert contexts(take(resumed, 20)) == tail
    with pytest.raises(probeflow.InvalidInputError, match="one weight per source"):
        ds.set_weights([1.0])
    with pytest.raises(probeflow.InvalidInputError, match="at least one must be > 0"):
        ds.set_weights([0.0, 0.0])


def test_states_that_do_not_fit_are_refused(sources, tmp_path):
    a, b, _ = sources
    ds = mixture(sources, (1.0, 1.0))
    take(ds, 3)
    state = ds.get_state()
    single = probeflow.Dataset(a, seq_len=256, batch_size=4, block_rows=8, shard_index=0, shard_count=1)
    with pytest.raises(probeflow.InvalidInputError, match="mixture of 2 sources"):
        single.set_state(state)
    with pytest.raises(probeflow.InvalidInputError, match="of one output"):
        ds.set_state(single.get_state())
    swapped = probeflow.Dataset.mixture(
        [(b, 1.0), (a, 1.0)], seq_len=256, batch_size=4, block_rows=8, shard_index=0, shard_count=1
    )
    with pytest.raises(probeflow.InvalidInputError, match="source 0 .*rows"):
        swapped.set_state(state)
    # Source A as another output of as many rows (another shard count): refused.
    other = probeflow.Dataset.mixture(
        [(reshard(a, tmp_path / "a4", 4), 1.0), (b, 1.0)],
        seq_len=256, batch_size=4, block_rows=8, shard_index=0, shard_count=1,
    )
    with pytest.raises(probeflow.InvalidInputError, match="source 0 .*other rows"):
        other.set_state(state)
    with pytest.raises(probeflow.InvalidInputError, match="source 0 .*other rows"):
        other.set_states([state])
    with pytest.raises(probeflow.InvalidInputError, match="finite number"):
        mixture(sources, (1.0, -1.0))
    # Weights are checked before any source is opened.
    with pytest.raises(probeflow.InvalidInputError, match="finite number"):
        probeflow.Dataset.mixture([(a, float("nan")), ("/nonexistent/out", 1.0)], shard_index=0, shard_count=1)
    with pytest.raises(ValueError, match="at least one source"):
        probeflow.Dataset.mixture({})
    with pytest.raises(probeflow.InvalidInputError, match="set_weights"):
        single.set_weights([1.0])
    assert single.weights is None


def test_elastic_resume_of_a_mixture(sources):
    """Two ranks stop; three continue from both states: within one epoch of each
    source, no context is delivered twice."""
    kw = dict(block_rows=5, num_epochs=1)
    seen = []
    states = []
    for r in range(2):
        ds = mixture(sources, (1.0, 1.0), shard_index=r, shard_count=2, **kw)
        seen += contexts(take(ds, 3 + 4 * r))
        states.append(ds.get_state())
    for r in range(3):
        ds = mixture(sources, (1.0, 1.0), shard_index=r, shard_count=3, **kw)
        ds.set_states(states)
        assert ds.get_state()["picks"] == 0
        after = contexts(take(ds, 10))
        assert after, "the new ranks read on"
        seen += after
    assert len(seen) == len(set(seen))


def test_grain_iter_dataset_reads_a_mixture(sources):
    pytest.importorskip("grain")
    from probeflow.grain import IterDataset

    a, b, _ = sources
    ds = IterDataset([a, b], weights=[1.0, 1.0], seq_len=256, batch_size=4, shard_index=0, shard_count=1)
    it = iter(ds)
    for _ in range(3):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(3)]
    again = iter(ds)
    again.set_state(state)
    assert same([next(again) for _ in range(3)], expected)
    assert [s["weight"] for s in state["sources"]] == [1.0, 1.0], "the weights reached the Dataset"
