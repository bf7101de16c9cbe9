"""A worker's memory holds to its setting: peak resident memory at most
1.25 × `memory_per_worker` + 100 MB (the process itself: code, runtime, one map's
decoded batches), here at the smallest setting, 64 MiB, where what the setting does not
cover weighs most.

The input is at RIPE Atlas's shape in small: few sources, one with a history past one
8 MiB row (the row builder, the encoded row, the shard writer's group and its
compressed chunk each hold up to `max_row_bytes` of it), both address families, and
half the sources in the test split (both shard writers see long histories) and
two shards so that each reduce's partition is larger than its sort's memory (its sort
spills and merges). The coordinator runs its worker in-process in local mode: its peak
is the worker's, measured in a fresh process."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from support.outputs import coordinator_peak_mib
from support.run import run

ROWS = 4_000_000
# Six histories past one 8 MiB row (a measurement takes ~20 bytes of a row).
LONGEST = (450_000,) * 6
MEMORY_MIB = 64
# 1.25 × the setting, plus 100 MB of fixed overhead (docs/job.md, "Memory").
BOUND_MIB = int(1.25 * MEMORY_MIB + 100e6 / 2**20)


def atlas_like(path, rows: int, longest: tuple[int, ...], seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    sources = 3_000
    names = [f"11.{i // 250}.{i % 250}.1" if i % 3 else f"2001:db8:{i:x}::1" for i in range(sources)]
    src = np.concatenate([np.full(n, i, dtype=np.int32) for i, n in enumerate(longest)]
                         + [rng.integers(len(longest), sources, rows - sum(longest), dtype=np.int32)])
    rng.shuffle(src)
    six = (src % 3) == 0
    anchors = np.where(six, 40, 0) + rng.integers(0, 40, rows, dtype=np.int32)
    targets = [f"193.0.{i}.1" for i in range(40)] + [f"2001:67c:{i:x}::1" for i in range(40)]
    files = 4
    for f, part in enumerate(np.array_split(np.arange(rows), files)):
        table = pa.table({
            "src_addr": pa.DictionaryArray.from_arrays(pa.array(src[part]), pa.array(names))
            .cast(pa.string()),
            "dst_addr": pa.DictionaryArray.from_arrays(pa.array(anchors[part]), pa.array(targets))
            .cast(pa.string()),
            "ip_version": pa.array(np.where(six[part], 6, 4).astype(np.int32)),
            "rtt": pa.array(np.round(rng.lognormal(np.log(40.0), 0.5, len(part)), 3)),
            "event_time": pa.array(1_767_300_000 + part.astype(np.int64) * 2),
        })
        pq.write_table(table, path / f"part-{f}.parquet", row_group_size=131_072)


def job_file(tmp_path, memory_mib: int, output: str = "", sections: str = ""):
    """The job file of these tests: the Parquet files under `tmp_path/in`, two shards,
    one local worker of `memory_mib`; `output`: more `[output]` keys, `sections`: more
    sections."""
    spec = tmp_path / "job.toml"
    spec.write_text(f"""
[input]
url = "{tmp_path}/in/*.parquet"
[output]
url = "{tmp_path}/out"
shards = 2
{output}{sections}[run]
mode = "local"
workers = 1
memory_per_worker = "{memory_mib}MiB"
scratch = "{tmp_path}/scratch"
""")
    return spec


def peak_and_manifest(tmp_path, spec):
    """Runs the job in a fresh process: its peak RSS (MiB) and its manifest."""
    peak_mib = coordinator_peak_mib("run", str(spec))
    print(f"peak RSS {peak_mib} MiB (bound {BOUND_MIB} MiB)")
    return peak_mib, json.loads((tmp_path / "out" / "manifest.json").read_text())


def test_a_worker_stays_within_its_memory_setting_at_atlas_shape(tmp_path):
    (tmp_path / "in").mkdir()
    atlas_like(tmp_path / "in", ROWS, LONGEST)
    spec = job_file(tmp_path, MEMORY_MIB, sections="[split]\ntest_fraction = 0.5\n")
    peak_mib, manifest = peak_and_manifest(tmp_path, spec)
    assert manifest["totals"]["kept_measurements"] == ROWS
    # The longest history was split into rows of at most 8 MiB: the row path was exercised.
    assert manifest["totals"]["rows"] > manifest["totals"]["sources"], manifest["totals"]
    assert peak_mib <= BOUND_MIB, f"peak RSS {peak_mib} MiB > {BOUND_MIB} MiB"


def test_a_worker_stays_within_its_memory_setting_with_a_million_sources(tmp_path):
    """The other shape: very many sources with short histories (800 000 IPv6 sources of
    two measurements each). A worker keeps the addresses it parsed from one map task to
    the next; at most a quarter of its setting of them."""
    rows, sources = 1_600_000, 800_000
    rng = np.random.default_rng(11)
    names = pa.array([f"2001:db8:{i >> 16:x}:{i & 0xFFFF:x}::1" for i in range(sources)])
    src = np.repeat(np.arange(sources, dtype=np.int32), 2)
    rng.shuffle(src)
    (tmp_path / "in").mkdir()
    for f, part in enumerate(np.array_split(np.arange(rows), 4)):
        pq.write_table(pa.table({
            "src_addr": pa.DictionaryArray.from_arrays(pa.array(src[part]), names).cast(pa.string()),
            "dst_addr": pa.array(["2001:67c:2e8::1"] * len(part)),
            "ip_version": pa.array(np.full(len(part), 6, dtype=np.int32)),
            "rtt": pa.array(np.round(rng.lognormal(np.log(40.0), 0.5, len(part)), 3)),
            "event_time": pa.array(1_767_300_000 + part.astype(np.int64)),
        }), tmp_path / "in" / f"part-{f}.parquet", row_group_size=131_072)
    spec = job_file(tmp_path, MEMORY_MIB)
    peak_mib, manifest = peak_and_manifest(tmp_path, spec)
    assert manifest["totals"]["kept_measurements"] == rows
    assert manifest["totals"]["sources"] == sources
    assert peak_mib <= BOUND_MIB, f"peak RSS {peak_mib} MiB > {BOUND_MIB} MiB"


def test_rows_too_large_for_the_memory_are_refused_before_the_job_starts(tmp_path):
    """A reduce holds 4 copies of a row beside its sort: 16 MiB rows leave a 64 MiB
    worker's sort nothing. The job is refused at once (exit 2), naming both settings
    and the least memory that fits; with that memory it runs."""
    (tmp_path / "in").mkdir()
    atlas_like(tmp_path / "in", 50_000, (1_000,))
    spec = job_file(tmp_path, 64, output=f"max_row_bytes = {16 << 20}\n")
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 2, proc.stderr
    assert "memory_per_worker 64.0 MiB is too small for [output] max_row_bytes 16.0 MiB" in proc.stderr
    least = re.search(r"at least (\d+)MiB", proc.stderr)
    assert least, proc.stderr
    # The memory it names is enough.
    spec.write_text(spec.read_text().replace('"64MiB"', f'"{least.group(1)}MiB"'))
    run(["run", str(spec)])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["totals"]["kept_measurements"] == 50_000
