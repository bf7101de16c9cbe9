"""Map memory follows the settings, not the input's row groups: one Parquet file with a
single 8M-row row group, `memory_per_worker = "256MiB"`, one worker, and the job's peak
resident memory measured (the coordinator runs the workers in-process in local mode)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


from support.outputs import coordinator_peak_mib

ROWS = 8_000_000
MEMORY_MIB = 256
# memory_per_worker, plus the process itself: runtime, decoded batches, one upload part.
# (With glibc's default arenas, kept heaps made it 354–422 MiB, reduce after reduce
# growing past the last; engine/src/allocator.rs.)
BOUND_MIB = MEMORY_MIB + 96


def test_one_8m_row_group_stays_within_memory_per_worker(tmp_path):
    rng = np.random.default_rng(5)
    sources = pa.array([f"11.{i // 250}.{i % 250}.1" for i in range(20_000)])
    targets = pa.array([f"192.0.2.{i}" for i in range(200)])
    table = pa.table({
        "src_addr": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 20_000, ROWS, dtype=np.int32)), sources).cast(pa.string()),
        "dst_addr": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 200, ROWS, dtype=np.int32)), targets).cast(pa.string()),
        "ip_version": pa.array(np.full(ROWS, 4, dtype=np.int32)),
        "rtt": pa.array(rng.uniform(0.5, 300.0, ROWS)),
        "event_time": pa.array(1_767_300_000 + rng.integers(0, 86_400 * 30, ROWS)),
    })
    pq.write_table(table, tmp_path / "one.parquet", row_group_size=ROWS, write_page_index=True)
    del table
    assert pq.read_metadata(tmp_path / "one.parquet").num_row_groups == 1
    spec = tmp_path / "job.toml"
    spec.write_text(f"""
[input]
url = "{tmp_path}/one.parquet"
[output]
url = "{tmp_path}/out"
shards = 4
[split]
test_fraction = 0.1
seed = 17
[run]
mode = "local"
workers = 1
memory_per_worker = "{MEMORY_MIB}MiB"
scratch = "{tmp_path}/scratch"
""")
    peak_mib = coordinator_peak_mib("run", str(spec))
    print(f"peak RSS {peak_mib} MiB (bound {BOUND_MIB} MiB)")
    assert peak_mib <= BOUND_MIB, f"peak RSS {peak_mib} MiB > {BOUND_MIB} MiB"
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["totals"]["kept_measurements"] == ROWS
    maps = json.loads((tmp_path / "out" / "_job" / "journal" / "job.json").read_text())["plan"]["maps"]
    assert len(maps) > 1 and all(m["rows"] <= 268_435 for m in maps), [m["rows"] for m in maps]
    assert sum(m["rows"] for m in maps) == ROWS
