"""Record ids of the n-gram overlap job against Python's own: random records (doubles
written with 17 and more significant digits, exponents near both ends of the double
range, subnormals, NaN and infinities, integers on every side of every msgpack width
boundary, `-0`, repeated keys, nesting, escapes and lone surrogates) are hashed by the
job and by `json.loads` / `pyarrow`'s `to_pylist()` + `msgspec` + `hashlib`, and every
id must agree, for JSONL and for Parquet, on the eval side and on the training side.

How the job is made to show every id: with `n = [1]`, eval record i's text is the one
word `w<i>`, and a training document holds every word (so every eval instance overlaps
it, and its detail record carries the instance id); the same records as training
documents overlap one eval row that holds every word (their detail records carry the
training document ids).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import struct

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq


from support.overlap import overlap_job, read_jsonl_gz, rejected
from support.run import run

RECORDS = 3000  # per format and side

# Integers on both sides of every boundary where msgpack's encoding changes width.
INT_EDGES = [0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
             -1, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63]


def python_id(rec: dict) -> str:
    if rec.get("id") is not None:
        return str(rec["id"])
    encoded = msgspec.msgpack.encode(rec, order="deterministic")
    return str(int.from_bytes(hashlib.blake2b(encoded, digest_size=8).digest(), "big"))


def encodable(value) -> bool:
    try:
        msgspec.msgpack.encode(value)
        return True
    except (OverflowError, UnicodeEncodeError):
        return False


def random_double(rng: random.Random) -> str:
    """A JSON number text that reads as a double, often not the shortest one."""
    kind = rng.randrange(8)
    if kind == 0:  # any double, 17 significant digits
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if not math.isfinite(x):
            x = rng.random()
        text = "%.17g" % x
        return text if any(c in text for c in ".e") else text + ".0"
    if kind == 1:  # 17 to 25 random digits, exponent near the top
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(17, 26)))
        return f"{rng.randrange(1, 10)}.{digits}e{rng.randrange(290, 309)}"
    if kind == 2:  # near the bottom, subnormals and underflow included
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(17, 26)))
        return f"{rng.randrange(1, 10)}.{digits}e-{rng.randrange(295, 330)}"
    if kind == 3:  # a random subnormal's 17 digits
        x = struct.unpack("<d", rng.getrandbits(52).to_bytes(8, "little"))[0]
        return "%.17e" % x
    if kind == 4:
        return rng.choice(["1.7976931348623158e308", "1.7976931348623157e308", "2.2250738585072014e-308",
                           "4.9406564584124654e-324", "2.4703282292062328e-324", "1e400", "-1e400",
                           "-0.0", "0.0", "1E2", "1e-7", "123456789012345678901.5", "NaN", "Infinity",
                           "-Infinity", "0.30000000000000004"])
    if kind == 5:  # a shortest repr with a 5 appended: near halfway between doubles
        return repr(rng.uniform(-1e6, 1e6)) + "5"
    x = rng.uniform(-1, 1) * 10 ** rng.randrange(-30, 30)
    return "%.*e" % (rng.randrange(15, 22), x)


def random_int(rng: random.Random, hashable: bool) -> str:
    if not hashable and rng.randrange(4) == 0:
        return str(rng.choice([2**64, -2**63 - 1, 10**40, -(10**60)]))
    if rng.randrange(6) == 0:
        return "-0"
    edge = rng.choice(INT_EDGES)
    v = edge + rng.choice([-1, 0, 1])
    v = max(-2**63, min(2**64 - 1, v))
    return str(v)


def random_string(rng: random.Random, surrogates: bool) -> str:
    pieces = ["a", "é", "😀", "\\n", "\\u00e9", "\\ud83d\\ude00", "\\\"", "\\\\", "\\/", " ", "Σ", "\\t"]
    if surrogates:
        pieces += ["\\ud800", "\\udfff"]
    return '"' + "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 6))) + '"'


def random_value(rng: random.Random, depth: int, hashable: bool) -> str:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return random_double(rng)
    if kind == 1:
        return random_int(rng, hashable)
    if kind == 2:
        return random_string(rng, not hashable)
    if kind == 3:
        return rng.choice(["true", "false", "null"])
    if kind in (4, 5):
        return random_double(rng) if kind == 4 else random_int(rng, hashable)
    if kind in (6, 7):
        return "[" + ", ".join(random_value(rng, depth + 1, hashable) for _ in range(rng.randrange(0, 18))) + "]"
    members = [f"{random_key(rng)}: {random_value(rng, depth + 1, hashable)}" for _ in range(rng.randrange(0, 17))]
    return "{" + ", ".join(members) + "}"


def random_key(rng: random.Random) -> str:
    return rng.choice(['"a"', '"b"', '"k\\u00e9"', '"😀"', '""', '"id2"', '"z"', '"A"', '"text2"'])


def random_line(rng: random.Random, i: int) -> str:
    """Record i: text `w<i>`, sometimes an id (any scalar), other fields at random
    (repeated keys included); without an id, mostly values msgpack can hold."""
    hashable = rng.randrange(10) != 0
    members = [f'"text": "w{i}"']
    for _ in range(rng.randrange(1, 8)):
        members.append(f"{random_key(rng)}: {random_value(rng, 1, hashable)}")
    if rng.randrange(3) == 0:
        scalar = rng.choice([random_double, lambda r: random_int(r, False),
                             lambda r: random_string(r, False), lambda r: "true", lambda r: "null"])
        members.append(f'"id": {scalar(rng)}')
    rng.shuffle(members)
    return "{" + ", ".join(members) + "}"


def python_rows(lines: list[str]):
    """(row, expected id or the reason the job must reject it)."""
    out = []
    for row, line in enumerate(lines):
        rec = json.loads(line)
        if rec.get("id") is None and not encodable(rec):
            out.append((row, "unhashable_record"))
        elif isinstance(rec.get("id"), str) and not encodable(rec["id"]):
            out.append((row, "bad_id"))
        else:
            out.append((row, python_id(rec)))
    return out


def random_table(rng: random.Random, rows: int) -> pa.Table:
    """Every column type a hashed Parquet row may have, values at their edges."""
    def double():
        return rng.choice([float(random_double(rng)), float(random_double(rng)),
                           -0.0, math.inf, -math.inf, math.nan, 5e-324, None])

    def maybe(v):
        return None if rng.randrange(8) == 0 else v

    i64 = [maybe(max(-2**63, min(2**63 - 1, rng.choice(INT_EDGES) + rng.choice([-1, 0, 1])))) for _ in range(rows)]
    u64 = [maybe(max(0, min(2**64 - 1, abs(rng.choice(INT_EDGES)) + rng.choice([-1, 0, 1])))) for _ in range(rows)]
    ids = [rng.choice([None, None, rng.uniform(-1e20, 1e20), -0.0, float(random_double(rng))])
           for _ in range(rows)]
    return pa.table({
        "text": [f"w{i}" for i in range(rows)],
        "f64": pa.array([double() for _ in range(rows)], pa.float64()),
        "i64": pa.array(i64, pa.int64()),
        "u64": pa.array(u64, pa.uint64()),
        "i8": pa.array([maybe(rng.randrange(-128, 128)) for _ in range(rows)], pa.int8()),
        "u32": pa.array([maybe(rng.choice([0, 127, 128, 65536, 2**32 - 1])) for _ in range(rows)], pa.uint32()),
        "flag": pa.array([maybe(rng.random() < 0.5) for _ in range(rows)], pa.bool_()),
        "lst": pa.array([maybe([double() for _ in range(rng.randrange(0, 20))]) for _ in range(rows)],
                        pa.list_(pa.float64())),
        "st": pa.array([maybe({"b": maybe("é" * rng.randrange(0, 40)), "a": maybe(rng.randrange(-200, 200)),
                               "c": maybe([rng.randrange(-2**31, 2**31) for _ in range(rng.randrange(0, 3))])})
                        for _ in range(rows)],
                       pa.struct([("b", pa.string()), ("a", pa.int16()), ("c", pa.list_(pa.int32()))])),
        "nothing": pa.nulls(rows),
        "id": pa.array(ids, pa.float64()),
    })


def test_ids_equal_pythons_for_random_records_in_jsonl_and_parquet(tmp_path):
    rng = random.Random(20261125)
    lines = [random_line(rng, i) for i in range(RECORDS)]
    table = random_table(rng, RECORDS)
    everything = " ".join(f"w{i}" for i in range(RECORDS))

    # Each side: the random records (one dataset per format) and one row of every word.
    sides = {}
    for side in ("eval", "train"):
        d = tmp_path / side
        d.mkdir()
        (d / "recs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        pq.write_table(table, d / "table.parquet")
        (d / "all.jsonl").write_text(json.dumps({"id": "all", "text": everything}) + "\n")
        sides[side] = [d / "recs.jsonl", d / "table.parquet", d / "all.jsonl"]
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "ids.toml", sides["eval"], sides["train"], out, workers=1, n=[1])
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]

    details = read_jsonl_gz(out / "stats" / "overlap_details.jsonl.gz")
    eval_ids = {(d["eval_path"], d["eval_row"]): d["instance_id"] for d in details}
    train_ids = {(d["train_path"], d["train_row"]): d["train_doc_id"] for d in details}
    reasons = {(r["file"], r["row"]): r["reason"] for r in rejected(out)}

    want_jsonl = python_rows(lines)
    want_parquet = list(enumerate(python_id(r) for r in table.to_pylist()))
    checked = 0
    for side, ids, (jsonl, parquet, _) in [("eval", eval_ids, sides["eval"]), ("train", train_ids, sides["train"])]:
        for path, want in [(jsonl, want_jsonl), (parquet, want_parquet)]:
            for row, expected in want:
                key = (str(path), row)
                got = reasons.get(key) or ids.get(key)
                assert got == expected, f"{side} {path.name} row {row}: job {got}, Python {expected}"
                checked += 1
    assert checked == 4 * RECORDS
    # The draw covers what it is meant to: hashed and id'd records, rejects, -0 ids.
    kinds = [e for _, e in want_jsonl]
    assert kinds.count("unhashable_record") > 50
    assert sum(1 for line in lines if '"id": -0,' in line or line.endswith('"id": -0}')) > 5
    # num_instances counts every record Python keeps.
    stats = [json.loads(s) for s in (out / "stats" / "overlap_stats.jsonl").read_text().splitlines()]
    by_name = {s["eval_dataset"]: s["num_instances"] for s in stats}
    assert by_name["recs"] == sum(1 for _, e in want_jsonl if e not in ("unhashable_record", "bad_id"))
    assert by_name["table"] == RECORDS
