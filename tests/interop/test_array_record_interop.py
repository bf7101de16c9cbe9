"""probeflow's ArrayRecord files against Google's ``array_record`` package, both ways."""

from __future__ import annotations

import numpy as np
import pytest
from array_record.python import array_record_data_source as ar_ds
from array_record.python import array_record_module as ar

import probeflow

COMPRESSIONS = ["uncompressed", "zstd:3", "zstd:1,window_log:18", "brotli:5", "snappy"]
MiB = 1 << 20


def varied_records(rng: np.random.Generator) -> list[bytes]:
    """Records from 0 bytes to 8 MiB, incompressible, crossing many 64 KiB blocks."""
    sizes = [0, 1, 2, 100, 65_535, 65_536, 65_537, 300_000, MiB, 0, 8 * MiB, 7]
    return [rng.integers(0, 256, size=s, dtype=np.uint8).tobytes() for s in sizes]


def many_records(n: int) -> list[bytes]:
    return [b"%d:" % i + bytes([i % 251]) * (i % 37) for i in range(n)]


def write_rust(path, options: str, records: list[bytes]) -> dict:
    with probeflow.ArrayRecordWriter(path, options) as w:
        for r in records:
            w.write(r)
    return w.close()


def read_google(path) -> list[bytes]:
    reader = ar.ArrayRecordReader(str(path))
    try:
        n = reader.num_records()
        return reader.read_all() if n else []
    finally:
        reader.close()


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("group_size", [1, 8])
@pytest.mark.parametrize("count", ["zero", "one", "varied", "100k"])
def test_google_reads_what_rust_writes(tmp_path, rng, compression, group_size, count):
    records = {
        "zero": [],
        "one": [b"only record"],
        "varied": varied_records(rng),
        "100k": many_records(100_000),
    }[count]
    path = tmp_path / "rust.array_record"
    options = f"group_size:{group_size},{compression}"
    summary = write_rust(path, options, records)
    assert summary["records"] == len(records)
    assert summary["bytes"] == path.stat().st_size

    reader = ar.ArrayRecordReader(str(path))
    assert reader.num_records() == len(records)
    written = reader.writer_options_string()
    assert written.startswith(f"group_size:{group_size},transpose:false,")
    if records:
        assert reader.read_all() == records
        picks = rng.integers(0, len(records), size=min(200, len(records))).tolist()
        assert reader.read(picks) == [records[i] for i in picks]
    reader.close()

    # Grain's data source (it logs that group sizes other than 1 are slow, and reads them).
    ds = ar_ds.ArrayRecordDataSource([str(path)])
    assert len(ds) == len(records)
    if records:
        idx = sorted({0, len(records) - 1, len(records) // 2})
        assert [ds[i] for i in idx] == [records[i] for i in idx]
        assert ds.__getitems__(idx) == [records[i] for i in idx]


OPTIONS_PY = [
    "",
    "group_size:1",
    "group_size:10,brotli:5",
    "snappy",
    "group_size:1,uncompressed",
    "zstd:9,window_log:24",
    "group_size:3,pad_to_block_boundary:true",
    "group_size:1000,zstd:1",
]


@pytest.mark.parametrize("options", OPTIONS_PY)
def test_rust_reads_what_google_writes(tmp_path, rng, options):
    records = varied_records(rng)[:10] + many_records(2_000)
    path = tmp_path / "google.array_record"
    w = ar.ArrayRecordWriter(str(path), options)
    for r in records:
        w.write(r)
    w.close()
    with probeflow.ArrayRecordReader(path) as r:
        assert len(r) == len(records)
        assert list(r) == records
        picks = rng.integers(0, len(records), size=300).tolist()
        assert r.read(picks) == [records[i] for i in picks]
        assert r[-1] == records[-1]
        google_options = ar.ArrayRecordReader(str(path)).writer_options_string()
        assert r.writer_options == google_options


@pytest.mark.parametrize(
    "options",
    ["uncompressed", "group_size:7,uncompressed", "group_size:1,uncompressed,pad_to_block_boundary:true"],
)
@pytest.mark.parametrize("n", [0, 1, 1000])
def test_uncompressed_files_are_byte_identical_to_the_cpp_writer(tmp_path, rng, options, n):
    records = many_records(n)
    if n == 1000:
        records[500] = rng.integers(0, 256, size=8 * MiB, dtype=np.uint8).tobytes()
    ours, theirs = tmp_path / "ours.ar", tmp_path / "theirs.ar"
    write_rust(ours, options, records)
    w = ar.ArrayRecordWriter(str(theirs), options)
    for r in records:
        w.write(r)
    w.close()
    assert ours.read_bytes() == theirs.read_bytes()


def test_transposed_files_are_refused_clearly(tmp_path):
    path = tmp_path / "transposed.array_record"
    w = ar.ArrayRecordWriter(str(path), "transpose")
    for r in many_records(10):
        w.write(r)
    w.close()
    with probeflow.ArrayRecordReader(path) as r:
        with pytest.raises(probeflow.FormatError, match="transposed") as info:
            r[0]
        assert "transposed.array_record" in str(info.value)


def test_rust_writer_is_deterministic(tmp_path, rng):
    records = varied_records(rng)
    for compression in COMPRESSIONS:
        a, b = tmp_path / "a.ar", tmp_path / "b.ar"
        write_rust(a, compression, records)
        write_rust(b, compression, records)
        assert a.read_bytes() == b.read_bytes(), compression
