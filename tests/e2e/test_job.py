"""End-to-end tests of the preprocessing job (`coordinator run`) in local mode.

The output is checked against an independent computation in Python: pyarrow reads the
input, the expected rows are derived with this file's own implementation of the RTT
code, the partition and split functions (blake3 from PyPI), and Google's
``array_record`` plus ``pyarrow.ipc`` read the shards.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import os
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import blake3
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
from array_record.python import array_record_module as ar

import probeflow
import probeflow.maxtext_input
from support.probe_rows import FRACTION, MAX_ROW, SEED, SHARDS, job_file, write_job
from support.run import COORDINATOR, run
# --- an independent implementation of the documented functions --------------------


def rtt_code(ms: float) -> int:
    value = max(1.0, ms * 1000.0)
    e = 0
    while value >= 2048 and e < 31:
        value /= 2
        e += 1
    return (e << 11) | min(math.floor(value), 2047)


def canonical(text: str) -> ipaddress._BaseAddress:
    a = ipaddress.ip_address(text)
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped:
        return a.ipv4_mapped
    return a


def u64_le(data: bytes) -> int:
    return int.from_bytes(blake3.blake3(data).digest()[:8], "little")


def partition_of(addr, shards=SHARDS) -> int:
    return u64_le(str(addr).encode()) % shards


def split_of(addr, seed=SEED, val=0.0) -> str:
    """The published three-way rule: one bucket per probe; test below the test
    fraction, val below test + val fraction, else train."""
    bucket = u64_le(seed.to_bytes(8, "little") + str(addr).encode()) % 1_000_000
    if bucket < FRACTION * 1_000_000:
        return "test"
    if bucket < (FRACTION + val) * 1_000_000:
        return "val"
    return "train"


def expected_from_input(files) -> dict:
    """source text → sorted list of (time, dst bytes, rtt code or None)."""
    out = defaultdict(list)
    for f in files:
        t = pq.read_table(f)
        for src, dst, ver, rtt, ts in zip(*(t.column(c).to_pylist() for c in ["src_addr", "dst_addr", "ip_version", "rtt", "event_time"])):
            s, d = canonical(src), canonical(dst)
            assert s.version == d.version == ver
            code = None if rtt < 0 else rtt_code(rtt)
            out[str(s)].append((ts, d.packed, code))
    for v in out.values():
        v.sort(key=lambda m: (m[0], m[1], -1 if m[2] is None else m[2]))
    return out


class Measurements(defaultdict):
    parts: dict


def read_output(out: Path, seed=SEED, shards=SHARDS, val=0.0) -> dict:
    """source text → measurements in row order, with every layout rule checked
    (`seed`: the job's split seed, `val`: its val fraction)."""
    manifest = json.loads((out / "manifest.json").read_text())
    got = Measurements(list)
    parts = defaultdict(list)
    for shard in manifest["shards"]:
        path = out / shard["path"]
        data = path.read_bytes()
        assert blake3.blake3(data).hexdigest() == shard["blake3"]
        assert len(data) == shard["bytes"]
        reader = ar.ArrayRecordReader(str(path))
        records = reader.read_all() if reader.num_records() else []
        assert len(records) == shard["rows"]
        prev_key = None
        for rec in records:
            assert len(rec) <= MAX_ROW
            table = pa.ipc.open_stream(rec).read_all()
            meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
            src = canonical(meta["probeflow.src_addr"])
            assert partition_of(src, shards) == shard["partition"], src
            assert split_of(src, seed, val) == shard["split"], src
            part = int(meta["probeflow.part"])
            key = (src.packed, part)
            assert prev_key is None or key > prev_key, "rows ordered by (src bytes, part)"
            prev_key = key
            parts[str(src)].append(part)
            for ts, dst, code in zip(*(table.column(c).to_pylist() for c in ["event_time", "dst_addr", "rtt"])):
                got[str(src)].append((ts, dst, code))
    for src, p in parts.items():
        assert p == list(range(len(p))), f"{src}: parts {p}"
    got.parts = dict(parts)
    return got, manifest


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("job")


@pytest.fixture(scope="module")
def clean_input(workdir):
    """Generated demo data plus one oversized source that forces row splits."""
    d = workdir / "input"
    run(["generate", "--rows", "150000", "--out", str(d), "--seed", "3"])
    n = 12_000
    big = pa.table(
        {
            "src_addr": ["2001:db8:bad::1"] * n,
            "dst_addr": [f"2001:db8::{i % 300:x}" for i in range(n)],
            "ip_version": pa.array([6] * n, pa.int32()),
            "rtt": [(-1.0 if i % 13 == 0 else 0.5 + i % 97) for i in range(n)],
            "event_time": pa.array([1_767_300_000 + (i * 7919) % 100_000 for i in range(n)], pa.int64()),
        }
    )
    pq.write_table(big, d / "part-big.parquet", row_group_size=5000)
    return d


@pytest.fixture(scope="module")
def baseline(workdir, clean_input):
    out = workdir / "out-w2"
    run(["run", str(job_file(workdir, "w2", f"{clean_input}/*.parquet", out, workers=2))])
    return out


def test_every_valid_row_lands_once_in_order(baseline, clean_input):
    expected = expected_from_input(sorted(clean_input.glob("*.parquet")))
    got, manifest = read_output(baseline)
    assert set(got) == set(expected)
    for src, ms in expected.items():
        assert got[src] == ms, src
    totals = manifest["totals"]
    n_input = sum(pq.read_metadata(f).num_rows for f in clean_input.glob("*.parquet"))
    assert totals["input_rows"] == n_input == totals["kept_measurements"] + totals["rejected_rows"]
    assert totals["rejected_rows"] == 0
    # The oversized source was split across several rows of at most MAX_ROW bytes.
    assert len(got["2001:db8:bad::1"]) == 12_000
    assert len(got.parts["2001:db8:bad::1"]) >= 4
    assert (baseline / "_SUCCESS").exists()
    assert not list((baseline / "_job" / "shuffle").glob("*")), "shuffle files removed"


def test_same_bytes_for_1_2_and_4_workers(workdir, clean_input, baseline):
    reference = json.loads((baseline / "manifest.json").read_text())["shards"]
    for workers in [1, 4]:
        out = workdir / f"out-w{workers}"
        run(["run", str(job_file(workdir, f"w{workers}", f"{clean_input}/*.parquet", out, workers=workers))])
        shards = json.loads((out / "manifest.json").read_text())["shards"]
        assert [(s["path"], s["blake3"]) for s in shards] == [(s["path"], s["blake3"]) for s in reference]


VAL = 0.2


def test_a_val_split_takes_its_probes_from_train_and_leaves_test_untouched(workdir, clean_input, baseline):
    out = workdir / "out-val"
    spec = job_file(workdir, "val", f"{clean_input}/*.parquet", out)
    spec.write_text(spec.read_text().replace(f"test_fraction = {FRACTION}", f"test_fraction = {FRACTION}\nval_fraction = {VAL}"))
    run(["run", str(spec)])
    # Every row in its split by the three-way rule, every measurement once.
    expected = expected_from_input(sorted(clean_input.glob("*.parquet")))
    got, manifest = read_output(out, val=VAL)
    assert set(got) == set(expected)
    for src, ms in expected.items():
        assert got[src] == ms, src
    assert manifest["val_fraction"] == VAL and "val" in manifest["split_function"]
    by_split = defaultdict(list)
    for s in manifest["shards"]:
        by_split[s["split"]].append(s)
    assert sorted(by_split) == ["test", "train", "val"]
    assert all(len(v) == SHARDS for v in by_split.values())
    sources = {k: sum(s["sources"] for s in v) for k, v in by_split.items()}
    total = sum(sources.values())
    assert abs(sources["val"] / total - VAL) < 0.05 and abs(sources["test"] / total - FRACTION) < 0.05, sources
    # Test membership does not depend on the val fraction: the test shards are the
    # two-way run's, byte for byte; val's probes all come from its train.
    two_way = json.loads((baseline / "manifest.json").read_text())
    assert "val_fraction" not in two_way
    assert [(s["path"], s["blake3"]) for s in two_way["shards"] if s["split"] == "test"] == [
        (s["path"], s["blake3"]) for s in by_split["test"]
    ]
    two_way_train, _ = read_output(baseline)
    assert {src for src in got if split_of(src, val=VAL) != "test"} == {
        src for src in two_way_train if split_of(src) == "train"
    }
    # The reader serves it; an output without val says so.
    val_rows = probeflow.RowDataSource(out, split="val")
    assert len(val_rows) == sum(s["rows"] for s in by_split["val"])
    assert {split_of(val_rows[i]["src_addr"], val=VAL) for i in range(len(val_rows))} == {"val"}
    with pytest.raises(probeflow.OutputError, match='no shards for split "val".*val_fraction'):
        probeflow.RowDataSource(baseline, split="val")
    with pytest.raises(probeflow.OutputError, match="refusing to mix splits"):
        probeflow.RowDataSource(out / "val" / "*.array_record", split="train")
    # MaxText's eval reads val where there is one (auto), or the split asked for.
    NetworkOptions = probeflow.maxtext_input.NetworkOptions
    assert probeflow.maxtext_input.eval_source(NetworkOptions(train_files=str(out))) == (str(out), "val")
    assert probeflow.maxtext_input.eval_source(NetworkOptions(train_files=str(out), eval_split="test")) == (str(out), "test")
    test_glob = str(out / "test" / "*.array_record")
    assert probeflow.maxtext_input.eval_source(NetworkOptions(train_files=test_glob)) == (test_glob, "test")
    assert probeflow.splits_of([str(out)]) == ["train", "val", "test"]
    assert probeflow.splits_of([str(baseline)]) == ["train", "test"]
    with pytest.raises(probeflow.InvalidInputError, match=r'unknown split "validation" \(train, val or test\)'):
        probeflow.RowDataSource(out, split="validation")
    verified = run(["verify", str(out)])
    assert verified.returncode == 0


def test_finished_job_does_nothing_and_other_job_is_refused(workdir, clean_input, baseline):
    again = run(["run", str(workdir / "w2.toml")])
    assert "already complete" in again.stdout
    other = job_file(workdir, "other", f"{clean_input}/*.parquet", baseline)
    other.write_text(other.read_text().replace(f"seed = {SEED}", "seed = 99"))
    refused = run(["run", str(other)], check=False)
    assert refused.returncode == 2
    assert "different job" in refused.stderr


def killed_after_maps(spec: Path, out: Path, maps: int) -> Path:
    """Runs `spec` and SIGKILLs the coordinator once `maps` map tasks are journaled;
    returns the journal directory."""
    proc = subprocess.Popen([str(COORDINATOR), "run", str(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    journal = out / "_job" / "journal"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(journal.glob("map-*.json"))) < maps:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return journal


def same_shards(out: Path, baseline: Path) -> None:
    """`out` holds the baseline's shards, byte for byte."""
    ref = json.loads((baseline / "manifest.json").read_text())["shards"]
    got = json.loads((out / "manifest.json").read_text())["shards"]
    assert [s["blake3"] for s in got] == [s["blake3"] for s in ref]
    for s in ref:
        assert (out / s["path"]).read_bytes() == (baseline / s["path"]).read_bytes()


def test_sigkill_then_resume_gives_the_same_bytes(workdir, clean_input, baseline):
    out = workdir / "out-crash"
    spec = job_file(workdir, "crash", f"{clean_input}/*.parquet", out, workers=1)
    journal = killed_after_maps(spec, out, 2)
    done_before = {p.name for p in journal.glob("*-*.json")}
    assert done_before, "the job was killed before any task finished"
    assert not (out / "_SUCCESS").exists()
    status = run(["status", str(out)])
    assert "running or interrupted" in status.stdout

    resumed = run(["run", str(spec)])
    assert "resumed from the journal" in resumed.stdout
    n_resumed = int(resumed.stdout.split(" resumed")[0].rsplit("(", 1)[1].split(", ")[1].split()[0])
    assert n_resumed == len(done_before)
    same_shards(out, baseline)


def test_dirty_rows_are_rejected_with_reasons(workdir):
    d = workdir / "dirty"
    d.mkdir()
    rows = [
        # (src, dst, version, rtt, time, expected reason or None)
        ("192.0.2.1", "198.51.100.1", 4, 10.0, 1_767_300_000, None),
        ("::ffff:192.0.2.1", "198.51.100.2", 4, -1.0, 1_767_300_001, None),
        (None, "198.51.100.1", 4, 10.0, 1_767_300_000, "null_src_addr"),
        ("192.0.2.300", "198.51.100.1", 4, 10.0, 1_767_300_000, "bad_src_addr"),
        ("", "198.51.100.1", 4, 10.0, 1_767_300_000, "bad_src_addr"),
        ("192.0.2.1", None, 4, 10.0, 1_767_300_000, "null_dst_addr"),
        ("192.0.2.1", "not an address", 4, 10.0, 1_767_300_000, "bad_dst_addr"),
        ("192.0.2.1", "198.51.100.1", None, 10.0, 1_767_300_000, "null_ip_version"),
        ("192.0.2.1", "198.51.100.1", 5, 10.0, 1_767_300_000, "bad_ip_version"),
        ("192.0.2.1", "198.51.100.1", 6, 10.0, 1_767_300_000, "version_mismatch"),
        ("192.0.2.1", "2001:db8::1", 4, 10.0, 1_767_300_000, "version_mismatch"),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, None, "null_event_time"),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, -5, "negative_event_time"),
        ("192.0.2.1", "198.51.100.1", 4, None, 1_767_300_000, "null_rtt"),
        ("192.0.2.1", "198.51.100.1", 4, float("nan"), 1_767_300_000, "nan_rtt"),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, 946_684_799, "implausible_event_time"),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, 1_767_300_000_000, "implausible_event_time"),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, int(time.time()) + 2 * 86_400, "implausible_event_time"),
        ("192.0.2.1", "198.51.100.1", 4, float("inf"), 1_767_300_000, "infinite_rtt"),
        ("192.0.2.1", "198.51.100.1", 4, float("-inf"), 1_767_300_000, "infinite_rtt"),
        ("192.0.2.1", "198.51.100.1", 4, 1e9, 1_767_300_000, "implausible_rtt"),
        ("192.0.2.1", "198.51.100.1", 4, 60_000.0, 1_767_300_000, None),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, 946_684_800, None),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, 1_767_300_002, None),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, 1_767_300_003, None),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, 1_767_300_004, None),
        ("192.0.2.1", "198.51.100.1", 4, 10.0, 1_767_300_005, None),
        ("2001:db8::5", "2001:db8::1", 6, 3.0, 1_767_300_000, None),
    ]
    table = pa.table(
        {
            "src_addr": pa.array([r[0] for r in rows], pa.string()),
            "dst_addr": pa.array([r[1] for r in rows], pa.string()),
            "ip_version": pa.array([r[2] for r in rows], pa.int64()),
            "rtt": pa.array([r[3] for r in rows], pa.float64()),
            "event_time": pa.array([r[4] for r in rows], pa.int64()),
        }
    )
    pq.write_table(table, d / "dirty.parquet")
    out = workdir / "out-dirty"
    run(["run", str(job_file(workdir, "dirty", str(d / "dirty.parquet"), out))])
    manifest = json.loads((out / "manifest.json").read_text())
    totals = manifest["totals"]
    expected_reasons = [r[5] for r in rows if r[5]]
    assert totals["input_rows"] == len(rows)
    assert totals["kept_measurements"] == len(rows) - len(expected_reasons)
    assert totals["rejected_rows"] == len(expected_reasons)
    rejects = pa.concat_tables([pq.read_table(out / f) for f in manifest["rejects"]])
    assert sorted(rejects.column("reason").to_pylist()) == sorted(expected_reasons)
    # Original values are kept beside the reason.
    by_reason = dict(zip(rejects.column("reason").to_pylist(), rejects.column("src_addr").to_pylist()))
    assert by_reason["bad_src_addr"] in ("192.0.2.300", "")
    got, _ = read_output(out)
    assert len(got["192.0.2.1"]) == 8, "IPv4-mapped source joins its IPv4 row"
    # The limits the rows were checked against are in the manifest.
    plausible = manifest["plausible"]
    assert plausible["time_unit"] == "s"
    assert plausible["earliest_event_time"] == 946_684_800
    assert abs(plausible["latest_event_time"] - (time.time() + 86_400)) < 600
    assert plausible["max_rtt_ms"] == 60_000


def millisecond_input(workdir) -> Path:
    d = workdir / "millis"
    if not d.exists():
        d.mkdir()
        n = 2000
        pq.write_table(
            pa.table(
                {
                    "src_addr": [f"192.0.2.{i % 50}" for i in range(n)],
                    "dst_addr": [f"198.51.100.{i % 7}" for i in range(n)],
                    "ip_version": pa.array([4] * n, pa.int32()),
                    "rtt": [1.0 + i % 100 for i in range(n)],
                    "event_time": pa.array([1_767_300_000_000 + 1000 * i for i in range(n)], pa.int64()),
                }
            ),
            d / "millis.parquet",
        )
    return d / "millis.parquet"


def test_epoch_millisecond_times_fail_naming_the_file_and_the_unit(workdir):
    """Integer epoch milliseconds read as seconds would be the year 57 000: the job
    fails at once (no retries), naming the file and the unit that fits."""
    out = workdir / "out-millis"
    proc = run(["run", str(job_file(workdir, "millis", str(millisecond_input(workdir)), out))], check=False)
    assert proc.returncode == 1, proc.stderr
    assert "millis.parquet" in proc.stderr
    assert 'time_unit = "ms"' in proc.stderr
    assert "2000 of 2000 rows" in proc.stderr
    assert "after 1 attempt" in proc.stderr, proc.stderr
    assert not (out / "_SUCCESS").exists()


def test_time_unit_ms_reads_millisecond_times(workdir):
    out = workdir / "out-millis-ok"
    spec = job_file(workdir, "millis-ok", str(millisecond_input(workdir)), out, extra_input='time_unit = "ms"')
    run(["run", str(spec)])
    got, manifest = read_output(out)
    times = sorted(t for ms in got.values() for (t, _, _) in ms)
    assert times == [1_767_300_000 + i for i in range(2000)]
    assert manifest["plausible"]["time_unit"] == "ms"
    assert manifest["totals"]["rejected_rows"] == 0


def sources_input(workdir, name: str, local_share: float) -> Path:
    """2 000 rows of 100 sources, the first `local_share` of them private (RFC 1918),
    CGNAT, link-local or unique-local addresses, the rest public."""
    d = workdir / name
    d.mkdir()
    local = ["192.168.1.{}", "10.0.0.{}", "100.64.0.{}", "169.254.0.{}", "fd00::{:x}"]
    sources = [local[i % len(local)].format(i + 1) if i < local_share * 100 else f"193.0.{i}.1"
               for i in range(100)]
    n = 2000
    src = [sources[i % 100] for i in range(n)]
    pq.write_table(
        pa.table({
            "src_addr": src,
            "dst_addr": ["2001:67c:2e8::1" if ":" in s else "193.0.14.129" for s in src],
            "ip_version": pa.array([6 if ":" in s else 4 for s in src], pa.int32()),
            "rtt": [1.0 + i % 100 for i in range(n)],
            "event_time": pa.array([1_767_300_000 + i for i in range(n)], pa.int64()),
        }),
        d / f"{name}.parquet",
    )
    return d / f"{name}.parquet"


def test_an_input_keyed_by_private_sources_fails_naming_the_file_and_runs_with_the_option(workdir):
    """Sources behind NAT (192.168.1.x, 10.x, CGNAT, ULA) name no probe: grouping by them
    merges unrelated probes. A file whose rows are mostly keyed so fails at once, naming
    the file, the share and the fix; the same job resumed with the option runs."""
    path = sources_input(workdir, "private-sources", 0.6)
    out = workdir / "out-private-sources"
    spec = job_file(workdir, "private-sources", str(path), out)
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 1, proc.stderr
    assert "private-sources.parquet" in proc.stderr
    assert "1200 of 2000 valid rows (60.0 %)" in proc.stderr, proc.stderr
    assert "192.168.1.1, private" in proc.stderr, proc.stderr
    assert "columns.src_addr" in proc.stderr and "allow_private_sources = true" in proc.stderr
    assert "after 1 attempt" in proc.stderr, proc.stderr
    assert not (out / "_SUCCESS").exists()

    allowed = job_file(workdir, "private-sources", str(path), out, extra_input="allow_private_sources = true")
    run(["run", str(allowed)])
    got, manifest = read_output(out)
    assert manifest["totals"]["kept_measurements"] == 2000
    assert "192.168.1.1" in got and "fd00::5" in got and "193.0.99.1" in got


def test_a_few_private_sources_are_kept(workdir):
    """Real data has some probes keyed by a private address: below a majority, the job
    runs and keeps them."""
    path = sources_input(workdir, "few-private-sources", 0.5)
    out = workdir / "out-few-private-sources"
    run(["run", str(job_file(workdir, "few-private-sources", str(path), out))])
    got, manifest = read_output(out)
    assert manifest["totals"]["kept_measurements"] == 2000
    assert "192.168.1.1" in got and len(got) == 100


def test_corrupt_parquet_fails_naming_the_file(workdir):
    d = workdir / "corrupt"
    d.mkdir()
    pq.write_table(pa.table({"src_addr": ["192.0.2.1"], "dst_addr": ["192.0.2.2"], "ip_version": [4], "rtt": [1.0], "event_time": [1]}), d / "good.parquet")
    (d / "broken.parquet").write_bytes(b"PAR1" + os.urandom(5000) + b"PAR1")
    out = workdir / "out-corrupt"
    proc = run(["run", str(job_file(workdir, "corrupt", f"{d}/*.parquet", out))], check=False)
    assert proc.returncode == 1
    assert "broken.parquet" in proc.stderr


def test_a_corrupt_page_fails_the_job_in_one_attempt_naming_the_file(workdir):
    """The footer is sound, so the job plans; the first map meets the torn zstd page.
    The bytes are the file's fault: every attempt would read them alike, so the job
    stops after one attempt (of five), naming the file, instead of retrying."""
    d = workdir / "torn-page"
    d.mkdir()
    n = 20000
    table = pa.table({"src_addr": ["192.0.2.1"] * n, "dst_addr": ["192.0.2.2"] * n, "ip_version": [4] * n,
                      "rtt": [float(i % 977) + 0.25 for i in range(n)], "event_time": list(range(1_700_000_000, 1_700_000_000 + n))})
    victim = d / "torn.parquet"
    pq.write_table(table, victim, compression="zstd", use_dictionary=False)
    rtt = pq.ParquetFile(victim).metadata.row_group(0).column(3)
    data = bytearray(victim.read_bytes())
    middle = rtt.data_page_offset + rtt.total_compressed_size // 2
    data[middle:middle + 64] = bytes(64)
    victim.write_bytes(bytes(data))
    out = workdir / "out-torn-page"
    proc = run(["run", str(job_file(workdir, "torn-page", f"{d}/*.parquet", out, extra_run="max_attempts = 5"))], check=False)
    assert proc.returncode == 1, proc.stderr
    assert "torn.parquet" in proc.stderr and "after 1 attempt(s)" in proc.stderr, proc.stderr
    assert not (out / "_SUCCESS").exists()


def test_job_file_errors_are_clear(workdir):
    bad = workdir / "bad.toml"
    bad.write_text('[input]\nurl = "x"\n[output]\nurl = "y"\nshard = 3\n')
    proc = run(["run", str(bad)], check=False)
    assert proc.returncode == 2
    assert "bad.toml" in proc.stderr and "shard" in proc.stderr and "line 5" in proc.stderr


def test_inspect_shows_a_row_in_human_form(baseline):
    manifest = json.loads((baseline / "manifest.json").read_text())
    shard = next(s for s in manifest["shards"] if s["rows"])
    out = run(["inspect", str(baseline / shard["path"]), "--row", "0", "--limit", "3"]).stdout
    assert "src_addr" in out and " ms" in out and "2026-01-" in out


def test_two_jobs_at_once_with_one_scratch_do_not_mix(workdir, clean_input):
    """Two local jobs, same input and the same scratch directory, different split seeds,
    started together: each output holds exactly its own split, row by row."""
    expected = expected_from_input(sorted(clean_input.glob("*.parquet")))
    procs, outs = [], {}
    for seed in (17, 18):
        out = workdir / f"out-together-{seed}"
        spec = job_file(workdir, f"together-{seed}", f"{clean_input}/*.parquet", out, workers=1)
        # One partition: both jobs reduce it at the same time.
        spec.write_text(spec.read_text().replace(f"seed = {SEED}", f"seed = {seed}").replace(f"shards = {SHARDS}", "shards = 1"))
        outs[seed] = out
        procs.append(subprocess.Popen([str(COORDINATOR), "run", str(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    for seed, out in outs.items():
        got, _ = read_output(out, seed, shards=1)
        assert set(got) == set(expected)
        for src, ms in expected.items():
            assert got[src] == ms, (seed, src)
    # Each job removed its own scratch; nothing of theirs is left behind.
    assert not [p for p in (workdir / "scratch").glob("*/*") if p.is_file()]


def test_two_coordinators_on_one_output_one_runs_the_other_exits_2(workdir, clean_input, baseline):
    """Started together on the same output: exactly one runs, the other exits 2 naming
    the owner, and the output is the same bytes as a lone run's."""
    out = workdir / "out-contended"
    spec = job_file(workdir, "contended", f"{clean_input}/*.parquet", out, workers=2)
    procs = [subprocess.Popen([str(COORDINATOR), "run", str(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], results
    refused = next(r for r in results if r[0] == 2)
    assert "another coordinator" in refused[2] and "pid" in refused[2], refused[2]
    ref = json.loads((baseline / "manifest.json").read_text())["shards"]
    got = json.loads((out / "manifest.json").read_text())["shards"]
    assert [(s["path"], s["blake3"]) for s in got] == [(s["path"], s["blake3"]) for s in ref]
    assert not (out / "_job" / "lock.json").exists(), "the lock is released at the end"
    # A stale lock from a coordinator killed on this host does not block a rerun.
    assert run(["run", str(spec)]).returncode == 0


def copied_input(workdir, clean_input, name) -> Path:
    d = workdir / name
    d.mkdir()
    for f in sorted(clean_input.glob("*.parquet")):
        (d / f.name).write_bytes(f.read_bytes())
    return d


def test_a_file_added_or_removed_after_success_makes_the_rerun_exit_2(workdir, clean_input):
    d = copied_input(workdir, clean_input, "input-grows")
    out = workdir / "out-grows"
    spec = job_file(workdir, "grows", f"{d}/*.parquet", out)
    run(["run", str(spec)])
    assert "already complete" in run(["run", str(spec)]).stdout
    extra = d / "zz-late.parquet"
    pq.write_table(pq.read_table(next(iter(sorted(d.glob("*.parquet"))))), extra)
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"added: {extra}" in proc.stderr and "already complete" not in proc.stdout
    extra.unlink()
    first = sorted(d.glob("*.parquet"))[0]
    first.unlink()
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 2 and f"vanished: {first}" in proc.stderr, proc.stderr


def test_an_input_file_replaced_mid_run_fails_naming_it(workdir, clean_input):
    """The coordinator is paused right after planning, the last input file (not yet
    read: one worker, maps in file order) is rewritten, and the job goes on: the map
    refuses the file instead of reading the new version into a plan of the old."""
    d = copied_input(workdir, clean_input, "input-replaced")
    out = workdir / "out-replaced"
    spec = job_file(workdir, "replaced", f"{d}/*.parquet", out, workers=1)
    spec.write_text(spec.read_text().replace("rows_per_map_task = 60000", "rows_per_map_task = 5000"))
    victim = sorted(d.glob("*.parquet"))[-1]
    proc = subprocess.Popen([str(COORDINATOR), "run", str(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    planned = out / "_job" / "journal" / "job.json"
    deadline = time.time() + 60
    while not planned.exists() and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGSTOP)
    try:
        table = pq.read_table(victim)
        pq.write_table(table.slice(0, table.num_rows // 2), victim)
    finally:
        proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (1, 2), err
    assert str(victim) in err and "changed since the job was planned" in err, err
    assert not (out / "_SUCCESS").exists()


def test_a_torn_journal_entry_is_redone_on_resume(workdir, clean_input, baseline):
    """A journal entry cut to zero bytes or to half its length (a crash mid-write on a
    store without atomic renames) makes the resume redo those tasks, with a warning,
    and the output is the clean run's, byte for byte."""
    out = workdir / "out-torn"
    spec = job_file(workdir, "torn", f"{clean_input}/*.parquet", out, workers=1)
    journal = killed_after_maps(spec, out, 3)
    entries = sorted(journal.glob("map-*.json"))
    assert len(entries) >= 3, "the job was killed before three maps finished"
    entries[0].write_bytes(b"")
    entries[1].write_bytes(entries[1].read_bytes()[: len(entries[1].read_bytes()) // 2])

    resumed = run(["run", str(spec)])
    assert entries[0].name in resumed.stderr and entries[1].name in resumed.stderr
    assert "redone" in resumed.stderr
    same_shards(out, baseline)
    # Every entry is whole again.
    for e in journal.glob("*.json"):
        json.loads(e.read_text())


def test_a_large_row_group_is_read_by_several_maps_each_row_once(workdir):
    """One row group of 50 000 rows with rows_per_map_task = 7 000: eight map tasks read
    row ranges of it, and the output holds every input row exactly once."""
    d = workdir / "one-group"
    d.mkdir()
    n = 50_000
    table = pa.table({
        "src_addr": [f"11.0.{i % 97}.{i % 13}" for i in range(n)],
        "dst_addr": [f"192.0.2.{i % 211}" for i in range(n)],
        "ip_version": pa.array([4] * n, pa.int32()),
        "rtt": [0.25 + (i * 7) % 500 for i in range(n)],
        "event_time": pa.array([1_767_300_000 + (i * 104_729) % 1_000_000 for i in range(n)], pa.int64()),
    })
    pq.write_table(table, d / "one.parquet", row_group_size=n, write_page_index=True)
    out = workdir / "out-one-group"
    spec = job_file(workdir, "one-group", f"{d}/*.parquet", out)
    spec.write_text(spec.read_text().replace("rows_per_map_task = 60000", "rows_per_map_task = 7000"))
    run(["run", str(spec)])
    maps = json.loads((out / "_job" / "journal" / "job.json").read_text())["plan"]["maps"]
    assert [(m["row_groups"], m["skip_rows"], m["rows"]) for m in maps] == [
        ({"start": 0, "end": 1}, skip, min(7000, n - skip)) for skip in range(0, n, 7000)
    ]
    expected = expected_from_input([d / "one.parquet"])
    got, manifest = read_output(out)
    assert set(got) == set(expected)
    for src, ms in expected.items():
        assert got[src] == ms, src
    assert manifest["totals"]["kept_measurements"] == n


# The shard digests the probe-rows job wrote before the engine was separated from the
# job (release 92a9589) for the job below: the engine change must not move one byte.
PRE_ENGINE_SHARDS_DIGEST = "4e33902e3c5da2b4bcfd7ffde65ba046"


@pytest.mark.parametrize("val_fraction", ["", "val_fraction = 0.0"])
def test_probe_rows_shards_are_byte_identical_to_the_pre_engine_release(tmp_path, val_fraction):
    """Also with an explicit `val_fraction = 0`: no val shards, the same job."""
    out = tmp_path / "out"
    spec = tmp_path / "job.toml"
    spec.write_text(
        f"""
[input]
synthetic = {{ rows = 300_000, seed = 3 }}
rows_per_map_task = 40000
[output]
url = "{out}"
shards = 8
[split]
test_fraction = 0.2
seed = 5
{val_fraction}
[run]
workers = 2
memory_per_worker = "256MiB"
scratch = "{tmp_path / 'scratch'}"
"""
    )
    run(["run", str(spec)])
    manifest = json.loads((out / "manifest.json").read_text())
    listing = "".join(f"{s['path']}:{s['blake3']}\n" for s in manifest["shards"])
    assert len(manifest["shards"]) == 16
    assert hashlib.blake2b(listing.encode()).hexdigest()[:32] == PRE_ENGINE_SHARDS_DIGEST, listing
    assert "val_fraction" not in manifest and not (out / "val").exists()
    # And the bytes are what the manifest says.
    for s in manifest["shards"]:
        assert blake3.blake3((out / s["path"]).read_bytes()).hexdigest() == s["blake3"]


def synthetic_job(tmp: Path, name: str, rows: int, seed: int, shards: int, memory: str, scratch: Path,
                  map_rows: int | None = None) -> Path:
    """A local-mode job file `tmp/<name>.toml` on generated input, one worker, output
    `tmp/out-<name>` (`map_rows`: rows_per_map_task, else the job's default)."""
    return write_job(tmp / f"{name}.toml", {
        "input": {"synthetic": {"rows": rows, "seed": seed}, "rows_per_map_task": map_rows},
        "output": {"url": tmp / f"out-{name}", "shards": shards},
        "run": {"workers": 1, "memory_per_worker": memory, "scratch": scratch},
    })


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB filesystem (tmpfs, mounted in a mount namespace of its own would
    need the job inside it; as root a plain mount under tmp_path is enough and is
    unmounted after the test)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_scratch_disk_names_the_directory_and_what_the_task_needed(tmp_path, small_disk):
    """A reduce whose scratch fills a real (tmpfs) disk fails with a message that names
    the directory, the filesystem's space and how much the task had written: not a bare
    "No space left on device"."""
    spec = synthetic_job(tmp_path, "job", rows=300_000, seed=3, shards=2, memory="256MiB",
                         scratch=small_disk / "scratch")
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    log = proc.stdout + proc.stderr
    assert "No space left on device" in log, log[-3000:]
    line = next(l for l in log.splitlines() if "No space left on device" in l)
    assert str(small_disk / "scratch") in line, line
    assert "free of" in line and "had written" in line, line


def test_the_smallest_memory_setting_sorts_a_partition_larger_than_it(tmp_path):
    """`memory_per_worker = "64MiB"`, the least the job accepts, with one partition of
    1.5M rows (67 MB of sort keys, more than the whole setting): the sort spills and
    completes, and the shards are byte-identical to a run that sorts in memory. The
    partition comes from 150 small map tasks (10 000 rows each), so the sort receives
    150 small segments (a sort that made a run per segment once ran out of memory merging
    them, at 614 288 rows)."""
    outs = {}
    for memory in ("64MiB", "1GiB"):
        spec = synthetic_job(tmp_path, f"job-{memory}", rows=1_500_000, seed=11, shards=1, memory=memory,
                             scratch=tmp_path / "scratch", map_rows=10_000)
        proc = run(["run", str(spec)], check=False)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        manifest = json.loads((tmp_path / f"out-job-{memory}" / "manifest.json").read_text())
        outs[memory] = [(s["path"], s["blake3"]) for s in manifest["shards"]]
    assert outs["64MiB"] == outs["1GiB"]
