"""Writes the seed inputs of every fuzz target into fuzz/seeds/<target>/ (committed
after `cargo fuzz cmin` into fuzz/corpus/<target>/; see docs/fuzzing.md).

Seeds come from the writers users' files come from: probeflow's and Google's
`array_record` writers across every option, pyarrow's Parquet writer with and without
`ARROW:schema`, dictionary and plain pages, page indexes and every codec, DuckDB's and
Polars' (as warehouse exports write them), probeflow's
row encoder, gzip (single and multi-member), bzip2 and plain JSON lines of the edge
cases the rules name, RIPE Atlas result lines, manifests (with paths that try to leave
the output), the wire's messages and the repository's job files. Run with the tests'
virtualenv (`.venv/bin/python fuzz/make_seeds.py`); the output is deterministic.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from array_record.python import array_record_module as ar

import probeflow

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
OUT = ROOT / "seeds"


def put(target: str, name: str, data: bytes) -> None:
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def gz(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as f:
        f.write(data)
    return out.getvalue()


RECORDS = [b"", b"a", b"hello world" * 3, bytes(range(256)), b"\x00" * 5000]

PROBEFLOW_OPTIONS = [
    "group_size:1,zstd:3", "group_size:1,uncompressed", "group_size:1,brotli:4",
    "group_size:1,snappy", "group_size:5,zstd:1,window_log:18", "group_size:3,snappy,pad_to_block_boundary:true",
]
GOOGLE_OPTIONS = ["group_size:1", "group_size:2,uncompressed", "group_size:3,brotli:1", "group_size:1,snappy"]


def array_record_seeds(tmp: Path) -> None:
    for i, options in enumerate(PROBEFLOW_OPTIONS):
        path = tmp / f"pf-{i}.array_record"
        with probeflow.ArrayRecordWriter(path, options) as w:
            for r in RECORDS:
                w.write(r)
        put("array_record_read", f"probeflow-{i}", path.read_bytes())
    for i, options in enumerate(GOOGLE_OPTIONS):
        path = tmp / f"g-{i}.array_record"
        w = ar.ArrayRecordWriter(str(path), options)
        for r in RECORDS:
            w.write(r)
        w.close()
        put("array_record_read", f"google-{i}", path.read_bytes())
    # The reader's own corrupt cases: truncated, a flipped byte in each region.
    good = (OUT / "array_record_read" / "probeflow-0").read_bytes()
    put("array_record_read", "truncated", good[: len(good) - 100])
    for at in (70, 200, len(good) - 65536 + 10):
        damaged = bytearray(good)
        damaged[at] ^= 0x40
        put("array_record_read", f"flipped-{at}", bytes(damaged))
    # Round trips: option choice byte, then length-prefixed records.
    for choice in range(10):
        body = bytes([3]) + b"abc" + bytes([0]) + bytes([255, 2, 0]) + b"xyz"
        put("array_record_roundtrip", f"options-{choice}", bytes([choice]) + body)
    put("array_record_roundtrip", "option-text", b"group_size:7,brotli:11,window_log:20")
    # Chunk data: records byte, then a simple chunk (compression byte, sizes, values).
    put("array_record_chunk", "plain", bytes([2, 0, 2, 1, 2]) + b"abc")
    put("array_record_chunk", "zstd-claims", bytes([1, ord("z"), 3, 5]) + b"\x28\xb5\x2f\xfd\x00")
    put("array_record_chunk", "snappy-claims", bytes([1, ord("s"), 2, 0xff, 0xff, 0x7f]) + b"\x00" * 8)


def row_seeds() -> None:
    rows = [
        probeflow.encode_row("192.0.2.1", [1, 2, 3], ["192.0.2.7", "198.51.100.1", "203.0.113.5"], [1.5, None, 60000.0]),
        probeflow.encode_row("2001:db8::1", [10, 10], ["2001:db8::7", "2001:db8::8"], [0.25, 3.0], part=2),
        probeflow.encode_row("192.0.2.9", [], [], []),
    ]
    for i, row in enumerate(rows):
        put("row_decode", f"row-{i}", row)
    put("row_decode", "truncated", rows[0][:-9])
    put("row_roundtrip", "v4", bytes([0]) + bytes(range(33)))
    put("row_roundtrip", "v6", bytes([1]) + bytes(range(44)))


def parquet_seeds(tmp: Path) -> None:
    n = 300
    table = pa.table({
        "src_addr": [f"192.0.2.{i % 7}" for i in range(n)],
        "dst_addr": [f"198.51.100.{i % 11}" for i in range(n)],
        "ip_version": pa.array([4] * n, pa.int32()),
        "rtt": [float(i % 97) + 0.5 for i in range(n)],
        "event_time": list(range(1_700_000_000, 1_700_000_000 + n)),
    })
    variants = [
        ("zstd-dict", dict(compression="zstd")),
        ("snappy-plain", dict(compression="snappy", use_dictionary=False)),
        ("gzip-pages", dict(compression="gzip", write_page_index=True, data_page_size=512)),
        ("brotli-v2", dict(compression="brotli", data_page_version="2.0")),
        ("lz4-noarrow", dict(compression="lz4", store_schema=False)),
        ("none-stats", dict(compression="none", write_statistics=True)),
    ]
    for name, kw in variants:
        path = tmp / f"{name}.parquet"
        pq.write_table(table, path, **kw)
        data = path.read_bytes()
        # Flags byte: page index (1), dictionary columns (2).
        put("parquet_input", name, bytes([3]) + data)
        length = int.from_bytes(data[-8:-4], "little")
        put("parquet_footer", name, data[-8 - length:-8])
        put("parquet_footer", f"{name}-pages", data[4:200])
        arrow_schema = pq.ParquetFile(path).metadata.metadata or {}
        if b"ARROW:schema" in arrow_schema:
            put("arrow_schema", name, base64.b64decode(arrow_schema[b"ARROW:schema"]))
    nested = pa.table({"t": ["a", "b"], "l": [[1, 2], None], "s": [{"x": 1.5, "y": "q"}, None],
                       "d": pa.array(["u", "v"]).dictionary_encode(), "ts": pa.array([1, 2], pa.timestamp("us", "UTC")),
                       "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64()))})
    path = tmp / "nested.parquet"
    pq.write_table(nested, path)
    put("parquet_input", "nested", bytes([0]) + path.read_bytes())
    md = pq.ParquetFile(path).metadata.metadata
    put("arrow_schema", "nested", base64.b64decode(md[b"ARROW:schema"]))


JSON_LINES = [
    '{"id": "a", "text": "the cat sat"}',
    '{"text": "no id here", "meta": {"n": [1, 2.5, -3e10, null, true]}}',
    '{"id": 12345678901234567890123, "text": "big int id"}',
    '{"id": [1], "text": "list id"}',
    '{"text": "esc\\u00e9\\ud83d\\ude00\\n"}',
    '{"text": "lone \\ud800"}',
    '{"text": "a", "text": "repeated key"}',
    '{"id": NaN, "text": "nan"}',
    '[1, 2, 3]',
    '"just a string"',
    '{"text": ' + '[' * 40 + ']' * 40 + '}',
    '{"id": 1.0e308, "text": "x", "x": -Infinity}',
    '{"text": "unterminated',
    '  {"text" : "spaces"  }  ',
]


def json_seeds() -> None:
    for i, line in enumerate(JSON_LINES):
        put("py_json", f"line-{i}", line.encode())
        put("json_record", f"line-{i}", bytes([i % 3]) + line.encode())
    text = ("\n".join(JSON_LINES) + "\n").encode()
    put("whole_gzip", "one-member", gz(text))
    put("whole_gzip", "two-members", gz(text[:100]) + gz(text[100:]))
    put("whole_gzip", "empty", gz(b""))
    put("whole_gzip", "truncated", gz(text)[:-5])
    for choice in (0, 0x13, 0x27, 0x40):
        put("line_reader", f"lines-{choice}", bytes([choice]) + text)
    put("line_reader", "no-newline", bytes([0x25]) + b"x" * 300)


def atlas_seeds() -> None:
    lines = [
        '{"type": "ping", "af": 4, "prb_id": 1, "from": "192.0.2.1", "src_addr": "10.0.0.2", "dst_addr": "198.51.100.1", '
        '"timestamp": 1700000000, "result": [{"rtt": 1.5}, {"x": "*"}, {"rtt": 2.0, "dup": 1}, {"error": "timeout"}]}',
        '{"type": "ping", "fw": 1, "addr": "2001:db8::1", "srcaddr": "2001:db8::2", "pf": 6, "timestamp": "1700000001", '
        '"result": [{"rtt": "3.25"}]}',
        '{"type": "traceroute", "timestamp": 1}',
        'not json at all',
    ]
    text = ("\n".join(lines) + "\n").encode()
    put("atlas_lines", "plain", bytes([0]) + text)
    put("atlas_lines", "gzip", bytes([1]) + gz(text))
    put("atlas_lines", "bz2-multistream", bytes([2]) + bz2.compress(text[:200]) + bz2.compress(text[200:]))


def engine_seeds() -> None:
    manifest = {
        "manifest_version": 2, "row_format_version": "1", "tokenizer_version": "1", "shards_per_split": 1,
        "max_row_bytes": 8388608,
        "shards": [{"split": "train", "partition": 0, "path": "train/shard-00000-of-00001.array_record",
                    "rows": 1, "bytes": 65536, "blake3": "00" * 32}],
    }
    put("manifest", "good", json.dumps(manifest).encode())
    for i, path in enumerate(["../escape.array_record", "/etc/passwd", "train/../../x", "train//a", ""]):
        bad = json.loads(json.dumps(manifest))
        bad["shards"][0]["path"] = path
        put("manifest", f"escape-{i}", json.dumps(bad).encode())
    put("wire", "registration", json.dumps({"Ok": {"worker": "w1", "node": "n", "capacity": 2,
                                                   "memory_bytes": 1 << 30, "version": 1, "release": "0.1.0"}}).encode())
    put("wire", "error", json.dumps({"Err": "refused"}).encode())
    put("wire", "task-id", b"map-00042")
    put("wire", "task-id-long", b"reduce-99999999999")
    for job in sorted((REPO / "jobs").glob("*.toml")):
        put("job_file", job.stem, job.read_bytes())
    put("job_file", "bad-kind", b'kind = 3\n[run]\nworkers = 2\n')


def warehouse_parquet_seeds(tmp: Path) -> None:
    """Parquet files as warehouse exports write them: DuckDB's (zstd, nested and
    logical types) and Polars' own writer (Rust's), of ten rows each."""
    import duckdb  # noqa: PLC0415 (the seeds' only use of them: `pip install duckdb polars`)
    import polars as pl  # noqa: PLC0415

    path = tmp / "duckdb.parquet"
    duckdb.connect().execute(
        "COPY (SELECT i AS n, 'x' || (i % 7) AS s, i::DOUBLE / 3 AS d, to_timestamp(i) AS ts, "
        "[i, i + 1] AS l, {'a': i} AS st, i::DECIMAL(10, 2) AS dec, (i % 100)::TINYINT AS t8 "
        f"FROM range(10) t(i)) TO '{path}' (FORMAT parquet, COMPRESSION zstd)")
    put("parquet_input", "duckdb", bytes([3]) + path.read_bytes())
    path = tmp / "polars.parquet"
    frame = pl.DataFrame({"n": list(range(10)), "s": [f"x{i % 7}" for i in range(10)]})
    frame = frame.with_columns(pl.from_epoch(pl.col("n"), time_unit="s").alias("ts"),
                               pl.col("n").cast(pl.Float32).alias("f32"))
    frame.write_parquet(path, statistics=True)
    put("parquet_input", "polars", bytes([3]) + path.read_bytes())


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    tmp = OUT / ".tmp"
    tmp.mkdir(parents=True)
    array_record_seeds(tmp)
    row_seeds()
    parquet_seeds(tmp)
    warehouse_parquet_seeds(tmp)
    json_seeds()
    atlas_seeds()
    engine_seeds()
    shutil.rmtree(tmp)
    for d in sorted(OUT.iterdir()):
        print(f"{d.name}: {len(list(d.iterdir()))} seeds", file=sys.stderr)


if __name__ == "__main__":
    main()
