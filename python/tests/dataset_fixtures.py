"""Helpers shared by the reader's Python tests: shard files written with probeflow's
own writer, and short ways to open, read and compare datasets."""

from __future__ import annotations

import glob
import random

import numpy as np

import probeflow
from probeflow import tokenizer

KEYS = ["inputs", "inputs_segmentation", "inputs_position", "targets", "targets_segmentation", "targets_position"]


def write_shards(d, group=1, rows=40):
    """Two shards in `d`; rows of 1 … 3000 measurements, IPv4 and IPv6, some failed
    pings; probes 10.<shard>.<group>.<r> and 2001:db8::<group>:<shard>:<r>.
    Returns (glob, {src_addr: {"timed": {(time, dst, code)}, "untimed": {(dst, code)}}})."""
    rng = random.Random(5 * group)
    truth: dict[str, dict] = {}
    for s in range(2):
        with probeflow.ArrayRecordWriter(d / f"shard-{s:05d}.array_record", "group_size:1,uncompressed") as w:
            for r in range(rows):
                v6 = r % 3 == 0
                src = (f"2001:db8::{s}:{r + 1:x}" if group == 1 else f"2001:db8::{group}:{s}:{r + 1:x}") if v6 else f"10.{s}.{group}.{r}"
                n = [1, 9, 60, 400, 3000][r % 5]
                t, times, dsts, rtts = 1_650_000_000, [], [], []
                for _ in range(n):
                    t += rng.choice([0, 1, 30, 200, 3000, 90_000])
                    times.append(t)
                    dsts.append(f"2001:db8:9::{rng.randrange(1, 40):x}" if v6 else f"192.0.2.{rng.randrange(250)}")
                    rtts.append(None if rng.random() < 0.05 else rng.uniform(0.1, 400.0))
                for row in probeflow.build_rows(src, times, dsts, [(-1.0 if x is None else x) for x in rtts]):
                    w.write(row)
                rows_of = truth.setdefault(probeflow.canonical_addr(src), {"timed": set(), "untimed": set()})
                for tt, dd, x in zip(times, dsts, rtts):
                    code = None if x is None else probeflow.rtt_encode(x)
                    rows_of["timed"].add((tt, probeflow.canonical_addr(dd), code))
                    rows_of["untimed"].add((probeflow.canonical_addr(dd), code))
    return str(d / "shard-*.array_record"), truth


def dataset(path, **kw):
    kw.setdefault("seq_len", 256)
    kw.setdefault("batch_size", 4)
    kw.setdefault("block_rows", 16)
    kw.setdefault("shard_index", 0)
    kw.setdefault("shard_count", 1)
    return probeflow.Dataset(path, **kw)


def take(ds, n):
    out = []
    for _ in range(n):
        try:
            out.append(next(ds))
        except StopIteration:
            break
    return out


def same(a, b):
    return len(a) == len(b) and all(all(np.array_equal(x[k], y[k]) for k in KEYS) for x, y in zip(a, b))


def contexts(batches):
    """Every context (its input tokens) in `batches`."""
    return [
        tuple(ctx.tolist())
        for b in batches
        for i in range(b["inputs"].shape[0])
        for ctx in tokenizer.segments(b["inputs"][i], b["inputs_segmentation"][i])
    ]


def reshard(path: str, out, count: int) -> str:
    """The rows of the shards at `path`, dealt round-robin into `count` shards in `out`:
    the same rows (and number of rows) in another order, as another shard count of the
    same input gives."""
    rows = [r for f in sorted(glob.glob(path)) for r in probeflow.ArrayRecordReader(f)]
    out.mkdir()
    for s in range(count):
        with probeflow.ArrayRecordWriter(out / f"shard-{s:05d}.array_record", "group_size:1,uncompressed") as w:
            for r in rows[s::count]:
                w.write(r)
    return str(out / "shard-*.array_record")
