"""The Python API of probeflow: behaviour, errors and the documented formulas."""

from __future__ import annotations

import math

import blake3
import numpy as np
import pytest

import probeflow
from probeflow import errors


def u64_le(digest: bytes) -> int:
    return int.from_bytes(digest[:8], "little")


def test_partition_and_src_id_are_computable_from_python():
    for addr in ["192.0.2.1", "10.255.0.7", "2001:db8::1", "2a00:1450:4001:80b::200e"]:
        expected = u64_le(blake3.blake3(addr.encode()).digest())
        assert probeflow.src_id(addr) == expected
        for shards in [1, 7, 64, 1024]:
            assert probeflow.partition(addr, shards) == expected % shards


def test_split_is_computable_from_python():
    seed, fraction = 17, 0.1
    tests = 0
    for i in range(5000):
        addr = f"10.{i // 256 % 256}.{i % 256}.1"
        bucket = u64_le(blake3.blake3(seed.to_bytes(8, "little") + addr.encode()).digest()) % 1_000_000
        expected = "test" if bucket < fraction * 1_000_000 else "train"
        assert probeflow.split_of(addr, seed, fraction) == expected
        tests += expected == "test"
    assert 400 < tests < 600


def test_three_way_split_is_computable_from_python():
    """The published rule: one bucket per probe; test below test_fraction, val below
    test_fraction + val_fraction, train above. Test membership does not depend on
    val_fraction, and val_fraction = 0 is the two-way split."""
    seed, test_fraction, val_fraction = 17, 0.1, 0.15
    counts = {"train": 0, "val": 0, "test": 0}
    for i in range(5000):
        addr = f"10.{i // 256 % 256}.{i % 256}.1" if i % 3 else f"2001:db8::{i:x}"
        bucket = u64_le(blake3.blake3(seed.to_bytes(8, "little") + addr.encode()).digest()) % 1_000_000
        if bucket < test_fraction * 1_000_000:
            expected = "test"
        elif bucket < (test_fraction + val_fraction) * 1_000_000:
            expected = "val"
        else:
            expected = "train"
        assert probeflow.split_of(addr, seed, test_fraction, val_fraction) == expected, addr
        counts[expected] += 1
        two_way = probeflow.split_of(addr, seed, test_fraction, 0.0)
        assert two_way == probeflow.split_of(addr, seed, test_fraction)
        assert two_way == ("test" if expected == "test" else "train")
    assert 400 < counts["test"] < 600 and 600 < counts["val"] < 900, counts
    for bad in [(-0.1, 0.1), (0.5, 0.6), (0.1, float("nan")), (0.1, 1.5)]:
        with pytest.raises(probeflow.InvalidInputError, match="fraction"):
            probeflow.split_of("192.0.2.1", seed, *bad)


def test_addresses_are_canonicalised():
    assert probeflow.canonical_addr("2001:DB8:0::1") == "2001:db8::1"
    assert probeflow.canonical_addr("::ffff:192.0.2.1") == "192.0.2.1"
    assert probeflow.partition("::ffff:192.0.2.1", 64) == probeflow.partition("192.0.2.1", 64)
    for bad in ["", " 192.0.2.1", "192.0.2", "fe80::1%eth0"]:
        with pytest.raises(probeflow.InvalidInputError, match="address"):
            probeflow.canonical_addr(bad)


def test_rtt_code_edges():
    assert probeflow.rtt_decode_us(probeflow.rtt_encode(0.0)) == 1
    assert probeflow.rtt_encode(-1.0) is None
    assert probeflow.rtt_decode_us(probeflow.rtt_encode(2.047)) == 2047
    code = probeflow.rtt_encode(150.0)
    assert code >> 11 == 7 and code & 0x7FF == 1171
    assert probeflow.rtt_encode(math.inf) == (31 << 11) | 2047
    with pytest.raises(probeflow.InvalidInputError, match="NaN"):
        probeflow.rtt_encode(math.nan)
    with pytest.raises(ValueError):
        probeflow.rtt_encode(math.nan)


def test_reader_and_writer_lifecycle(tmp_path):
    path = tmp_path / "x.array_record"
    with probeflow.ArrayRecordWriter(path) as w:
        for i in range(5):
            w.write(b"record %d" % i)
        assert "open" in repr(w)
    assert w.close() == {"records": 5, "chunks": 5, "bytes": path.stat().st_size}
    with pytest.raises(ValueError, match="closed"):
        w.write(b"late")

    r = probeflow.ArrayRecordReader(path)
    assert repr(r) == f'ArrayRecordReader("{path}", records=5, group_size=1)'
    assert len(r) == 5 and r[0] == b"record 0" and r[-1] == b"record 4"
    assert r.read_range(1, 3) == [b"record 1", b"record 2"]
    assert r.read([4, 0, 4]) == [b"record 4", b"record 0", b"record 4"]
    with pytest.raises(IndexError):
        r[5]
    with pytest.raises(IndexError):
        r.read([0, -6])
    r.close()
    with pytest.raises(ValueError, match="closed"):
        len(r)


def test_errors_name_the_file_and_map_to_the_hierarchy(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.array_record"):
        probeflow.ArrayRecordReader(tmp_path / "missing.array_record")
    junk = tmp_path / "junk.array_record"
    junk.write_bytes(b"\x00" * 200_000)
    with pytest.raises(probeflow.FormatError, match="junk.array_record") as info:
        probeflow.ArrayRecordReader(junk)
    assert isinstance(info.value, errors.ProbeflowError)
    with pytest.raises(probeflow.OptionsError, match="group_size:0"):
        probeflow.ArrayRecordWriter(tmp_path / "y", "group_size:0")
    assert issubclass(probeflow.OptionsError, ValueError)


def test_corrupt_shard_raises_format_error_naming_the_chunk(tmp_path):
    path = tmp_path / "bad.array_record"
    with probeflow.ArrayRecordWriter(path, "uncompressed") as w:
        for i in range(3):
            w.write(bytes([i]) * 1000)
    data = bytearray(path.read_bytes())
    data[64 + 40 + 500] ^= 0xFF  # inside chunk 0's data
    path.write_bytes(bytes(data))
    r = probeflow.ArrayRecordReader(path)
    assert r[1] == bytes([1]) * 1000
    with pytest.raises(probeflow.FormatError, match=r"bad.array_record: chunk 0 at offset 64: bad chunk data hash"):
        r[0]


def test_decode_row_gives_numpy_columns():
    row = probeflow.encode_row("192.0.2.1", [5, 6, 7], ["10.0.0.1", "10.0.0.2", "10.0.0.3"], [1.0, -3.0, None])
    d = probeflow.decode_row(row)
    assert d["event_time"].dtype == np.uint64
    assert d["rtt_code"].dtype == np.uint16
    assert d["failed"].tolist() == [False, True, True]
    assert np.isnan(d["rtt_ms"][1])
    with pytest.raises(probeflow.FormatError):
        probeflow.decode_row(row[: len(row) // 2])
    with pytest.raises(probeflow.FormatError):
        probeflow.decode_row(b"not arrow at all")


def test_row_input_errors():
    with pytest.raises(probeflow.InvalidInputError, match="same length"):
        probeflow.encode_row("192.0.2.1", [1, 2], ["10.0.0.1"], [1.0, 2.0])
    with pytest.raises(probeflow.InvalidInputError, match="before the previous"):
        probeflow.encode_row("192.0.2.1", [2, 1], ["10.0.0.1", "10.0.0.1"], [1.0, 2.0])
    with pytest.raises(probeflow.InvalidInputError, match="IPv6 in an IPv4 row"):
        probeflow.encode_row("192.0.2.1", [1], ["2001:db8::1"], [1.0])
    with pytest.raises(probeflow.InvalidInputError, match="too small"):
        probeflow.build_rows("192.0.2.1", [1], ["10.0.0.1"], [1.0], max_row_bytes=64)


def test_the_reader_defaults_are_defined_once_in_rust_and_documented_as_they_are():
    """``READER_DEFAULTS`` comes from the Rust reader; ``Dataset``'s signature and
    MaxText's ``network_*`` keys read it, and docs/maxtext.md states the same values."""
    import dataclasses
    import inspect
    import os
    import pathlib
    import re

    from probeflow.maxtext_input import NetworkOptions

    d = probeflow.READER_DEFAULTS
    assert d["seq_len"] == 1024 and d["strategy"] == "window" and d["timestamp_modes"] == (0.4, 0.3, 0.3)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert d["num_threads"] == max(1, min(4, cpus))
    with pytest.raises(TypeError):
        d["seed"] = 3  # read-only
    signature = inspect.signature(probeflow.Dataset.__init__).parameters
    for name, value in d.items():
        if name != "num_threads":
            assert signature[name].default == value, name
    fields = {f.name: f.default for f in dataclasses.fields(NetworkOptions)}
    shared = set(fields) & set(d)
    assert shared >= {"seed", "prefetch", "block_rows", "contexts_per_row", "strategy", "partial_drop"}
    # None there: the reader default (num_threads) or MaxText's own setting (packing).
    for name in shared - {"num_threads", "packing"}:
        assert fields[name] == d[name], name

    doc = (pathlib.Path(__file__).parents[2] / "docs" / "maxtext.md").read_text()
    documented = dict(re.findall(r"^\| `network_(\w+)` \| ([^|]+?) \|", doc, re.M))
    for name in ["seed", "prefetch", "block_rows"]:
        assert documented[name] == str(d[name]), (name, documented[name])
    assert documented["num_threads"] == "up to 4"


def test_the_exception_classes_are_the_extensions_and_keep_their_kinds():
    """The classes are declared by the Rust extension (``probeflow.errors`` re-exports
    them), with their documented bases, and pickle by their public name."""
    import pickle

    from probeflow import _native

    for name in errors.__all__:
        assert getattr(errors, name) is getattr(_native, name), name
        assert getattr(errors, name).__module__ == "probeflow.errors"
        assert getattr(probeflow, name) is getattr(errors, name)
    assert issubclass(errors.StateError, errors.InvalidInputError)
    assert issubclass(errors.StateError, ValueError)
    assert issubclass(errors.InternalError, RuntimeError) and issubclass(errors.InternalError, errors.ProbeflowError)
    assert issubclass(errors.RemoteError, OSError)
    assert errors.StateError.__doc__.startswith("An iterator state")
    e = pickle.loads(pickle.dumps(errors.OutputError("no _SUCCESS")))
    assert type(e) is errors.OutputError and str(e) == "no _SUCCESS"
    with pytest.raises(errors.OptionsError, match="invalid ArrayRecord options"):
        probeflow.ArrayRecordWriter("/tmp/never.array_record", "group_size:zero")


def test_the_stubs_match_the_extension():
    """``_native.pyi`` is checked against the built extension (mypy's stubtest):
    every class, function, parameter and default as the runtime has them."""
    import pathlib
    import subprocess
    import sys

    allowlist = pathlib.Path(__file__).parents[1] / "stubtest-allowlist.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "probeflow._native", "--allowlist", str(allowlist)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
