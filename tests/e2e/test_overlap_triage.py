"""Triage of hot n-grams (``[triage]``) on a corpus with planted boilerplate: a
template sentence in 40 training documents and in three eval rows, beside two real
copies of eval questions. The hot n-grams the job lists are those the plain-Python
reference's detail records say are found in more training documents (or eval rows)
than the limits; ``exclude = false`` changes no other output byte; ``exclude = true``
gives the statistics and details the reference gives without the hot n-grams'
matches, so the eval rows that share only the template are no longer contaminated and
the real copies still are.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from support.overlap import (N_VALUES, check_against_reference, make_corpus, output_files, overlap_job,
                             read_jsonl_gz, sentence, tokens_with_spans, words)
from support.run import run

TEMPLATE = "This page is part of the public archive, reproduced with permission; all rights reserved"
MAX_TRAIN_DOCS = 20
MAX_EVAL_ROWS = 2


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("triage")
    eval_files, train_files = make_corpus(root / "in")
    rng = random.Random(31)
    vocab = words(rng, 2000)
    questions = [sentence(rng, vocab, 20) for _ in range(5)]
    # Three eval rows carry the template (before their own question), two do not.
    rows = [{"id": f"t-{i}", "text": (TEMPLATE + " " if i < 3 else "") + q} for i, q in enumerate(questions)]
    template_eval = root / "in" / "eval" / "template-abcdef.jsonl"
    template_eval.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # 40 training documents with the template amid their own text; two with a real
    # copy of a question (t-0, which also has the template, and t-4).
    docs = [sentence(rng, vocab, 30) + " " + TEMPLATE + ". " + sentence(rng, vocab, 30) for _ in range(40)]
    docs += [sentence(rng, vocab, 25) + " " + questions[0] + " " + sentence(rng, vocab, 25),
             sentence(rng, vocab, 25) + " " + questions[4]]
    template_train = root / "in" / "train" / "train-template.jsonl"
    template_train.write_text("".join(json.dumps({"id": f"w{i}", "text": d}) + "\n" for i, d in enumerate(docs)))
    return root, [*eval_files, template_eval], sorted([*train_files, template_train])


def job(root, name, eval_files, triage=""):
    out = root / f"out-{name}"
    spec = overlap_job(root / f"{name}.toml", eval_files, [root / "in" / "train"], out, extra=triage)
    proc = run(["run", str(spec)])
    return out, proc


def triage_section(exclude: bool) -> str:
    return (f"[triage]\nmax_train_docs = {MAX_TRAIN_DOCS}\nmax_eval_rows = {MAX_EVAL_ROWS}\n"
            f"exclude = {'true' if exclude else 'false'}\n")


def configured(detail) -> list[int]:
    """The configured lengths a detail record's (effective-length) n-gram stands for."""
    tokens, _ = tokens_with_spans(detail["eval_text"])
    return [n for n in N_VALUES if min(n, len(tokens)) == detail["n"]]


def expected_hot(details):
    docs, rows = defaultdict(set), defaultdict(set)
    for d in details:
        key = (d["n"], d["ngram"])
        docs[key].add((d["train_path"], d["train_row"]))
        rows[key].add((d["eval_path"], d["eval_row"]))
    hot = {}
    for key in docs:
        by = [name for name, count, limit in (("train_docs", len(docs[key]), MAX_TRAIN_DOCS),
                                              ("eval_rows", len(rows[key]), MAX_EVAL_ROWS)) if count > limit]
        if by:
            hot[key] = (len(docs[key]), len(rows[key]), by)
    return hot


def test_hot_ngrams_are_the_references_and_exclusion_leaves_the_real_copies(planted):
    root, eval_files, train_files = planted
    plain, _ = job(root, "plain", eval_files)
    details, _ = check_against_reference(plain, [(str(p), p) for p in eval_files], [(str(p), p) for p in train_files])
    hot = expected_hot(details)
    # The template's n-grams are hot, both ways; nothing else in this corpus is.
    template_tokens, _ = tokens_with_spans(TEMPLATE)
    inside = {(n, " ".join(template_tokens[i:i + n])) for n in N_VALUES for i in range(len(template_tokens) - n + 1)}
    assert inside <= set(hot), "a template n-gram is not hot"
    assert all(by == ["train_docs", "eval_rows"] for key, (_, _, by) in hot.items() if key in inside)
    assert len(hot) >= len(inside)

    # exclude = false: the hot n-grams listed, every other file the same bytes.
    marked, proc = job(root, "marked", eval_files, triage_section(exclude=False))
    lines = [json.loads(line) for line in (marked / "stats" / "hot_ngrams.jsonl").read_text().splitlines()]
    assert [(r["n"], r["ngram"]) for r in lines] == sorted(hot), "not the hot n-grams, or not in order"
    for r in lines:
        assert (r["train_docs"], r["eval_rows"], r["hot_by"]) == hot[(r["n"], r["ngram"])]
        assert r["excluded"] is False
    plain_files, marked_files = output_files(plain), output_files(marked)
    del marked_files["stats/hot_ngrams.jsonl"]
    for name in plain_files:
        if name != "_SUCCESS":
            assert marked_files[name] == plain_files[name], name
    assert set(marked_files) == set(plain_files)
    assert f"{len(hot)} hot n-grams (counted)" in json.loads((marked / "_SUCCESS").read_text())["summary"]

    # exclude = true: the statistics and details without the hot n-grams' matches
    # (the scan counts the template's windows instead of expanding them).
    excluded, _ = job(root, "excluded", eval_files, triage_section(exclude=True))
    kept = [d for d in details if (d["n"], d["ngram"]) not in hot]
    assert read_jsonl_gz(excluded / "stats" / "overlap_details.jsonl.gz") == [
        d for d in read_jsonl_gz(plain / "stats" / "overlap_details.jsonl.gz") if (d["n"], d["ngram"]) not in hot]
    stats = defaultdict(set)
    per_row = defaultdict(set)
    for d in kept:
        for n in configured(d):
            stats[(d["eval_dataset"], n)].add(d["instance_id"])
            per_row[(d["train_path"], d["train_row"], d["eval_dataset"], n)].add(d["instance_id"])
    got = [json.loads(line) for line in (excluded / "stats" / "overlap_stats.jsonl").read_text().splitlines()]
    want_plain = [json.loads(line) for line in (plain / "stats" / "overlap_stats.jsonl").read_text().splitlines()]
    assert [(s["eval_dataset"], s["n"], s["num_instances"]) for s in got] == [
        (s["eval_dataset"], s["n"], s["num_instances"]) for s in want_plain]
    for s in got:
        assert s["instance_ids"] == sorted(stats[(s["eval_dataset"], s["n"])]), (s["eval_dataset"], s["n"])
    template = {s["n"]: s["instance_ids"] for s in got if s["eval_dataset"] == "template"}
    plain_template = {s["n"]: s["instance_ids"] for s in want_plain if s["eval_dataset"] == "template"}
    assert plain_template == {n: ["t-0", "t-1", "t-2", "t-4"] for n in N_VALUES}, "the planted corpus"
    assert template == {n: ["t-0", "t-4"] for n in N_VALUES}, "the template alone still counts"
    # The per-training-file instances, without the hot matches.
    got_rows = {}
    for f in sorted((excluded / "tmp").glob("overlap_instances-*.jsonl.gz")):
        for r in read_jsonl_gz(f):
            got_rows[(r["train_path"], r["train_row"], r["eval_dataset"], r["n"])] = r["instance_ids"]
    assert got_rows == {k: sorted(v) for k, v in per_row.items()}
    lines = [json.loads(line) for line in (excluded / "stats" / "hot_ngrams.jsonl").read_text().splitlines()]
    assert len(lines) == len(hot) and all(r["excluded"] for r in lines)

    # The report follows the statistics and lists the triage's hot n-grams.
    from probeflow.overlap_report import figures
    f = figures(str(excluded), top=1000)
    by = defaultdict(int)
    for _, _, why in hot.values():
        for limit in why:
            by[limit] += 1
    assert {k: v for k, v in f.triage.items() if k != "top"} == {
        "hot": len(hot), "excluded": True, "by": dict(sorted(by.items()))}
    assert f.details == len(kept)
    assert f.training_documents == len({(d["train_path"], d["train_row"]) for d in kept})
    leaked = {(m["eval_dataset"], m["instance_id"]) for m in f.most_leaked}
    assert leaked == {(d["eval_dataset"], d["instance_id"]) for d in kept}
    assert ("template", "t-1") not in leaked and ("template", "t-0") in leaked
    assert not any(h["hot"] for h in f.hot_ngrams)
    assert [(h["n"], h["ngram"], h["train_docs"], h["eval_rows"]) for h in f.triage["top"]] == sorted(
        ((n, g, docs, rows) for (n, g), (docs, rows, _) in hot.items()), key=lambda h: (-h[2], -h[3], h[0], h[1]))
    marked_figures = figures(str(marked), top=1000)
    assert marked_figures.triage["excluded"] is False
    assert {(h["n"], h["ngram"]) for h in marked_figures.hot_ngrams if h["hot"]} == set(hot)
    assert marked_figures.training_documents == len({(d["train_path"], d["train_row"]) for d in details})


def test_a_triage_section_without_a_limit_is_refused(planted, tmp_path):
    root, eval_files, _ = planted
    spec = overlap_job(tmp_path / "bad.toml", eval_files, [root / "in" / "train"], tmp_path / "out",
                       extra="[triage]\nexclude = true\n")
    proc = run(["run", str(spec)], check=False)
    assert proc.returncode == 2 and "max_train_docs" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_cleaning_leaves_alone_what_only_hot_ngrams_match(planted):
    """With ``exclude = true`` a document matched only by hot n-grams (the template) is
    not contaminated: the cleaning pass keeps it; the two real copies are dropped."""
    root, eval_files, train_files = planted
    out, _ = job(root, "hot-clean", eval_files, triage_section(exclude=True) + "[clean]\nmode = \"drop\"\n")
    details = read_jsonl_gz(out / "stats" / "overlap_details.jsonl.gz")
    hot = expected_hot(details)
    contaminated = {(d["train_path"], d["train_row"]) for d in details if (d["n"], d["ngram"]) not in hot}
    manifest = read_jsonl_gz(out / "stats" / "clean_manifest.jsonl.gz")
    assert [(m["train_path"], m["train_row"]) for m in manifest] == sorted(contaminated)
    template_file = str(root / "in" / "train" / "train-template.jsonl")
    assert sorted(row for path, row in contaminated if path == template_file) == [40, 41]
    cleaned = (out / "cleaned" / "train-template.jsonl").read_text().splitlines()
    original = (root / "in" / "train" / "train-template.jsonl").read_text().splitlines()
    assert cleaned == original[:40], "the 40 template documents kept, the 2 copies dropped"
