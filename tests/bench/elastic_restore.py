"""Benchmark (not a test): the cost of an elastic resume, Dataset.set_states.

W ranks each read one batch of a 20 000-row split (so every rank stops mid-block), then
new ranks of W' restore from all W states. Prints, per (W, W'), the median time of
set_states alone (the Dataset opened beforehand), of the first batch after it (which
rebuilds the pending blocks dealt to that rank) and the size of the restored state.

    .venv/bin/python tests/bench/elastic_restore.py
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time

import probeflow


def main() -> None:
    d = tempfile.mkdtemp()
    rng = random.Random(1)
    with probeflow.ArrayRecordWriter(f"{d}/shard-00000.array_record", "group_size:1,uncompressed") as w:
        for r in range(20_000):
            src = f"11.{r // 65536}.{r // 256 % 256}.{r % 256}"
            times = sorted(1_650_000_000 + rng.randrange(10**6) for _ in range(20))
            for row in probeflow.build_rows(src, times, ["192.0.2.1"] * 20, [1.0] * 20):
                w.write(row)
    path = f"{d}/shard-*.array_record"

    def dataset(index: int, count: int) -> probeflow.Dataset:
        return probeflow.Dataset(path, seq_len=256, batch_size=2, shard_index=index, shard_count=count,
                                 prefetch=0, num_threads=1, block_rows=8)

    print(f"{'W':>5} {'W_new':>6} {'set_states ms':>14} {'first batch ms':>15} {'state bytes':>12}")
    for old, new in [(16, 8), (64, 48), (256, 200), (1024, 600), (600, 1024)]:
        states = []
        for r in range(old):
            ds = dataset(r, old)
            next(ds)
            states.append(ds.get_state())
            ds.close()
        restore, first, size = [], [], 0
        for r in range(0, new, max(1, new // 20)):
            ds = dataset(r, new)
            t = time.perf_counter()
            ds.set_states(states)
            restore.append(time.perf_counter() - t)
            size = max(size, len(json.dumps(ds.get_state())))
            t = time.perf_counter()
            next(ds)
            first.append(time.perf_counter() - t)
            ds.close()
        print(f"{old:>5} {new:>6} {1000 * statistics.median(restore):>14.2f} "
              f"{1000 * statistics.median(first):>15.2f} {size:>12}")


if __name__ == "__main__":
    main()
