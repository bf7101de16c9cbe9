"""Side-by-side random-read throughput: Rust reader vs Google's array_record reader.

Run through ``bench/run``, which first runs the Rust benchmark
(``cargo bench -p probeflow-reader --bench read_throughput``) to write the shard files
and its native figures to ``DIR/rust.json``. This script then reads the *same files*
in the *same random order* from Python with

* ``probeflow.ArrayRecordReader.read(indices)`` (Rust, GIL released, one thread),
* ``array_record``'s ``ArrayRecordReader.read(indices)`` (C++, ``max_parallelism:1``),
* and per-record calls (``reader[i]`` vs ``reader.read([i])``),

and prints one table with ratios, plus row decoding in measurements/s (Rust native,
and pyarrow's ``open_stream(...).read_all()`` for reference).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc
from array_record.python import array_record_module as ar

import probeflow


def best_of(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(directory: str) -> None:
    d = Path(directory)
    rust = json.loads((d / "rust.json").read_text())
    files = [k for k in rust if isinstance(rust[k], dict)]
    print(f"{'file':<20} {'reader':<34} {'records/s':>12} {'MB/s':>9} {'vs google':>10}")
    for name in files:
        path = rust[name]["path"]
        n = rust[name]["records"]
        indices = np.random.default_rng(42).permutation(n).tolist()
        ours = probeflow.ArrayRecordReader(path)
        google = ar.ArrayRecordReader(path, "readahead_buffer_size:0,max_parallelism:1")
        nbytes = sum(len(r) for r in ours.read(indices[:1000])) * n / min(n, 1000)

        batch = indices if n <= 5000 else indices[:20000]
        single = indices[:2000]
        t_ours_batch = best_of(lambda: ours.read(batch))
        t_google_batch = best_of(lambda: google.read(batch))
        t_ours_single = best_of(lambda: [ours[i] for i in single])
        t_google_single = best_of(lambda: [google.read([i]) for i in single])
        mean = nbytes / n
        rows = [
            ("rust native (cargo bench)", rust[name]["records_per_s"], None),
            ("probeflow .read(indices)", len(batch) / t_ours_batch, len(batch) / t_google_batch),
            ("array_record .read(indices)", len(batch) / t_google_batch, None),
            ("probeflow reader[i]", len(single) / t_ours_single, len(single) / t_google_single),
            ("array_record .read([i])", len(single) / t_google_single, None),
        ]
        for label, rps, google_rps in rows:
            ratio = f"{rps / google_rps:>9.2f}x" if google_rps else ""
            print(f"{name:<20} {label:<34} {rps:>12.0f} {rps * mean / 1e6:>9.0f} {ratio:>10}")
        google.close()
        ours.close()
        print()

    rows_file = rust["rows_uncompressed"]["path"]
    with probeflow.ArrayRecordReader(rows_file) as r:
        records = r.read(list(range(min(len(r), 1000))))
    n_meas = 0

    def decode_pyarrow():
        nonlocal n_meas
        n_meas = 0
        for rec in records:
            t = pa.ipc.open_stream(rec).read_all()
            n_meas += t.num_rows

    t_pa = best_of(decode_pyarrow)
    print(f"row decode, rust native view only (decode_row):      {rust['decode_rows_per_s']:10.0f} rows/s")
    print(f"row decode, pyarrow open_stream().read_all():        {len(records) / t_pa:10.0f} rows/s (no field reads)")
    print(f"row decode, rust native (decode_row + every field): {rust['decode_measurements_per_s'] / 1e6:10.1f} M measurements/s")
    print(f"row decode, pyarrow open_stream().read_all():        {n_meas / t_pa / 1e6:10.1f} M measurements/s (no field reads)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/bench-data")
