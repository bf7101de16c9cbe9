"""The cleaning pass (``[clean]``): the training files written again under
``cleaned/`` in their own formats (JSONL, two-member gzip, zstd, Parquet) without
their contamination, checked against the plain-Python reference's detail records and
an independent reading of the cut rule; then the overlap job run again on the cleaned
corpus finds nothing. A file without contamination, and every untouched row, keep
their bytes. Killed mid-clean and resumed: the same bytes. Training files and output
on an S3-compatible server: the same cleaned bytes.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import string
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.overlap import (CUT, check_against_reference, make_corpus, output_files, overlap_job, read_jsonl_gz,
                             sentence, words)
from support.run import free_port, run

EDGE_SEPARATORS = re.compile(rf"^[\s{re.escape(string.punctuation)}]+|[\s{re.escape(string.punctuation)}]+$")
DROP = "[clean]\nmode = \"drop\"\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    eval_files, train_files = make_corpus(root / "in")
    # A training file that overlaps nothing (its own words): copied byte for byte.
    rng = random.Random(5)
    vocab = [w + "q" for w in words(rng, 500)]
    untouched = root / "in" / "train" / "sub" / "train-untouched.jsonl.gz"
    untouched.parent.mkdir()
    body = "".join(json.dumps({"id": f"u{i}", "text": sentence(rng, vocab, 40)}) + "\n" for i in range(30))
    untouched.write_bytes(gzip.compress(body.encode(), compresslevel=1, mtime=0))
    train_files = sorted([*train_files, untouched])
    files = [(str(p), p) for p in eval_files], [(str(p), p) for p in train_files]
    return root, eval_files, train_files, files


def clean_job(root: Path, name: str, eval_files, section: str, **kw) -> Path:
    out = root / f"out-{name}"
    spec = overlap_job(root / f"{name}.toml", eval_files, [root / "in" / "train"], out, extra=section, **kw)
    run(["run", str(spec)])
    return out


def lines_of(path: Path) -> list[bytes]:
    """A JSONL file's lines (decompressed), each with its line feed."""
    if path.name.endswith(".gz"):
        data = gzip.decompress(path.read_bytes())
    elif path.name.endswith(".zst"):
        with pa.input_stream(str(path), compression="zstd") as f:
            data = f.read()
    else:
        data = path.read_bytes()
    return data.splitlines(keepends=True)


def rows_of(path: Path) -> list:
    """Rows as the job numbers them: (row, record or raw line); blank lines skipped."""
    if path.suffix == ".parquet":
        return list(enumerate(pq.read_table(path).to_pylist()))
    rows = [line for line in lines_of(path) if line.strip(b" \t\r\n")]
    return list(enumerate(rows))


def matches_by_doc(details):
    spans = defaultdict(list)
    instances = defaultdict(set)
    for d in details:
        key = (d["train_path"], d["train_row"])
        spans[key] += [tuple(o) for o in d["train_offsets"]]
        instances[key].add((d["eval_dataset"], d["instance_id"]))
    return spans, instances


def expected_cut(text: str, spans, context=12, min_piece=15, max_pieces=3):
    """The cut rule read from docs/overlap.md, code point by code point."""
    gone = [False] * len(text)
    for a, b in spans:
        for i in range(max(0, a - context), min(len(text), b + context)):
            gone[i] = True
    pieces, at = [], 0
    while at < len(text):
        if gone[at]:
            at += 1
            continue
        end = at
        while end < len(text) and not gone[end]:
            end += 1
        pieces.append(text[at:end])
        at = end
    # Without the separators (of the default tokenizer) at their ends.
    pieces = [EDGE_SEPARATORS.sub("", p) for p in pieces]
    kept = [p for p in pieces if p and len(p) >= min_piece]
    if not kept:
        return "dropped", "nothing_left", None
    if len(kept) > max_pieces:
        return "dropped", "too_many_pieces", None
    return "cut", "overlaps", "\n".join(kept)


def text_of(row, path: Path):
    return row["text"] if path.suffix == ".parquet" else json.loads(row)["text"]


def rerun_finds_nothing(root: Path, name: str, eval_files, cleaned: Path):
    out = root / f"out-{name}-again"
    spec = overlap_job(root / f"{name}-again.toml", eval_files, [cleaned], out)
    run(["run", str(spec)])
    again = read_jsonl_gz(out / "stats" / "overlap_details.jsonl.gz")
    assert again == [], f"{len(again)} overlaps left, e.g. {again[:1]}"
    assert all(not s["instance_ids"] for s in
               map(json.loads, (out / "stats" / "overlap_stats.jsonl").read_text().splitlines()))


def test_drop_leaves_out_every_contaminated_document_and_nothing_else(corpus):
    root, eval_files, train_files, files = corpus
    out = clean_job(root, "drop", eval_files, DROP)
    details, _ = check_against_reference(out, *files)
    spans, instances = matches_by_doc(details)
    manifest = read_jsonl_gz(out / "stats" / "clean_manifest.jsonl.gz")
    assert [(m["train_path"], m["train_row"]) for m in manifest] == sorted(spans)
    for m in manifest:
        key = (m["train_path"], m["train_row"])
        assert (m["action"], m["reason"], m["removed"], m["chars_left"]) == ("dropped", "overlaps", [], 0)
        assert {tuple(i) for i in m["eval_instances"]} == instances[key]
    train_dir = root / "in" / "train"
    for path in train_files:
        cleaned = out / "cleaned" / path.relative_to(train_dir)
        assert cleaned.exists(), cleaned
        dropped = {row for (p, row) in spans if p == str(path)}
        if not dropped:
            assert cleaned.read_bytes() == path.read_bytes(), f"{path.name} is not the same bytes"
            continue
        if path.suffix == ".parquet":
            assert pq.read_schema(cleaned) == pq.read_schema(path)
            assert pq.ParquetFile(cleaned).metadata.num_row_groups == pq.ParquetFile(path).metadata.num_row_groups
            want = [r for i, r in rows_of(path) if i not in dropped]
            assert pq.read_table(cleaned).to_pylist() == want
        else:
            # Every line but the dropped rows', the same bytes (blank and rejected
            # lines included).
            rows = iter(range(10**9))
            want = [line for line in lines_of(path)
                    if not (line.strip(b" \t\r\n") and next(rows) in dropped)]
            assert lines_of(cleaned) == want, path.name
    assert sum(len({r for (p, r) in spans if p == str(f)}) for f in train_files) == len(manifest)
    summary = json.loads((out / "_SUCCESS").read_text())["summary"]
    assert f"{len(manifest)} documents dropped, 0 cut" in summary
    from probeflow.overlap_report import figures
    assert figures(str(out)).cleaning == {
        "dropped": len(manifest), "cut": 0, "reasons": {"dropped: overlaps": len(manifest)},
        "chars": sum(m["chars"] for m in manifest), "chars_removed": sum(m["chars"] for m in manifest)}
    rerun_finds_nothing(root, "drop", eval_files, out / "cleaned")


def test_cut_removes_each_match_with_its_context_and_keeps_the_rest_of_the_record(corpus):
    root, eval_files, train_files, files = corpus
    out = clean_job(root, "cut", eval_files, CUT)
    details, _ = check_against_reference(out, *files)
    spans, _ = matches_by_doc(details)
    manifest = {(m["train_path"], m["train_row"]): m
                for m in read_jsonl_gz(out / "stats" / "clean_manifest.jsonl.gz")}
    assert set(manifest) == set(spans)
    actions = defaultdict(int)
    train_dir = root / "in" / "train"
    for path in train_files:
        original = dict(rows_of(path))
        cleaned_path = out / "cleaned" / path.relative_to(train_dir)
        got = [row for _, row in rows_of(cleaned_path)]
        want = []
        for i, row in original.items():
            key = (str(path), i)
            if key not in spans:
                want.append(row)
                continue
            text = text_of(row, path)
            action, reason, new = expected_cut(text, spans[key])
            m = manifest[key]
            assert (m["action"], m["reason"], m["chars"]) == (action, reason, len(text)), key
            actions[action] += 1
            if action == "dropped":
                continue
            assert m["chars_left"] == len(new)
            # The rest of the record as it was: only the text changes.
            if path.suffix == ".parquet":
                want.append({**row, "text": new})
            else:
                record = json.loads(row)
                record["text"] = new
                want.append(record)
        assert len(got) == len(want), path.name
        if path.suffix != ".parquet":
            got = [json.loads(line) if isinstance(w, dict) else line for line, w in zip(got, want)]
        assert got == want, path.name
    # The corpus has documents cut, and dropped with nothing left (too many pieces is
    # covered by the rule's unit tests).
    assert actions["cut"] > 10 and actions["dropped"] > 0, dict(actions)
    assert {m["reason"] for m in manifest.values() if m["action"] == "dropped"} >= {"nothing_left"}
    rerun_finds_nothing(root, "cut", eval_files, out / "cleaned")


def test_killed_while_cleaning_then_resumed_the_same_bytes(corpus, tmp_path):
    from support.cluster import Cluster
    root, eval_files, train_files, files = corpus
    local = clean_job(root, "cut-local", eval_files, CUT)
    port = free_port()
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "cluster.toml", eval_files, [root / "in" / "train"], out,
                       mode="cluster", port=port, extra=CUT)
    c = Cluster(tmp_path, spec, port)
    try:
        # Each result reported 0.3 s late: the job is mid-clean when the first clean
        # result is journaled.
        c.start_worker("w1", fault="slow-report:300")
        log = c.restart_coordinator_once_journaled(out, "clean-*.json")
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, log[-3000:]
    assert "resumed from the journal" in log
    assert output_files(out) == output_files(local)
    assert not [p for p in (out / "_job").rglob("edits-*")], "the edits files are intermediate"


def test_cleaning_training_files_on_the_s3_server_into_an_output_there(corpus, s3):
    """Training files on S3, the output on S3: the cleaned objects are under
    ``cleaned/`` at their paths below the shared prefix, with the same bytes as the
    same job's on local files."""
    import subprocess
    from support.run import COORDINATOR
    from support.s3 import BUCKET
    client, env = s3
    root, eval_files, train_files, files = corpus
    local = clean_job(root, "drop-for-s3", eval_files, DROP)
    train_dir = root / "in" / "train"
    for p in train_files:
        client.upload_file(str(p), BUCKET, f"clean/train/{p.relative_to(train_dir)}")
    out = f"s3://{BUCKET}/clean-out"
    spec = overlap_job(root / "s3-clean.toml", eval_files, [f"s3://{BUCKET}/clean/train/"], out, extra=DROP)
    proc = subprocess.run([str(COORDINATOR), "run", str(spec)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for p in train_files:
        rel = str(p.relative_to(train_dir))
        got = client.get_object(Bucket=BUCKET, Key=f"clean-out/cleaned/{rel}")["Body"].read()
        assert got == (local / "cleaned" / rel).read_bytes(), rel
    manifest = gzip.decompress(
        client.get_object(Bucket=BUCKET, Key="clean-out/stats/clean_manifest.jsonl.gz")["Body"].read())
    assert len(manifest.splitlines()) == len(read_jsonl_gz(local / "stats" / "clean_manifest.jsonl.gz"))


def test_the_same_cleaned_bytes_with_index_groups_and_one_worker(corpus):
    """Scanned in several index groups (a document's matches then come from several
    scans) by one worker: the cleaned files and the manifest are the same bytes."""
    root, eval_files, train_files, files = corpus
    one = clean_job(root, "cut-one-group", eval_files, CUT)
    many = clean_job(root, "cut-groups", eval_files, CUT, index_memory="16KiB", workers=1)
    summary = json.loads((many / "progress_summary.json").read_text())
    assert summary["index_groups"] > 1
    names = [p.relative_to(one) for p in sorted((one / "cleaned").rglob("*")) if p.is_file()]
    assert len(names) == len(train_files)
    for name in names:
        assert (many / name).read_bytes() == (one / name).read_bytes(), name
    manifest = "stats/clean_manifest.jsonl.gz"
    assert (many / manifest).read_bytes() == (one / manifest).read_bytes()


def test_a_cut_that_would_join_an_eval_ngram_drops_the_document(tmp_path):
    """Cutting "zeta eta theta iota" with its context out of a document joins "alpha
    beta" and "gamma delta", another eval row's 4-gram: the job finds that in the index
    and drops the document instead (``cut_leaves_a_match``); a document whose pieces
    join into nothing is cut. The cleaned corpus has no overlap either way."""
    eval_dir, train_dir = tmp_path / "eval", tmp_path / "train"
    eval_dir.mkdir()
    train_dir.mkdir()
    (eval_dir / "seam.jsonl").write_text(
        json.dumps({"id": "joined", "text": "alpha beta gamma delta"}) + "\n"
        + json.dumps({"id": "copied", "text": "zeta eta theta iota"}) + "\n")
    left, middle = "lorem ipsum dolor alpha beta", " kkkkk wwww zeta eta theta iota vvvvv xxxx "
    docs = [left + middle + "gamma delta sit amet consectetur",
            left + middle + "omega psi sit amet consectetur"]
    (train_dir / "t.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": d}) + "\n"
                                               for i, d in enumerate(docs)))
    section = CUT
    out = tmp_path / "out"
    run(["run", str(overlap_job(tmp_path / "seam.toml", [eval_dir], [train_dir], out, n=[4], extra=section))])
    # The rule alone would leave the other row's n-gram across the line feed.
    start = docs[0].index("zeta")
    _, _, would = expected_cut(docs[0], [(start, start + len("zeta eta theta iota"))])
    assert would == "lorem ipsum dolor alpha beta\ngamma delta sit amet consectetur"
    manifest = read_jsonl_gz(out / "stats" / "clean_manifest.jsonl.gz")
    assert [(m["train_row"], m["action"], m["reason"]) for m in manifest] == [
        (0, "dropped", "cut_leaves_a_match"), (1, "cut", "overlaps")]
    assert [json.loads(line)["text"] for line in (out / "cleaned" / "t.jsonl").read_text().splitlines()] == [
        "lorem ipsum dolor alpha beta\nomega psi sit amet consectetur"]
    again = tmp_path / "again"
    run(["run", str(overlap_job(tmp_path / "again.toml", [eval_dir], [out / "cleaned"], again, n=[4]))])
    assert read_jsonl_gz(again / "stats" / "overlap_details.jsonl.gz") == []
