"""`python -m probeflow.overlap_report` on an overlap job's output: its figures against
the plain-Python reference of the job's rules (sets over every detail record, not the
report's streaming counts), its sample against the details, its page standing alone."""

from __future__ import annotations

import dataclasses
import gzip
import html
import json
import re
import shutil
import subprocess
import sys
from collections import defaultdict

import pytest

from probeflow import overlap_report
from probeflow.errors import OutputError

from support.overlap import check_against_reference, make_corpus, overlap_job, read_jsonl_gz, reference
from support.run import run
from support.s3 import BUCKET

STATS, DETAILS = "stats/overlap_stats.jsonl", "stats/overlap_details.jsonl.gz"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("overlap-report")
    eval_files, train_files = make_corpus(root / "in")
    out = root / "out"
    run(["run", str(overlap_job(root / "job.toml", eval_files, [root / "in" / "train"], out))])
    files = [(str(p), p) for p in eval_files], [(str(p), p) for p in train_files]
    stats, details, _, _ = reference(*files)
    return out, stats, details


def test_figures_are_the_references_counts(job):
    out, stats, details = job
    f = overlap_report.figures(out, top=1000, sample=5)
    assert details, "the corpus has overlaps"
    assert f.details == len(details)
    assert f.contamination == [
        {
            "eval_dataset": s["eval_dataset"],
            "n": s["n"],
            "num_instances": s["num_instances"],
            "contaminated": len(s["instance_ids"]),
            "fraction": len(s["instance_ids"]) / s["num_instances"],
        }
        for s in stats
    ]
    assert any(c["contaminated"] for c in f.contamination)

    docs = defaultdict(set)  # (train file, dataset) → training documents
    insts = defaultdict(set)  # (train file, dataset) → instances
    leaked = defaultdict(set)  # (dataset, instance) → training documents
    gram_docs, gram_insts = defaultdict(set), defaultdict(set)
    for d in details:
        doc = (d["train_path"], d["train_row"])
        cell = (d["train_path"], d["eval_dataset"])
        docs[cell].add(doc)
        insts[cell].add(str(d["instance_id"]))
        leaked[(d["eval_dataset"], str(d["instance_id"]))].add(doc)
        gram_docs[(d["n"], d["ngram"])].add(doc)
        gram_insts[(d["n"], d["ngram"])].add((d["eval_dataset"], str(d["instance_id"])))
    assert f.training_documents == len({(d["train_path"], d["train_row"]) for d in details})

    m = f.matrix
    assert m["train_files"] == sorted({d["train_path"] for d in details})
    for i, t in enumerate(m["train_files"]):
        for j, ds in enumerate(m["eval_datasets"]):
            assert m["documents"][i][j] == len(docs[(t, ds)]), (t, ds)
            assert m["instances"][i][j] == len(insts[(t, ds)]), (t, ds)

    assert [(x["eval_dataset"], x["instance_id"], x["training_documents"]) for x in f.most_leaked] == sorted(
        ((ds, i, len(d)) for (ds, i), d in leaked.items()), key=lambda x: (-x[2], x[0], x[1]))
    assert [(h["n"], h["ngram"], h["training_documents"], h["eval_instances"]) for h in f.hot_ngrams] == sorted(
        ((n, g, len(gram_docs[(n, g)]), len(gram_insts[(n, g)])) for n, g in gram_docs),
        key=lambda x: (-x[2], -x[3], x[0], x[1]))


def test_the_sample_is_seeded_and_made_of_detail_records(job):
    out, _, details = job
    a = overlap_report.figures(out, sample=7, seed=3)
    assert a.sample == overlap_report.figures(out, sample=7, seed=3).sample
    assert len(a.sample) == min(7, len(details))
    keyed = {(d["train_path"], d["train_row"], d["eval_path"], d["eval_row"], d["n"], d["ngram"]): d for d in details}
    for s in a.sample:
        d = keyed[(s["train_path"], s["train_row"], s["eval_path"], s["eval_row"], s["n"], s["ngram"])]
        assert s["eval_offsets"] == d["eval_offsets"] and s["train_offsets"] == d["train_offsets"]
    other = overlap_report.figures(out, sample=7, seed=4).sample
    assert len(details) <= 7 or other != a.sample, "another seed draws another sample"


def test_the_page_marks_the_matched_spans_and_stands_alone(job, tmp_path):
    out, _, _ = job
    page, figures_json = tmp_path / "report.html", tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "-m", "probeflow.overlap_report", str(out), "--html", str(page),
         "--json", str(figures_json), "--sample", "5"],
        capture_output=True, text=True, check=True)
    assert "contaminated" in done.stdout and "hot n-grams" in done.stdout
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "no outside resources"
    embedded = json.loads(re.search(r'<script type=application/json id=figures>(.*?)</script>', text, re.S)
                          .group(1).replace("<\\/", "</"))
    assert embedded == json.loads(figures_json.read_text())
    # Every sampled match's spans are marked, each with the text at its offsets.
    marked = [html.unescape(m) for m in re.findall(r"<mark>(.*?)</mark>", text, re.S)]
    for s in embedded["sample"]:
        for side in ("eval", "train"):
            t = s[f"{side}_text"]
            start, end = s[f"{side}_offsets"][0]
            assert t[start:end] in marked, (side, t[start:end])
        # The n-gram as the tokenizer sees it (lowered, joined by spaces) is the match.
        assert s["eval_offsets"]
    assert len(marked) >= 2 * len(embedded["sample"])


def test_training_paths_listed_out_of_sort_order_are_reported(tmp_path):
    """`[train] paths` as anyone may write them, not in sort order (`web/` before
    `books/`): the job lists the files in that order, its details follow it, and the
    report reads them (it compared paths as strings, and refused the job's own output)."""
    eval_files, train_files = make_corpus(tmp_path / "in")
    web, books = tmp_path / "in" / "train" / "web", tmp_path / "in" / "train" / "books"
    web.mkdir()
    books.mkdir()
    listed = []
    for i, f in enumerate(sorted(train_files)):
        moved = (web if i < 2 else books) / f.name
        f.rename(moved)
        listed.append(moved)
    listed = sorted(listed[:2]) + sorted(listed[2:])  # web's files, then books'
    out = tmp_path / "out"
    run(["run", str(overlap_job(tmp_path / "job.toml", eval_files, [f"{web}/", f"{books}/*"], out))])
    details = read_jsonl_gz(out / DETAILS)
    files_met = list(dict.fromkeys(d["train_path"] for d in details))
    assert files_met == [str(f) for f in listed if str(f) in files_met] and len(files_met) > 2
    assert files_met != sorted(files_met), "the details are not in the paths' sort order"
    _, want = check_against_reference(out, [(str(p), p) for p in eval_files], [(str(p), p) for p in listed])
    done = subprocess.run([sys.executable, "-m", "probeflow.overlap_report", str(out),
                           "--json", str(tmp_path / "figures.json")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["details"] == len(details)
    assert figures["training_documents"] == len({(d["train_path"], d["train_row"]) for d in details})


def test_a_training_file_listed_by_two_paths_is_refused(tmp_path):
    """A file two `[train]` paths both match (in either order) would be read twice and
    its documents counted twice: the job refuses it before anything runs, naming it."""
    eval_files, train_files = make_corpus(tmp_path / "in")
    train = tmp_path / "in" / "train"
    for paths in ([f"{train}/*.parquet", f"{train}/"], [f"{train}/", f"{train}/*.parquet"]):
        out = tmp_path / "out"
        done = run(["run", str(overlap_job(tmp_path / "twice.toml", eval_files, paths, out))], check=False)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "train-00003.parquet is listed twice" in done.stderr, done.stderr
        assert not (out / "_SUCCESS").exists()


def test_not_an_overlap_output_is_a_clear_error(tmp_path):
    with pytest.raises(OutputError, match="not a finished overlap output"):
        overlap_report.figures(tmp_path)
    done = subprocess.run([sys.executable, "-m", "probeflow.overlap_report", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "not a finished overlap output" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_options_and_unwritable_pages_are_clear_errors(job, tmp_path):
    out, _, _ = job
    report = [sys.executable, "-m", "probeflow.overlap_report", str(out)]
    done = subprocess.run([*report, "--sample", "-1"], capture_output=True, text=True)
    assert done.returncode == 2 and "at least 0" in done.stderr
    done = subprocess.run([*report, "--html", str(tmp_path / "no-such-dir" / "r.html")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "no-such-dir" in done.stderr and "Traceback" not in done.stderr


def test_highlights_keep_the_text_once_and_long_spans_whole():
    long = "a" * 1000 + "X" * 900 + "b" * 500
    marked = overlap_report._highlight(long, [[1000, 1900]])
    assert "<mark>" + "X" * 900 + "</mark>" in marked
    assert marked.startswith("…") and marked.endswith("…")
    # Overlapping occurrences: every character shown once, in order.
    shown = overlap_report._highlight("hello big world", [[6, 9], [6, 15]])
    assert re.sub(r"</?mark>", "", shown) == "hello big world"
    assert overlap_report._highlight("<b>", []) == "&lt;b&gt;"


def test_an_output_on_the_s3_server_gives_the_same_figures(job, s3, tmp_path):
    """The output uploaded to an S3 API (moto's server) and read from there, in ranges
    smaller than its details file: the same figures as from the disk."""
    client, env = s3
    out, _, _ = job
    for p in out.rglob("*"):
        if p.is_file():
            client.upload_file(str(p), BUCKET, f"report/out/{p.relative_to(out)}")
    url = f"s3://{BUCKET}/report/out"
    figures_json = tmp_path / "s3.json"
    code = (
        "import sys; from probeflow import overlap_report as r; "
        "r.REMOTE_PART_BYTES = 4096; sys.exit(r.main(sys.argv[1:]))"
    )
    done = subprocess.run([sys.executable, "-c", code, url, "--json", str(figures_json)],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "stats" / "overlap_details.jsonl.gz").stat().st_size > 4096, "read in several ranges"
    local = json.loads(json.dumps(dataclasses.asdict(overlap_report.figures(out))))
    remote = json.loads(figures_json.read_text())
    assert remote["output"] == url
    local.pop("output"), remote.pop("output")
    assert remote == local
    # An output that is not there is a clear error, not a trace.
    done = subprocess.run([sys.executable, "-m", "probeflow.overlap_report", f"s3://{BUCKET}/report/none"],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "not a finished overlap output" in done.stderr, done.stderr


def _damage_json(rel: str, change):
    """A damage that rewrites every record of the JSONL file `rel` with `change`."""
    def damage(out):
        path = out / rel
        gz = rel.endswith(".gz")
        lines = (gzip.decompress(path.read_bytes()) if gz else path.read_bytes()).decode().split("\n")
        records = [json.loads(line) for line in lines if line]
        for record in records:
            change(record)
        body = "".join(json.dumps(r) + "\n" for r in records).encode()
        path.write_bytes(gzip.compress(body) if gz else body)
    return damage


def _reorder_details(change):
    """A damage that puts the detail records in another order: `change` reorders the
    list of records."""
    def damage(out):
        path = out / DETAILS
        records = [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in change(records)).encode()))
    return damage


def _a_file_comes_back(records):
    """The first training file's first document moved after the next file's records."""
    first = records[0]["train_path"]
    doc = [r for r in records if (r["train_path"], r["train_row"]) == (first, records[0]["train_row"])]
    rest = records[len(doc):]
    later = next(i for i, r in enumerate(rest) if r["train_path"] != first)
    return rest[:later + 1] + doc + rest[later + 1:]


def _rows_descend(records):
    """The first training file's first two documents swapped."""
    first = (records[0]["train_path"], records[0]["train_row"])
    a = [r for r in records if (r["train_path"], r["train_row"]) == first]
    second = (records[len(a)]["train_path"], records[len(a)]["train_row"])
    assert second[0] == first[0], "the corpus's first file has two contaminated documents"
    b = [r for r in records if (r["train_path"], r["train_row"]) == second]
    return b + a + records[len(a) + len(b):]


def _truncate(rel: str):
    def damage(out):
        path = out / rel
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return damage



@pytest.mark.parametrize("rel, damage", [
    (DETAILS, _truncate(DETAILS)),
    (DETAILS, lambda out: (out / DETAILS).unlink()),
    (DETAILS, _damage_json(DETAILS, lambda r: r.pop("train_row"))),
    (DETAILS, _damage_json(DETAILS, lambda r: r.update(n="thirteen"))),
    (DETAILS, _damage_json(DETAILS, lambda r: r.pop("eval_text"))),
    (DETAILS, _damage_json(DETAILS, lambda r: r.update(train_offsets="0-5"))),
    (STATS, _damage_json(STATS, lambda r: r.update(instance_ids="abc"))),
    (STATS, _damage_json(STATS, lambda r: r.update(num_instances=None))),
    (DETAILS, _reorder_details(_a_file_comes_back)),
    (DETAILS, _reorder_details(_rows_descend)),
], ids=["details-truncated", "details-missing", "no-train-row", "n-not-a-number", "no-eval-text",
        "offsets-not-a-list", "instance-ids-not-a-list", "num-instances-null",
        "details-file-comes-back", "details-rows-descend"])
def test_a_damaged_output_is_an_error_naming_its_file(job, tmp_path, rel, damage):
    """A damaged file of the output (cut short, gone, a record with a field missing or
    of the wrong type) is an error naming the file, exit 2, never a trace or figures
    counted from the wrong thing (a string's characters taken for its ids)."""
    out, _, _ = job
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    damage(copy)
    done = subprocess.run([sys.executable, "-m", "probeflow.overlap_report", str(copy),
                           "--html", str(tmp_path / "r.html")], capture_output=True, text=True)
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert str(copy / rel) in done.stderr, done.stderr
