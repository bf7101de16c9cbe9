"""End-to-end tests of RIPE Atlas results as input (`[input] format = "ripe_atlas"`).

The oracle is RIPE's own parser, ``ripe.atlas.sagan`` (tests/support/atlas.py): the
packets the job keeps, read back from the shards through probeflow's reader, must be
exactly the ones sagan's parse gives under the rules of docs/job.md, on sagan's own
fixture lines and on a generated corpus across firmware versions.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import probeflow
from support.https import https_server
from support.atlas import generated_results, oracle_packets, sagan_fixture_lines, write_dump
from support.probe_rows import FRACTION, MAX_ROW, SEED, SHARDS, write_job
from support.run import run


def atlas_job(tmp: Path, name: str, url, out: Path, **input_keys) -> Path:
    return write_job(
        tmp / f"{name}.toml",
        {
            "input": {"url": url, "format": "ripe_atlas", **input_keys},
            "output": {"url": out, "shards": SHARDS, "max_row_bytes": MAX_ROW},
            "split": {"test_fraction": FRACTION, "seed": SEED},
            "run": {"mode": "local", "workers": 2, "memory_per_worker": "256MiB",
                    "scratch": tmp / "scratch"},
        },
    )


def packets_through_the_reader(out: Path) -> list[tuple]:
    """Every kept packet, read back through probeflow's reader: (src, time, dst, rtt
    code or None for a failed ping)."""
    got = []
    for split in ("train", "test"):
        source = probeflow.RowDataSource(out, split)
        for i in range(len(source)):
            row = source[i]
            for t, dst, code, failed in zip(row["event_time"], row["dst_addr"], row["rtt_code"], row["failed"]):
                got.append((row["src_addr"], int(t), dst, None if failed else int(code)))
    return got


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """sagan's fixture lines and a generated corpus, as three dumps: multistream bzip2
    (one with a torn last line), gzip, and plain JSON lines."""
    d = tmp_path_factory.mktemp("atlas") / "dumps"
    d.mkdir()
    generated = generated_results(3000)
    fixtures = sagan_fixture_lines()
    parts = {
        "ping-2020-09-13T1200.bz2": generated[:1500] + fixtures,
        "ping-2020-09-13T1300.gz": generated[1500:2500],
        "ping-2020-09-13T1400": generated[2500:],
    }
    write_dump(d / "ping-2020-09-13T1200.bz2", parts["ping-2020-09-13T1200.bz2"], streams=4, torn_last_line=True)
    with gzip.open(d / "ping-2020-09-13T1300.gz", "wt") as f:
        f.write("".join(line + "\n" for line in parts["ping-2020-09-13T1300.gz"]))
    (d / "ping-2020-09-13T1400").write_text("".join(line + "\n" for line in parts["ping-2020-09-13T1400"]))
    return d, [line for lines in parts.values() for line in lines]


@pytest.fixture(scope="module")
def atlas_output(corpus, tmp_path_factory):
    d, _ = corpus
    tmp = tmp_path_factory.mktemp("atlas-run")
    out = tmp / "out"
    run(["run", str(atlas_job(tmp, "atlas", str(d), out))])
    return out


def test_the_kept_packets_are_exactly_sagans_under_the_rules(corpus, atlas_output):
    _, lines = corpus
    expected = oracle_packets(lines)
    got = packets_through_the_reader(atlas_output)
    assert len(expected) > 3000
    assert Counter(got) == Counter(expected)
    # sagan's own fixtures are among them (their probes' public `from`).
    fixture_sources = {src for src, *_ in oracle_packets(sagan_fixture_lines())}
    assert fixture_sources and fixture_sources <= {src for src, *_ in got}


def test_the_manifest_counts_results_packets_and_every_reason(corpus, atlas_output):
    _, lines = corpus
    manifest = json.loads((atlas_output / "manifest.json").read_text())
    t = manifest["totals"]
    assert t["input_rows"] == t["kept_measurements"] + t["rejected_rows"]
    assert t["kept_measurements"] == len(oracle_packets(lines))
    atlas = t["atlas"]
    # Every line (the torn one too), the results among them, and their packet entries.
    assert atlas["lines"] == len(lines) + 1
    pings = [json.loads(line) for line in lines if _is_ping(line)]
    assert atlas["results"] == len(pings)
    assert atlas["packets"] == sum(len(p["result"]) for p in pings if isinstance(p.get("result"), list))
    reasons = t["rejected_by_reason"]
    for reason in ["duplicate", "packet_error", "no_packets", "no_public_source", "implausible_rtt",
                   "not_a_ping", "malformed_line"]:
        assert reasons.get(reason, 0) > 0, (reason, reasons)
    assert sum(reasons.values()) == t["rejected_rows"]
    # Each input file's rows, known once read.
    assert sum(f["rows"] for f in manifest["inputs"]) == t["input_rows"]


def _is_ping(line: str) -> bool:
    try:
        r = json.loads(line)
    except ValueError:
        return False
    return isinstance(r, dict) and all(k in r for k in ("timestamp", "msm_id", "prb_id", "fw", "type")) \
        and str(r["type"]).lower() == "ping"


def test_rejects_name_the_file_the_line_the_reason_and_keep_the_raw_line(corpus, atlas_output):
    _, lines = corpus
    manifest = json.loads((atlas_output / "manifest.json").read_text())
    rejects = pa.concat_tables([pq.read_table(atlas_output / r) for r in manifest["rejects"]])
    assert rejects.column_names == ["file", "line", "reason", "rows", "raw"]
    assert sum(rejects.column("rows").to_pylist()) == manifest["totals"]["rejected_rows"]
    by_reason = Counter()
    for r in rejects.to_pylist():
        by_reason[r["reason"]] += r["rows"]
    assert dict(by_reason) == manifest["totals"]["rejected_by_reason"]
    torn = [r for r in rejects.to_pylist() if r["raw"].endswith(b'"timest')]
    assert len(torn) == 1 and torn[0]["reason"] == "malformed_line"
    assert torn[0]["file"].endswith("ping-2020-09-13T1200.bz2")
    bz2_lines = [line for line in lines[:1500 + len(sagan_fixture_lines())]]
    assert torn[0]["line"] == len(bz2_lines) + 1
    # A reject's raw line is the line of that number in its file.
    plain = [r for r in rejects.to_pylist() if r["file"].endswith("T1400")]
    text = (Path(plain[0]["file"])).read_text().splitlines()
    for r in plain[:50]:
        assert text[r["line"] - 1].encode() == r["raw"]


def test_the_same_packets_as_parquet_give_the_same_shard_bytes(corpus, atlas_output, tmp_path):
    """The dumps converted to Parquet by the documented rules (one row per kept packet)
    give the same shards, byte for byte."""
    _, lines = corpus
    rows = oracle_packets(lines)
    table = _as_parquet_rows(lines)
    assert table.num_rows == len(rows)
    path = tmp_path / "atlas.parquet"
    pq.write_table(table, path)
    out = tmp_path / "out"
    write_job(tmp_path / "pq.toml", {
        "input": {"url": path},
        "output": {"url": out, "shards": SHARDS, "max_row_bytes": MAX_ROW},
        "split": {"test_fraction": FRACTION, "seed": SEED},
        "run": {"mode": "local", "workers": 2, "memory_per_worker": "256MiB", "scratch": tmp_path / "scratch"},
    })
    run(["run", str(tmp_path / "pq.toml")])
    ours = json.loads((atlas_output / "manifest.json").read_text())["shards"]
    theirs = json.loads((out / "manifest.json").read_text())["shards"]
    assert [(s["path"], s["blake3"]) for s in ours] == [(s["path"], s["blake3"]) for s in theirs]


def _as_parquet_rows(lines) -> pa.Table:
    """The documented conversion: sagan's packets under the rules, the RTT at full
    precision (a timeout: -1), as the job's Parquet input columns."""
    from support.atlas import Result, is_global, parse_ip
    cols = {"src_addr": [], "dst_addr": [], "ip_version": [], "rtt": [], "event_time": []}
    import time as _time
    latest = int(_time.time()) + 86_400
    for line in lines:
        try:
            r = Result.get(line, on_error=Result.ACTION_IGNORE, on_malformation=Result.ACTION_IGNORE)
        except Exception:
            continue
        if r.type != "ping" or not isinstance(r.raw_data.get("result"), list):
            continue
        af, dst, ts, origin = r.af, r.destination_address, r.created_timestamp, r.origin
        from_ok = origin is not None and is_global(origin) and (af is None or parse_ip(origin).version == af)
        for p, entry in zip(r.packets, r.raw_data["result"]):
            if p.dup:
                continue
            if "rtt" in entry:
                rtt = float(entry["rtt"])
                if rtt < 0:
                    continue
            elif "error" in entry or "x" not in entry:
                continue
            else:
                rtt = -1.0
            src = origin if from_ok else (p.source_address if is_global(p.source_address) else None)
            if src is None:
                continue
            s, d = parse_ip(src), parse_ip(dst) if dst else None
            if d is None or af not in (4, 6) or s.version != af or d.version != af:
                continue
            if not 946_684_800 <= ts <= latest or rtt > 60_000:
                continue
            for k, v in zip(cols, [src, dst, af, rtt, ts]):
                cols[k].append(v)
    return pa.table({
        "src_addr": pa.array(cols["src_addr"], pa.string()),
        "dst_addr": pa.array(cols["dst_addr"], pa.string()),
        "ip_version": pa.array(cols["ip_version"], pa.int32()),
        "rtt": pa.array(cols["rtt"], pa.float64()),
        "event_time": pa.array(cols["event_time"], pa.int64()),
    })


def test_source_src_addr_takes_the_field_and_the_private_guard_applies(corpus, tmp_path):
    """`source = "src_addr"`: the probes' private interfaces, which the guard refuses
    (naming the file) unless `allow_private_sources`."""
    d, lines = corpus
    out = tmp_path / "out"
    proc = run(["run", str(atlas_job(tmp_path, "src", str(d), out, source="src_addr"))], check=False)
    assert proc.returncode == 1, proc.stderr
    assert "local scope" in proc.stderr and "ping-2020-09-13T" in proc.stderr, proc.stderr
    run(["run", str(atlas_job(tmp_path, "src", str(d), out, source="src_addr", allow_private_sources=True))])
    got = packets_through_the_reader(out)
    assert Counter(got) == Counter(oracle_packets(lines, source="src_addr"))


def test_a_file_of_no_atlas_results_fails_naming_it_at_once(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "traceroutes.jsonl").write_text("".join(
        json.dumps({"type": "traceroute", "fw": 5080, "timestamp": 1_600_000_000 + i, "msm_id": 5001,
                    "prb_id": 1, "result": [{"hop": 1}]}) + "\n" for i in range(50)))
    proc = run(["run", str(atlas_job(tmp_path, "tr", str(d), tmp_path / "out"))], check=False)
    assert proc.returncode == 1, proc.stderr
    assert "traceroutes.jsonl" in proc.stderr and "no RIPE Atlas ping results" in proc.stderr, proc.stderr
    assert "after 1 attempt" in proc.stderr, proc.stderr


def test_a_corrupt_dump_names_itself_and_is_not_retried(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    good = bz2.compress(b"".join(line.encode() + b"\n" for line in generated_results(200)))
    (d / "ping-2020-01-01T0000.bz2").write_bytes(good[: len(good) // 2])
    proc = run(["run", str(atlas_job(tmp_path, "bad", str(d), tmp_path / "out"))], check=False)
    assert proc.returncode == 1, proc.stderr
    assert "ping-2020-01-01T0000.bz2" in proc.stderr and "Bzip2" in proc.stderr, proc.stderr
    assert "after 1 attempt" in proc.stderr, proc.stderr


def test_parquet_only_keys_are_refused_for_atlas_input(tmp_path):
    for key, value in [("time_unit", "ms"), ("rows_per_map_task", 1000), ("columns", {"src_addr": "from"})]:
        spec = atlas_job(tmp_path, "keys", "x", tmp_path / "out", **{key: value})
        proc = run(["run", str(spec)], check=False)
        assert proc.returncode == 2, proc.stderr
        assert key in proc.stderr and "ripe_atlas" in proc.stderr, proc.stderr


def test_dumps_on_s3_give_the_local_bytes(corpus, atlas_output, tmp_path, s3):
    """The same dumps read from an S3 server (moto, then Ceph's radosgw), pinned by
    their ETags, give the local run's shards."""
    from support.s3 import BUCKET
    client, env = s3
    d, _ = corpus
    for f in sorted(d.iterdir()):
        client.upload_file(str(f), BUCKET, f"atlas-in/{f.name}")
    spec = atlas_job(tmp_path, "s3", f"s3://{BUCKET}/atlas-in/", f"s3://{BUCKET}/atlas-out")
    run(["run", str(spec)], env=env)
    remote = json.loads(client.get_object(Bucket=BUCKET, Key="atlas-out/manifest.json")["Body"].read())
    local = json.loads((atlas_output / "manifest.json").read_text())
    assert [(s["path"], s["blake3"]) for s in remote["shards"]] == [(s["path"], s["blake3"]) for s in local["shards"]]
    assert remote["totals"] == local["totals"]
    assert all(f["etag"] for f in remote["inputs"])


def test_dumps_over_https_give_the_local_bytes(corpus, atlas_output, tmp_path):
    """The same dumps served by a local HTTPS server (GET, HEAD, Range, ETag, If-Match),
    named one by one in `url`, give the local run's shards; each file is pinned by its
    ETag."""
    d, _ = corpus
    names = sorted(f.name for f in d.iterdir())
    with https_server(d, tmp_path) as (base, trust):
        spec = atlas_job(tmp_path, "https", [f"{base}/{n}" for n in names], tmp_path / "out")
        run(["run", str(spec)], env={**os.environ, **trust})
    ours = json.loads((tmp_path / "out" / "manifest.json").read_text())
    local = json.loads((atlas_output / "manifest.json").read_text())
    assert [(s["path"], s["blake3"]) for s in ours["shards"]] == [(s["path"], s["blake3"]) for s in local["shards"]]
    assert ours["totals"] == local["totals"]
    assert [f["url"] for f in ours["inputs"]] == [f"{base}/{n}" for n in names]
    assert all(f["etag"] for f in ours["inputs"])


def test_parquet_over_https_is_read_by_ranges_and_gives_the_local_bytes(corpus, atlas_output, tmp_path):
    """A Parquet input over HTTPS (its footer and row groups read with Range requests)
    gives the same shards as the Atlas dumps it was converted from."""
    _, lines = corpus
    served = tmp_path / "served"
    served.mkdir()
    pq.write_table(_as_parquet_rows(lines), served / "atlas.parquet", row_group_size=5000)
    with https_server(served, tmp_path) as (base, trust):
        write_job(tmp_path / "pq.toml", {
            "input": {"url": f"{base}/atlas.parquet"},
            "output": {"url": tmp_path / "out", "shards": SHARDS, "max_row_bytes": MAX_ROW},
            "split": {"test_fraction": FRACTION, "seed": SEED},
            "run": {"mode": "local", "workers": 2, "memory_per_worker": "256MiB", "scratch": tmp_path / "scratch"},
        })
        run(["run", str(tmp_path / "pq.toml")], env={**os.environ, **trust})
    ours = json.loads((tmp_path / "out" / "manifest.json").read_text())["shards"]
    local = json.loads((atlas_output / "manifest.json").read_text())["shards"]
    assert [(s["path"], s["blake3"]) for s in ours] == [(s["path"], s["blake3"]) for s in local]


def test_https_input_is_one_named_file_with_an_etag_and_never_an_output(corpus, tmp_path):
    """HTTP has no listing and no conditional writes: a glob, a directory, a file served
    without an ETag and an https:// output are each refused before anything runs (exit 2)
    with the reason; an untrusted certificate fails naming the file."""
    d, _ = corpus
    name = sorted(f.name for f in d.iterdir())[0]
    with https_server(d, tmp_path) as (base, trust):
        env = {**os.environ, **trust}
        for url, why in [(f"{base}/ping-*.bz2", "HTTP has no listing"),
                         (f"{base}/", "HTTP has no listing")]:
            proc = run(["run", str(atlas_job(tmp_path, "glob", url, tmp_path / "out"))], check=False, env=env)
            assert proc.returncode == 2 and why in proc.stderr, proc.stderr
        proc = run(["run", str(atlas_job(tmp_path, "out", str(d / name), f"{base}/out"))], check=False, env=env)
        assert proc.returncode == 2 and "https:// serves input files only" in proc.stderr, proc.stderr
        # A certificate no root vouches for: the request fails (retried for a second).
        untrusted = {**{k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"},
                     "PROBEFLOW_STORE_RETRY_SECONDS": "1"}
        proc = run(["run", str(atlas_job(tmp_path, "untrusted", f"{base}/{name}", tmp_path / "out"))],
                   check=False, env=untrusted)
        assert proc.returncode != 0 and name in proc.stderr and "certificate" in proc.stderr, proc.stderr
    with https_server(d, tmp_path, etags=False) as (base, trust):
        proc = run(["run", str(atlas_job(tmp_path, "noetag", f"{base}/{name}", tmp_path / "out"))],
                   check=False, env={**os.environ, **trust})
        assert proc.returncode == 2 and "sends no ETag" in proc.stderr, proc.stderr
