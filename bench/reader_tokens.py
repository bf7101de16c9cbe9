"""Training-reader benchmark (not a test): tokens/s of probeflow.Dataset from Python vs
two pure-Python samplers (pyarrow rows → per-measurement Python tokens), on the same
shard files, one core each, side by side in one run: a lean one (the earlier design's
shortcuts: no exact budgets, naive packing, no arrays) and a faithful port of the same
sampler, packer and MaxText arrays.

    .venv/bin/python bench/reader_tokens.py [--rows 3000] [--seconds 5]

Prints non-padding tokens/s, padding fraction, the ratio, and the process's anonymous
memory (RssAnon: memory beyond the memory-mapped shards) after the Rust run.
"""

from __future__ import annotations

import argparse
import math
import os

# numpy's OpenBLAS would otherwise start a thread per core that spins on the one core
# this benchmark is pinned to, slowing both sides.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import random
import tempfile
import time

import numpy as np
import pyarrow as pa

import probeflow


def make_shards(d: str, rows: int, options: str) -> str:
    rng = random.Random(1)
    with probeflow.ArrayRecordWriter(os.path.join(d, "shard-00000.array_record"), options) as w:
        for r in range(rows):
            v6 = rng.random() < 0.42
            src = f"2001:db8::{r + 1:x}" if v6 else f"10.{r // 65536}.{(r // 256) % 256}.{r % 256}"
            # Zipf-like: most sources a few hundred measurements, a few tens of thousands.
            n = max(1, min(60_000, int(200 / (rng.random() ** 0.85 + 1e-3) * 0.1)))
            t, times, dsts, rtts = 1_650_000_000, [], [], []
            for _ in range(n):
                t += rng.choice((60, 240, 900, 4))
                times.append(t)
                dsts.append(f"2001:db8:9::{rng.randrange(1, 3000):x}" if v6 else f"192.0.{rng.randrange(12)}.{rng.randrange(250)}")
                rtts.append(-1.0 if rng.random() < 0.03 else rng.uniform(1, 300))
            for row in probeflow.build_rows(src, times, dsts, rtts):
                w.write(row)
    return os.path.join(d, "shard-*.array_record")


def rust_tokens(path: str, seconds: float, seq_len: int) -> tuple[float, float]:
    ds = probeflow.Dataset(path, seq_len=seq_len, batch_size=16, prefetch=0, num_threads=1,
                           shard_index=0, shard_count=1)
    next(ds)
    real = total = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        b = next(ds)
        real += int(np.count_nonzero(b["inputs_segmentation"]))
        total += b["inputs_segmentation"].size
    elapsed = time.perf_counter() - start
    ds.close()
    return real / elapsed, 1 - real / total


# --- the pure-Python sampler (the earlier design's way) ------------------------------

def py_measurement(out, src, dst, code, ts, rng):
    fields = ["s", "d", "r"] + (["t"] if ts is not None else [])
    rng.shuffle(fields)
    out.append(0)
    for f in fields:
        if f == "s":
            out.append(1 if len(src) == 4 else 2)
            out.extend(11 + b for b in src)
        elif f == "d":
            out.append(3 if len(dst) == 4 else 4)
            out.extend(11 + b for b in dst)
        elif f == "r":
            if code is None:
                out.append(10)
            else:
                out.extend((8, 11 + (code >> 8), 11 + (code & 0xFF)))
        else:
            kind, v = ts
            if kind == "abs":
                out.append(5)
                out.extend(11 + b for b in v.to_bytes(8, "big"))
            elif v < 256:
                out.extend((6, 11 + v))
            else:
                out.append(7)
                out.extend(11 + b for b in min(v, 2**32 - 1).to_bytes(4, "big"))


def py_contexts(record: bytes, seq_len: int, rng: random.Random):
    table = pa.ipc.open_stream(record).read_all()
    meta = table.schema.metadata
    import ipaddress
    src = ipaddress.ip_address(meta[b"probeflow.src_addr"].decode()).packed
    times = table.column("event_time").to_pylist()
    dsts = table.column("dst_addr").to_pylist()
    rtts = table.column("rtt").to_pylist()
    n = len(times)
    k = min(math.ceil(n / 30), 16) if n >= seq_len // 30 else 1
    for _ in range(k):
        w = max(1, min(n, int((n + 1) ** rng.random())))
        off = rng.randrange(n - w + 1)
        idx = sorted(rng.sample(range(off, off + w), min(w, seq_len // 30)))
        mode = rng.random()
        out: list[int] = []
        prev = None
        if mode >= 0.7:
            rng.shuffle(idx)
        for i in idx:
            keep = mode < 0.4 or (mode < 0.7 and rng.random() < 0.5)
            ts = None
            if keep:
                ts = ("abs", times[i]) if prev is None else ("delta", max(0, times[i] - prev))
                prev = times[i]
            before = len(out)
            py_measurement(out, src, dsts[i], rtts[i], ts, rng)
            if len(out) > seq_len:
                del out[before:]
                break
        yield out


def python_tokens(path: str, seconds: float, seq_len: int) -> tuple[float, float]:
    import glob
    reader = probeflow.ArrayRecordReader(glob.glob(path)[0])
    rng = random.Random(0)
    order = list(range(len(reader)))
    rng.shuffle(order)
    real = total = 0
    seq = 0
    start = time.perf_counter()
    pos = 0
    while time.perf_counter() - start < seconds:
        for ctx in py_contexts(reader[order[pos % len(order)]], seq_len, rng):
            if seq + len(ctx) > seq_len:
                total += seq_len
                real += seq
                seq = 0
            seq += len(ctx)
        pos += 1
    elapsed = time.perf_counter() - start
    return real / elapsed, 1 - real / max(total, 1)


# --- a faithful pure-Python port of the same sampler and packer -------------------------
# The Rust sampler's rules (docs/architecture.md, "The sampler"): exact token budgets while
# drawing, partial mode with a drawn drop rate and random interleaving, context splits,
# best-fit-decreasing packing per block of rows, and the six MaxText arrays in numpy.

def _faithful_row(record, seq_len, rng, out_contexts):
    import bisect
    import ipaddress
    table = pa.ipc.open_stream(record).read_all()
    src = ipaddress.ip_address(table.schema.metadata[b"probeflow.src_addr"].decode()).packed
    times = table.column("event_time").to_pylist()
    dsts = table.column("dst_addr").to_pylist()
    codes = table.column("rtt").to_pylist()
    n, width = len(times), len(src)
    base = lambda i: 1 + 2 * (1 + width) + (1 if codes[i] is None else 3)  # noqa: E731
    dtok = lambda a, b: 2 if max(0, b - a) < 256 else 5  # noqa: E731
    small = n < seq_len // 30
    for _ in range(1 if small else min(math.ceil(n / 30), 16)):
        u = rng.random()
        mode = "full" if u < 0.4 else "partial" if u < 0.7 else "none"
        drop = 0.1 + 0.8 * rng.random() if mode == "partial" else (0.0 if mode == "full" else 1.0)
        keep = lambda: mode == "full" or (mode == "partial" and rng.random() >= drop)  # noqa: E731
        if small:
            picks = [(i, keep()) for i in range(n)]
        else:
            w = max(1, min(n, int((n + 1) ** rng.random())))
            off = rng.randrange(n - w + 1)
            picks, timed, ts, total = [], [], 0, 0
            for i in rng.sample(range(off, off + w), min(w, seq_len // 12 + 1)):
                t_i = keep()
                new_ts = ts
                if t_i:
                    at = bisect.bisect_left(timed, i)
                    if not timed:
                        new_ts = 9
                    elif at == 0:
                        new_ts = ts + dtok(times[i], times[timed[0]])
                    elif at == len(timed):
                        new_ts = ts + dtok(times[timed[-1]], times[i])
                    else:
                        a, b = times[timed[at - 1]], times[timed[at]]
                        new_ts = ts + dtok(a, times[i]) + dtok(times[i], b) - dtok(a, b)
                cost = base(i) + new_ts - ts
                if total + cost > seq_len:
                    break
                total += cost
                if t_i:
                    timed.insert(at, i)
                    ts = new_ts
                picks.append((i, t_i))
        picks.sort()
        if mode == "none":
            rng.shuffle(picks)
        elif mode == "partial":
            a = [p for p in picks if p[1]]
            b = [p for p in picks if not p[1]]
            rng.shuffle(b)
            merged = []
            while a or b:
                if rng.randrange(len(a) + len(b)) < len(a):
                    merged.append(a.pop(0))
                else:
                    merged.append(b.pop(0))
            picks = merged
        ctx, prev = [], None
        for i, t_i in picks:
            ts = None
            if t_i:
                ts = ("abs", times[i]) if prev is None else ("delta", max(0, times[i] - prev))
            cost = base(i) + (0 if ts is None else 9 if ts[0] == "abs" else dtok(0, ts[1]))
            if len(ctx) + cost > seq_len:
                out_contexts.append(ctx)
                ctx, prev = [], None
                ts = ("abs", times[i]) if t_i else None
            py_measurement(ctx, src, dsts[i], codes[i], ts, rng)
            if t_i:
                prev = times[i]
        if ctx:
            out_contexts.append(ctx)


def _faithful_pack(contexts, seq_len, rng):
    import bisect
    order = list(range(len(contexts)))
    rng.shuffle(order)
    order.sort(key=lambda c: -len(contexts[c]))
    seqs, rooms = [], []  # rooms: sorted (room, seq)
    for c in order:
        n = len(contexts[c])
        k = bisect.bisect_left(rooms, (n, -1))
        if k < len(rooms):
            room, s = rooms.pop(k)
            seqs[s].append(c)
            room -= n
        else:
            seqs.append([c])
            s, room = len(seqs) - 1, seq_len - n
        if room >= 12:
            bisect.insort(rooms, (room, s))
    rng.shuffle(seqs)
    return seqs


def faithful_python_tokens(path: str, seconds: float, seq_len: int, batch: int = 16) -> tuple[float, float]:
    import glob
    reader = probeflow.ArrayRecordReader(glob.glob(path)[0])
    rng = random.Random(0)
    order = list(range(len(reader)))
    rng.shuffle(order)
    real = total = pos = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        contexts = []
        for r in order[pos % len(order): pos % len(order) + 256]:
            _faithful_row(reader[r], seq_len, rng, contexts)
        pos += 256
        seqs = _faithful_pack(contexts, seq_len, rng)
        for b in range(0, len(seqs), batch):
            arrays = {k: np.zeros((batch, seq_len), np.int32) for k in ("inputs", "inputs_segmentation", "inputs_position")}
            for row, ids in enumerate(seqs[b:b + batch]):
                at = 0
                for seg, c in enumerate(ids):
                    toks = contexts[c]
                    arrays["inputs"][row, at:at + len(toks)] = toks
                    arrays["inputs_segmentation"][row, at:at + len(toks)] = seg + 1
                    arrays["inputs_position"][row, at:at + len(toks)] = np.arange(len(toks))
                    at += len(toks)
            arrays["targets"] = np.pad(arrays["inputs"][:, 1:], ((0, 0), (0, 1)))
            arrays["targets_segmentation"] = np.pad(arrays["inputs_segmentation"][:, 1:], ((0, 0), (0, 1)))
            arrays["targets_position"] = arrays["inputs_position"].copy()
            real += int(np.count_nonzero(arrays["inputs_segmentation"]))
            total += batch * seq_len
            if time.perf_counter() - start >= seconds:
                break
    elapsed = time.perf_counter() - start
    return real / elapsed, 1 - real / max(total, 1)


def rss_anon_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--seq-len", type=int, default=1024)
    a = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    with tempfile.TemporaryDirectory() as d:
        print(f"{a.rows} rows, seq_len {a.seq_len}, one core, {a.seconds:.0f} s per run")
        print(f"{'':44} {'tokens/s':>12} {'padding':>8}")
        results = {}
        for options in ("group_size:1,uncompressed", "group_size:1,zstd:3"):
            sub = os.path.join(d, options.split(",")[1].replace(":", ""))
            os.makedirs(sub)
            path = make_shards(sub, a.rows, options)
            tps, pad = rust_tokens(path, a.seconds, a.seq_len)
            results[options] = tps
            print(f"probeflow.Dataset, {options:26} {tps:12,.0f} {pad:8.2%}")
        mem = rss_anon_mb()
        tps_py, pad_py = python_tokens(path, a.seconds, a.seq_len)
        print(f"pure Python, lean sampler, {'group_size:1,zstd:3':18} {tps_py:12,.0f} {pad_py:8.2%}")
        tps_f, pad_f = faithful_python_tokens(path, a.seconds, a.seq_len)
        print(f"pure Python, same sampler + packing, {'zstd:3':8} {tps_f:12,.0f} {pad_f:8.2%}")
        for options, tps in results.items():
            print(f"ratio Rust ({options}) / lean pure Python: {tps / tps_py:,.0f}x, "
                  f"/ faithful pure Python: {tps / tps_f:,.0f}x")
        print(f"RssAnon after the Rust runs: {mem:.0f} MB")


if __name__ == "__main__":
    main()
