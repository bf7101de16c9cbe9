"""The completion record, the same for every job kind: one marker name (`_SUCCESS`), the
list of every final output file with its size and blake3, and `coordinator verify`
checking any kind's output from it (files present with their sizes and digests, nothing
unlisted in the kind's final directories). Outputs finished by an earlier release (the
overlap job's `.SUCCESS`, a record without a file list) are still recognised, and
`verify` says what they lack.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from support.outputs import make_output
from support.overlap import CUT, make_corpus, overlap_job
from support.run import run

from blake3 import blake3


def blake3_hex(data: bytes) -> str:
    return blake3(data).hexdigest()


@pytest.fixture(scope="module")
def overlap_out(tmp_path_factory):
    """A finished overlap output with every final directory: stats/, tmp/, cleaned/
    (`[clean] cut`) and rejects/ (the corpus has bad rows)."""
    root = tmp_path_factory.mktemp("completion-overlap")
    eval_files, _ = make_corpus(root / "in")
    out = root / "out"
    run(["run", str(overlap_job(root / "job.toml", eval_files, [root / "in" / "train"], out, extra=CUT))])
    return out


@pytest.fixture(scope="module")
def probe_rows_out(tmp_path_factory):
    return make_output(tmp_path_factory.mktemp("completion-probe-rows"), "out")


@pytest.fixture
def overlap_copy(overlap_out, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(overlap_out, dst)
    return dst


def record_of(out) -> dict:
    return json.loads((out / "_SUCCESS").read_text())


@pytest.mark.parametrize("kind", ["ngram_overlap", "probe_rows"])
def test_every_kind_writes_one_marker_listing_its_final_files(kind, overlap_out, probe_rows_out):
    out = overlap_out if kind == "ngram_overlap" else probe_rows_out
    assert not (out / ".SUCCESS").exists(), "one marker name for every kind"
    record = record_of(out)
    assert record["kind"] == kind and record["fingerprint"] and record["release"]
    files = record["outputs"]["files"]
    assert files, "the record lists the output's files"
    assert [f["path"] for f in files] == sorted(f["path"] for f in files)
    for f in files:
        data = (out / f["path"]).read_bytes()
        assert (len(data), blake3_hex(data)) == (f["bytes"], f["blake3"]), f["path"]
    # Every file in the kind's final directories is listed, and nothing else is.
    dirs = record["outputs"]["dirs"]
    on_disk = sorted(str(p.relative_to(out)) for d in dirs if (out / d).exists()
                     for p in (out / d).rglob("*") if p.is_file())
    assert on_disk == sorted(f["path"] for f in files if f["path"].split("/")[0] in dirs)
    if kind == "ngram_overlap":
        assert set(dirs) >= {"stats", "cleaned", "rejects"}
        listed = {f["path"].split("/")[0] for f in files}
        assert {"stats", "tmp", "cleaned", "rejects"} <= listed, listed
        assert "progress_summary.json" in {f["path"] for f in files}
    else:
        assert set(dirs) >= {"train", "test", "rejects"}
        assert "manifest.json" in {f["path"] for f in files}


@pytest.mark.parametrize("kind", ["ngram_overlap", "probe_rows"])
def test_status_and_verify_agree_on_a_finished_output(kind, overlap_out, probe_rows_out):
    out = overlap_out if kind == "ngram_overlap" else probe_rows_out
    status = run(["status", str(out)]).stdout
    assert f"finished ({kind} job)" in status, status
    verified = run(["verify", str(out)], check=False)
    assert verified.returncode == 0, verified.stderr
    n = len(record_of(out)["outputs"]["files"])
    assert f"{kind} output" in verified.stdout and f"{n} files" in verified.stdout, verified.stdout


def _flip(rel_glob):
    def damage(out):
        path = sorted(out.glob(rel_glob))[0]
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))
        return str(path.relative_to(out)), "blake3"
    return damage


def _remove(rel_glob):
    def damage(out):
        path = sorted(out.glob(rel_glob))[0]
        path.unlink()
        return str(path.relative_to(out)), "missing"
    return damage


def _stray(rel):
    def damage(out):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("{}\n")
        return rel, "not listed"
    return damage


def _truncate(rel_glob):
    def damage(out):
        path = sorted(out.glob(rel_glob))[0]
        path.write_bytes(path.read_bytes()[:-1])
        return str(path.relative_to(out)), "bytes"
    return damage


@pytest.mark.parametrize("damage", [
    _flip("cleaned/*.jsonl"), _flip("stats/overlap_details.jsonl.gz"), _truncate("tmp/*.gz"),
    _remove("stats/overlap_stats.jsonl"), _remove("rejects/*"), _stray("stats/extra.jsonl"),
    _stray("cleaned/sub/extra.jsonl"), _stray("rejects/train-09999.jsonl"),
], ids=["cleaned-flipped", "details-flipped", "instances-cut-short", "stats-missing", "rejects-missing",
        "stray-in-stats", "stray-in-cleaned", "stray-in-rejects"])
def test_verify_finds_what_changed_in_an_overlap_output(overlap_copy, damage):
    rel, what = damage(overlap_copy)
    verified = run(["verify", str(overlap_copy)], check=False)
    assert verified.returncode == 1, (verified.stdout, verified.stderr)
    assert rel in verified.stderr and what in verified.stderr, verified.stderr
    assert "ngram_overlap output" in verified.stderr, verified.stderr


def test_an_overlap_output_of_an_earlier_release_is_recognised(tmp_path):
    """The overlap job's marker was `.SUCCESS`, its record without `release` or file list:
    `status`, a run again and the report still see a finished output; `verify` says what
    it lacks."""
    eval_files, _ = make_corpus(tmp_path / "in")
    out = tmp_path / "out"
    job = overlap_job(tmp_path / "job.toml", eval_files, [tmp_path / "in" / "train"], out)
    run(["run", str(job)])
    record = record_of(out)
    old = {k: record[k] for k in ("kind", "fingerprint", "summary", "inputs")}  # the last release's
    (out / "_SUCCESS").unlink()
    (out / ".SUCCESS").write_text(json.dumps(old))
    status = run(["status", str(out)]).stdout
    assert "finished (ngram_overlap job)" in status, status
    again = run(["run", str(job)])
    assert "already complete" in again.stdout, again.stdout + again.stderr
    assert not (out / "_SUCCESS").exists()
    verified = run(["verify", str(out)], check=False)
    assert verified.returncode == 1
    assert "earlier release" in verified.stderr and "lists no output files" in verified.stderr, verified.stderr
    assert ".SUCCESS" in verified.stderr and "ngram_overlap output" in verified.stderr, verified.stderr
    report = subprocess.run([sys.executable, "-m", "probeflow.overlap_report", str(out),
                             "--json", str(tmp_path / "f.json")], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr[-2000:]


def test_a_probe_rows_output_of_an_earlier_release_gets_a_message(probe_rows_out, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(probe_rows_out, copy)
    record = record_of(copy)
    del record["outputs"], record["release"]
    (copy / "_SUCCESS").write_text(json.dumps(record))
    verified = run(["verify", str(copy)], check=False)
    assert verified.returncode == 1
    assert "earlier release" in verified.stderr and "lists no output files" in verified.stderr, verified.stderr
    assert "probe_rows output" in verified.stderr, verified.stderr
    # The reader still reads it (its manifest has every shard's digest).
    status = run(["status", str(copy)]).stdout
    assert "finished (probe_rows job)" in status, status


def test_verify_on_an_unfinished_output_names_the_marker(tmp_path):
    verified = run(["verify", str(tmp_path)], check=False)
    assert verified.returncode == 1
    assert "_SUCCESS" in verified.stderr and "not finished" in verified.stderr, verified.stderr


def test_the_overlap_report_refuses_another_kinds_output(probe_rows_out):
    done = subprocess.run([sys.executable, "-m", "probeflow.overlap_report", str(probe_rows_out)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "a probe_rows output, not an overlap output" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
