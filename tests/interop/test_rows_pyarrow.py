"""Rows written by the Rust codec, read by pyarrow (and the other way round)."""

from __future__ import annotations

import ipaddress

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pytest
from array_record.python import array_record_module as ar

import probeflow

EXPECTED_KEYS = {
    "probeflow.format",
    "probeflow.src_addr",
    "probeflow.src_id",
    "probeflow.ip_version",
    "probeflow.part",
    "probeflow.first_time",
    "probeflow.last_time",
    "probeflow.n_measurements",
}


def measurements(rng, n, v6=False):
    times = np.sort(rng.integers(1_700_000_000, 1_702_419_200, size=n)).tolist()
    if v6:
        dst = [str(ipaddress.IPv6Address(0x20010DB8 << 96 | int(x))) for x in rng.integers(0, 2**32, size=n)]
    else:
        dst = [str(ipaddress.IPv4Address(int(x))) for x in rng.integers(2**24, 2**32 - 1, size=n)]
    rtt = [None if i % 9 == 0 else float(x) for i, x in enumerate(rng.gamma(2.0, 30.0, size=n))]
    return times, dst, rtt


def read_stream(record: bytes) -> pa.Table:
    return pa.ipc.open_stream(record).read_all()


@pytest.mark.parametrize("v6", [False, True])
def test_pyarrow_reads_rust_rows_exactly(rng, v6):
    src = "2001:db8::abcd" if v6 else "192.0.2.55"
    times, dst, rtt = measurements(rng, 5_000, v6)
    record = probeflow.encode_row(src, times, dst, rtt, part=2)
    table = read_stream(record)
    width = 16 if v6 else 4
    assert table.schema.field("event_time").type == pa.uint64()
    assert table.schema.field("dst_addr").type == pa.binary(width)
    assert table.schema.field("rtt").type == pa.uint16()
    assert table.schema.field("rtt").nullable
    assert table.num_rows == len(times)
    assert table.column("event_time").to_pylist() == times
    ip = ipaddress.IPv6Address if v6 else ipaddress.IPv4Address
    assert [str(ip(b)) for b in table.column("dst_addr").to_pylist()] == dst
    codes = table.column("rtt").to_pylist()
    assert codes == [None if r is None else probeflow.rtt_encode(r) for r in rtt]
    assert table.column("rtt").null_count == sum(r is None for r in rtt)

    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert set(meta) == EXPECTED_KEYS
    assert meta["probeflow.format"] == "1"
    assert meta["probeflow.src_addr"] == src
    assert meta["probeflow.src_id"] == str(probeflow.src_id(src))
    assert meta["probeflow.ip_version"] == ("6" if v6 else "4")
    assert meta["probeflow.part"] == "2"
    assert meta["probeflow.first_time"] == str(times[0])
    assert meta["probeflow.last_time"] == str(times[-1])
    assert meta["probeflow.n_measurements"] == str(len(times))


def test_rows_split_at_the_cap_and_read_back_whole(rng):
    times, dst, rtt = measurements(rng, 20_000)
    rows = probeflow.build_rows("192.0.2.1", times, dst, rtt, max_row_bytes=64 * 1024)
    assert len(rows) > 3
    parts, got_times = [], []
    for row in rows:
        assert len(row) <= 64 * 1024
        table = read_stream(row)
        parts.append(int(table.schema.metadata[b"probeflow.part"]))
        got_times += table.column("event_time").to_pylist()
    assert parts == list(range(len(rows)))
    assert got_times == times


def test_rows_in_shards_read_by_google_then_pyarrow(tmp_path, rng):
    path = tmp_path / "shard-00000-of-00001.array_record"
    expected = {}
    with probeflow.ArrayRecordWriter(path) as w:
        for k in range(20):
            src = f"198.51.100.{k}"
            times, dst, rtt = measurements(rng, 100 + 50 * k)
            w.write(probeflow.encode_row(src, times, dst, rtt))
            expected[src] = times
    reader = ar.ArrayRecordReader(str(path))
    for record in reader.read_all():
        table = read_stream(record)
        src = table.schema.metadata[b"probeflow.src_addr"].decode()
        assert table.column("event_time").to_pylist() == expected.pop(src)
    assert not expected


def test_rows_written_by_pyarrow_decode_in_rust():
    times = [10, 20, 30]
    dst = [ipaddress.IPv4Address("10.0.0.1").packed, ipaddress.IPv4Address("10.0.0.2").packed, b"\x0a\x00\x00\x03"]
    rtt = pa.array([probeflow.rtt_encode(5.0), None, probeflow.rtt_encode(0.25)], pa.uint16())
    src = "192.0.2.9"
    meta = {
        "probeflow.format": "1",
        "probeflow.src_addr": src,
        "probeflow.src_id": str(probeflow.src_id(src)),
        "probeflow.ip_version": "4",
        "probeflow.part": "0",
        "probeflow.first_time": "10",
        "probeflow.last_time": "30",
        "probeflow.n_measurements": "3",
    }
    schema = pa.schema(
        [
            pa.field("event_time", pa.uint64(), nullable=False),
            pa.field("dst_addr", pa.binary(4), nullable=False),
            pa.field("rtt", pa.uint16()),
        ],
        metadata=meta,
    )
    table = pa.table([pa.array(times, pa.uint64()), pa.array(dst, pa.binary(4)), rtt], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(table)
    row = probeflow.decode_row(sink.getvalue().to_pybytes())
    assert row["src_addr"] == src
    assert row["event_time"].tolist() == times
    assert row["dst_addr"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert row["failed"].tolist() == [False, True, False]
    assert row["rtt_ms"][0] == pytest.approx(5.0, rel=1e-3)
