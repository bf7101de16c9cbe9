"""The n-gram overlap job against an independent, plain-Python implementation of the
design notes' rules (``re``, ``string``, ``msgspec``, ``hashlib``; ``pyarrow`` only to
read and write Parquet and zstd), on a corpus with the Unicode cases Python and Rust
disagree on by default, short, empty and punctuation-only rows, records with and
without ``id``, bad rows, and every input format; also with its input on an
S3-compatible server, and killed (a worker, the coordinator) mid-job: the same bytes
after resume.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
import signal
import subprocess
import time

import pytest


from support.overlap import N_VALUES, check_against_reference, make_corpus, output_files, overlap_job, read_jsonl_gz, rejected, tokens_with_spans
from support.run import COORDINATOR, free_port, run
from support.s3 import BUCKET


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("overlap")
    eval_files, train_files = make_corpus(root / "in")
    return root, eval_files, train_files


@pytest.fixture(scope="module")
def local_run(corpus):
    root, eval_files, train_files = corpus
    out = root / "out-local"
    spec = overlap_job(root / "local.toml", eval_files, [root / "in" / "train"], out)
    run(["run", str(spec)])
    return out


def test_the_job_matches_the_plain_python_reference(corpus, local_run):
    root, eval_files, train_files = corpus
    files = [(str(p), p) for p in eval_files], [(str(p), p) for p in train_files]
    details, stats = check_against_reference(local_run, *files)
    # The corpus exercises what it is meant to: hashed and given ids, every eval
    # dataset and format, short rows' effective n, Unicode offsets, both n values.
    assert len(details) > 100
    assert {d["eval_dataset"] for d in details} == {"mmlu", "gsm8k", "arc", "hellaswag"}
    assert {d["train_path"].rsplit(".", 1)[-1] for d in details} >= {"jsonl", "gz", "zst", "parquet"}
    assert any(d["n"] not in N_VALUES for d in details), "no short row matched"
    assert any(d["instance_id"].isdigit() and len(d["instance_id"]) > 8 for d in details), "no hashed id"
    assert any("İ" in d["train_text"] for d in details) and any("Σ" in d["eval_text"] for d in details)
    assert all(s["instance_ids"] for s in stats), "a dataset without any overlap"
    reasons = [r["reason"] for r in rejected(local_run)]
    assert sorted(reasons) == ["bad_id", "invalid_json", "text_not_a_string", "text_not_a_string"]
    # The log of progress: snapshots and a summary per stage.
    assert list((local_run / "progress").glob("progress-*.jsonl"))
    assert json.loads((local_run / "_SUCCESS").read_text())["fingerprint"]


def test_offsets_point_at_the_ngram_in_the_original_text(local_run):
    for d in read_jsonl_gz(local_run / "stats" / "overlap_details.jsonl.gz"):
        for side in ("eval", "train"):
            text = d[f"{side}_text"]
            for a, b in d[f"{side}_offsets"]:
                tokens, _ = tokens_with_spans(text[a:b])
                assert " ".join(tokens) == d["ngram"], (side, text[a:b], d["ngram"])


def test_same_bytes_with_one_worker_and_with_index_groups(corpus, local_run, tmp_path):
    root, eval_files, train_files = corpus
    out = tmp_path / "out"
    # One worker instead of two: the same bytes.
    spec = overlap_job(tmp_path / "one.toml", eval_files, [root / "in" / "train"], out, workers=1)
    run(["run", str(spec)])
    assert output_files(out) == output_files(local_run)
    again = run(["run", str(spec)])
    assert "already complete" in again.stdout + again.stderr
    # An index too big for one scan's memory: scanned in groups (each training file
    # once per group), the same bytes.
    out = tmp_path / "out-groups"
    spec = overlap_job(tmp_path / "groups.toml", eval_files, [root / "in" / "train"], out,
                       index_memory="4KiB")
    proc = run(["run", str(spec)])
    summary = json.loads((out / "progress_summary.json").read_text())
    assert summary["index_groups"] == 8, summary
    # The progress counts a scan task per training file and index group.
    scans = 8 * len(train_files)
    log = proc.stdout + proc.stderr
    assert f"scan {scans}/{scans} " in log, log[-2000:]
    assert len(list((out / "_job" / "journal").glob("scan-*.json"))) == 8 * len(train_files)
    assert output_files(out) == output_files(local_run)
    # `status` of such a job stopped in its scan stage counts a scan task per training
    # file and index group.
    (out / "_SUCCESS").unlink()
    (out / "_job" / "journal" / "report-00000.json").unlink()
    scans = sorted((out / "_job" / "journal").glob("scan-*.json"))
    for f in scans[5:]:
        f.unlink()
    status = run(["status", str(out)]).stdout
    assert f"index tasks {len(eval_files)}/{len(eval_files)}" in status, status
    assert f"scan tasks 5/{8 * len(train_files)}" in status, status
    assert "report tasks 0/1" in status, status


def test_a_finished_output_over_changed_input_is_refused(corpus, tmp_path):
    """Rerunning a finished job whose input changed must not answer "already complete"
    with the old results: it exits 2 naming the file."""
    root, eval_files, _ = corpus
    train = tmp_path / "train"
    shutil.copytree(root / "in" / "train", train)
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "changed.toml", eval_files, [train], out)
    run(["run", str(spec)])
    victim = sorted(train.glob("*.jsonl"))[0]
    victim.write_text(victim.read_text() + json.dumps({"text": "one more document"}) + "\n")
    again = run(["run", str(spec)], check=False)
    assert again.returncode == 2, again.stdout + again.stderr
    assert str(victim) in again.stderr and "changed" in again.stderr, again.stderr


def test_an_unfinished_run_of_another_version_exits_2(corpus, tmp_path):
    """An output holding an unfinished run planned by another probeflow (other
    intermediate files) is not this job's to resume: exit 2, as docs/job.md promises
    for an output that is not this job's, naming the output and both formats."""
    root, eval_files, _ = corpus
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "old.toml", eval_files, [root / "in" / "train"], out)
    run(["run", str(spec)])
    (out / "_SUCCESS").unlink()
    job = out / "_job" / "journal" / "job.json"
    record = json.loads(job.read_text())
    record["plan"]["intermediate_format"] = 1
    job.write_text(json.dumps(record))
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "planned by another version" in proc.stderr and str(out) in proc.stderr, proc.stderr


def test_input_on_the_s3_server(corpus, local_run, s3):
    client, env = s3
    root, eval_files, train_files = corpus
    for p in [*eval_files, *train_files]:
        client.upload_file(str(p), BUCKET, f"overlap/{p.parent.name}/{p.name}")
    eval_urls = [f"s3://{BUCKET}/overlap/eval/{p.name}" for p in eval_files]
    out = root / "out-s3"
    spec = overlap_job(root / "s3.toml", eval_urls, [f"s3://{BUCKET}/overlap/train/*"], out)
    proc = subprocess.run([str(COORDINATOR), "run", str(spec)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = ([(u, p) for u, p in zip(eval_urls, eval_files)],
             [(f"s3://{BUCKET}/overlap/train/{p.name}", p) for p in train_files])
    check_against_reference(out, *files)


def test_sigkill_a_worker_and_the_coordinator_then_the_same_bytes(corpus, local_run, tmp_path):
    from support.cluster import Cluster
    root, eval_files, train_files = corpus
    port = free_port()
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "cluster.toml", eval_files, [root / "in" / "train"], out,
                       mode="cluster", port=port)
    c = Cluster(tmp_path, spec, port)
    try:
        # A worker killed while it holds a task it has finished but not reported.
        victim = c.start_worker("victim", fault="park-before-report")
        deadline = time.time() + 120
        while "parked before reporting" not in c.log("victim"):
            assert time.time() < deadline, c.log("victim")[-2000:]
            time.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        c.start_worker("w1")
        # The coordinator killed once a scan is journaled.
        log = c.restart_coordinator_once_journaled(out, "scan-*.json")
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, log[-3000:]
    assert "resumed from the journal" in log
    assert output_files(out) == output_files(local_run)


def test_a_worker_away_at_the_end_learns_the_overlap_job_is_done(corpus, local_run, tmp_path):
    """A cluster worker paused past its lease while the job finishes without it finds,
    when it comes back to no coordinator, its completion marker (`_SUCCESS`)
    and exits 0 at once, not after --give-up-after."""
    from support.cluster import Cluster, finish_without, stopped_in
    root, eval_files, train_files = corpus
    port = free_port()
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "away.toml", eval_files, [root / "in" / "train"], out,
                       mode="cluster", port=port, lease=3)
    c = Cluster(tmp_path, spec, port)
    away = finish_without(c, lambda: stopped_in(c, "away", r"running.*(index|scan)-", give_up=120))
    assert c.coordinator.returncode == 0
    assert output_files(out) == output_files(local_run)
    assert away.returncode == 0, c.log("away")[-3000:]
    assert "the job finished while this worker was away" in c.log("away")


def test_an_unhashable_row_is_rejected_whether_or_not_it_overlaps(tmp_path):
    """A training row without an id that Python reads but msgspec cannot hash (an
    integer beyond msgpack's range, a lone surrogate escape) is rejected even when it
    overlaps nothing: whether a row counts must not depend on what it matches (with
    several index groups, a matching group's rejects would be dropped without a
    trace). What Python reads as a float (`1e400` is inf, `NaN`) is a valid value."""
    passage = "the quick brown fox jumps over the lazy dog near the river bank today"
    eval_file = tmp_path / "eval" / "quiz-abcdef.jsonl"
    train_file = tmp_path / "train" / "train-0.jsonl"
    eval_file.parent.mkdir()
    train_file.parent.mkdir()
    eval_file.write_text(json.dumps({"id": "q0", "text": passage}) + "\n")
    train_file.write_text(
        json.dumps({"text": "before " + passage}) + "\n"
        + '{"text": "nothing in common at all", "meta": "\\ud800"}\n'
        + '{"text": "nothing in common either", "n": 18446744073709551616}\n'
        + '{"text": "a fine row", "n": 1e300, "s": "\\u00e9\\ud83d\\ude00", "m": 1e400, "x": NaN}\n'
        + '{"id": 7, "text": "an id, so no hash is needed", "n": 18446744073709551616}\n'
        + '{"text": "x", "n": ' + "9" * 4301 + '}\n')
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "unhashable.toml", [eval_file], [train_file], out, workers=1)
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reasons = sorted((r["row"], r["reason"]) for r in rejected(out))
    assert reasons == [(1, "unhashable_record"), (2, "unhashable_record"), (5, "invalid_json")], reasons
    summary = json.loads((out / "progress_summary.json").read_text())
    assert summary["totals"]["train_records"] == 3, summary["totals"]


def test_a_lone_surrogate_rejects_the_row_only_where_python_cannot_use_it(tmp_path):
    """Python's json.loads accepts a lone UTF-16 surrogate escape (`"\\ud800"`). A row
    with one is kept when it has an id and the surrogate is outside its text (Python
    never encodes it); without an id it cannot be hashed (`unhashable_record`); in the
    text (which no output can hold) it is `invalid_json`; in the id, `bad_id`."""
    passage = "the quick brown fox jumps over the lazy dog near the river bank today"
    eval_file = tmp_path / "eval" / "quiz-abcdef.jsonl"
    train_file = tmp_path / "train" / "train-0.jsonl"
    eval_file.parent.mkdir()
    train_file.parent.mkdir()
    eval_file.write_text(
        json.dumps({"id": "q0", "text": passage}) + "\n"
        + '{"text": "' + passage + ' again", "note": "\\ud800"}\n'
        + '{"id": "q2", "text": "lone \\udc00 here"}\n'
        + '{"id": "q3", "text": "' + passage + ' once more", "note": "\\ud800"}\n'
        + '{"id": "\\ud800", "text": "' + passage + '"}\n')
    train_file.write_text(
        json.dumps({"text": "before " + passage}) + "\n"
        + '{"text": "after ' + passage + '", "meta": "\\udbff!"}\n')
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "surrogate.toml", [eval_file], [train_file], out, workers=1)
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reasons = sorted((r["file"].rsplit("/", 1)[-1], r["row"], r["reason"]) for r in rejected(out))
    assert reasons == [("quiz-abcdef.jsonl", 1, "unhashable_record"), ("quiz-abcdef.jsonl", 2, "invalid_json"),
                       ("quiz-abcdef.jsonl", 4, "bad_id"), ("train-0.jsonl", 1, "unhashable_record")], reasons
    details = read_jsonl_gz(out / "stats" / "overlap_details.jsonl.gz")
    assert {(d["eval_row"], d["train_row"]) for d in details} == {(0, 0), (3, 0)}


def test_status_renders_the_overlap_job_from_its_event_log(local_run):
    """`coordinator status --json` on an overlap output: the model replayed from its
    event log, every stage done in its own unit, one timeline bar per attempt the log
    holds (read here with nothing but `json`)."""
    model = json.loads(run(["status", "--json", str(local_run)]).stdout)
    assert (model["kind"], model["state"], model["source"], model["missing"]) == (
        "ngram_overlap", "succeeded", "event_log", [])
    assert model["stages"] and all(s["done"] == s["tasks"] > 0 for s in model["stages"])
    units = {s["name"]: s["unit"] for s in model["stages"]}
    assert units.get("index") == units.get("scan") == "input_bytes", units
    assert all(s["units_done"] == s["units_planned"] > 0 for s in model["stages"])
    attempts = set()
    for batch in sorted((local_run / "_job" / "events").glob("*.jsonl")):
        for line in batch.read_text().splitlines()[1:]:
            e = json.loads(line)
            if e["event"] in ("attempt_started", "attempt_ended"):
                attempts.add((e["task"]["stage"], e["task"]["index"], e["attempt"]))
    assert len(model["timeline"]) == len(attempts) == sum(s["tasks"] for s in model["stages"])
    assert model["rejected"] == dict(Counter(r["reason"] for r in rejected(local_run)))
