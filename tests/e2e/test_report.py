"""`python -m probeflow.report` on a job output: its figures against the manifest and
against the job's input, and a page that stands alone."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from collections import Counter
from itertools import chain, permutations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import probeflow

from support.probe_rows import FRACTION, SEED, job_file
from support.run import run

# Input rows the job must reject, by reason (see test_job's dirty-rows test).
DIRTY = [
    ("192.0.2.300", "198.51.100.1", 4, 10.0, "bad_src_addr"),
    ("", "198.51.100.1", 4, 10.0, "bad_src_addr"),
    ("192.0.2.1", "198.51.100.1", 4, None, "null_rtt"),
    ("192.0.2.1", "198.51.100.1", 4, 1e9, "implausible_rtt"),
    ("192.0.2.1", "198.51.100.1", 4, 2e9, "implausible_rtt"),
    ("192.0.2.1", "198.51.100.1", 4, 3e9, "implausible_rtt"),
]


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    """The demo's generator (60 000 measurements) plus six dirty rows, through the job."""
    d = tmp_path_factory.mktemp("report")
    run(["generate", "--rows", "60000", "--out", str(d / "input"), "--seed", "8"])
    pq.write_table(
        pa.table(
            {
                "src_addr": pa.array([r[0] for r in DIRTY], pa.string()),
                "dst_addr": pa.array([r[1] for r in DIRTY], pa.string()),
                "ip_version": pa.array([r[2] for r in DIRTY], pa.int32()),
                "rtt": pa.array([r[3] for r in DIRTY], pa.float64()),
                "event_time": pa.array([1_767_300_000] * len(DIRTY), pa.int64()),
            }
        ),
        d / "input" / "dirty.parquet",
    )
    out = d / "out"
    run(["run", str(job_file(d, "report", f"{d / 'input'}/*.parquet", out))])
    return d, out


def report(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "probeflow.report", *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"probeflow.report failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def test_the_figures_are_the_manifests_and_the_inputs(output):
    d, out = output
    proc = report(out, "--html", d / "report.html", "--json", d / "figures.json", "--batches", "6", "--seq-len", "256")
    figures = json.loads((d / "figures.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())

    # The output as the manifest says.
    for split in ("train", "test"):
        shards = [s for s in manifest["shards"] if s["split"] == split]
        assert figures["splits"][split] == {
            "shards": len(shards),
            "rows": sum(s["rows"] for s in shards),
            "probes": sum(s["sources"] for s in shards),
            "measurements": sum(s["measurements"] for s in shards),
            "bytes": sum(s["bytes"] for s in shards),
        }
    assert [(s["path"], s["bytes"]) for s in figures["shards"]] == [(s["path"], s["bytes"]) for s in manifest["shards"]]
    assert figures["rejects_by_reason"] == manifest["totals"]["rejected_by_reason"] == dict(Counter(r[4] for r in DIRTY))
    assert figures["manifest"]["totals.rejected_rows"] == len(DIRTY)

    # The train rows, all read (fewer than --max-rows), against the job's input.
    train = figures["splits"]["train"]
    assert not figures["sampled"] and figures["rows_read"] == figures["rows_total"] == train["rows"]
    assert figures["measurements"] == train["measurements"]
    table = pq.read_table(sorted((d / "input").glob("part-*.parquet"))).to_pydict()
    probes, times, failed, versions = set(), [], 0, {}
    for src, version, rtt, t in zip(table["src_addr"], table["ip_version"], table["rtt"], table["event_time"]):
        canonical = probeflow.canonical_addr(src)
        if probeflow.split_of(canonical, SEED, FRACTION) != "train":
            continue
        probes.add(canonical)
        versions[canonical] = version
        times.append(t)
        failed += rtt < 0
    assert figures["probes"] == len(probes) == train["probes"]
    assert figures["measurements"] == len(times)
    assert figures["time_range"] == [min(times), max(times)]
    assert figures["failed_fraction"] == pytest.approx(failed / len(times))
    assert figures["ip_versions"]["IPv4"]["probes"] == sum(1 for v in versions.values() if v == 4)
    assert figures["ip_versions"]["IPv6"]["probes"] == sum(1 for v in versions.values() if v == 6)
    assert sum(figures["measurements_per_probe"]["counts"]) == len(probes)
    assert sum(figures["row_bytes"]["counts"]) == train["rows"]
    assert sum(figures["rtt_ms"]["counts"]) == len(times) - failed
    assert sum(figures["time_coverage"]["counts"]) == len(times)

    # What the model sees: 6 batches of 8 sequences of 256 tokens.
    assert figures["reader_options"]["seq_len"] == 256 and figures["sequences"] == 48
    contexts = sum(figures["timestamp_modes"].values())
    assert contexts == sum(figures["context_tokens"]["counts"]) == sum(figures["measurements_per_context"]["counts"])
    assert max(figures["context_tokens"]["edges"]) == 256
    assert 0 <= figures["padding_fraction"] < 0.5
    assert figures["field_orders"] and set(figures["field_orders"]) <= _orders()
    assert len(figures["examples"]) == 3 and all(m["src"] in probes for ex in figures["examples"] for m in ex)

    # The summary printed and the page.
    assert f"{train['rows']:,} rows" in proc.stdout and "implausible_rtt: 3" in proc.stdout
    page = (d / "report.html").read_text()
    embedded = re.search(r'<script type="application/json" id="probeflow-figures">(.*?)</script>', page, re.S)
    assert embedded and json.loads(html.unescape(embedded.group(1))) == figures
    assert page.count("<svg") >= 10
    for heading in ("Measurements per probe", "Row sizes", "RTT distribution", "Time coverage", "IPv4 / IPv6 mix",
                    "Rejected rows by reason", "Bytes per shard", "Context lengths", "Window sizes",
                    "Timestamp modes", "Field orders", "A few contexts, decoded"):
        assert heading in page, heading
    # Self-contained: nothing fetched from anywhere (the SVG namespace is a name).
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg"}


def _orders():
    """Field orders: of an untimed measurement (3 fields) and of a timed one (4)."""
    return {"".join(p) for p in chain(permutations("SDR"), permutations("SDRT"))}


def test_a_sampled_report_and_clear_errors(output, tmp_path):
    d, out = output
    proc = report(out, "--split", "test", "--max-rows", "20", "--batches", "1", "--no-packing", "--json", tmp_path / "f.json")
    figures = json.loads((tmp_path / "f.json").read_text())
    assert figures["sampled"] and figures["rows_read"] == 20 < figures["rows_total"]
    assert figures["split"] == "test" and figures["reader_options"]["packing"] is False
    assert "(sample)" in proc.stdout
    missing = report(tmp_path / "nothing", check=False)
    assert missing.returncode == 2 and "no such output directory" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = report(tmp_path / "empty", check=False)
    assert empty.returncode == 2 and "no manifest" in empty.stderr
    no_val = report(out, "--split", "val", check=False)
    assert no_val.returncode == 2 and "no val split" in no_val.stderr
    assert report(out, "--batches", "0", check=False).returncode == 2
    wrong_count = report(out, "--timestamp-modes", "0.4,0.3", check=False)
    assert wrong_count.returncode == 2 and "3 comma-separated numbers" in wrong_count.stderr
    assert "Traceback" not in wrong_count.stderr


def test_coordinator_status_counts_the_rejected_records_by_reason(output):
    """The monitor's count of rejected records, replayed from the event log, is the
    manifest's, by the kind's reasons."""
    d, out = output
    model = json.loads(run(["status", "--json", str(out)]).stdout)
    assert model["rejected"] == manifest_rejects(out) == dict(Counter(r[4] for r in DIRTY))


def manifest_rejects(out) -> dict:
    return json.loads((out / "manifest.json").read_text())["totals"]["rejected_by_reason"]
