"""The n-gram overlap job against an independent, plain-Python implementation of the
design notes' rules (``re``, ``string``, ``msgspec``, ``hashlib``; ``pyarrow`` only to
read and write Parquet and zstd), on a corpus with the Unicode cases Python and Rust
disagree on by default, short, empty and punctuation-only rows, records with and
without ``id``, bad rows, and every input format; also with its input on an
S3-compatible server, and killed (a worker, the coordinator) mid-job: the same bytes
after resume.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import shutil
import signal
import string
import subprocess
import sys
import time
import unicodedata
from collections import defaultdict
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from test_job import COORDINATOR, free_port, run
from test_s3 import BUCKET, s3  # noqa: F401  (the S3 server fixture)

# --- the reference: the design notes' rules, written from them ------------------------

SPLIT = re.compile(rf"[\s{re.escape(string.punctuation)}]+")
N_VALUES = [4, 9]


def tokens_with_spans(text: str):
    """The old DefaultTokenizer's tokens, each with its [start, end) in code points of
    the original text (lowering can lengthen a character: İ → i̇)."""
    lowered = text.lower()
    pieces = [c.lower() for c in text]
    assert sum(map(len, pieces)) == len(lowered)
    owner = [j for j, p in enumerate(pieces) for _ in p]  # lowered index → original index
    tokens = SPLIT.split(lowered)
    bounds, pos = [], 0
    for m in SPLIT.finditer(lowered):
        bounds.append((pos, m.start()))
        pos = m.end()
    bounds.append((pos, len(lowered)))
    assert [lowered[a:b] for a, b in bounds] == tokens

    def original(a, b):
        if a == b:
            at = owner[a] if a < len(owner) else len(text)
            return (at, at)
        return (owner[a], owner[b - 1] + 1)

    return tokens, [original(a, b) for a, b in bounds]


def windows(tokens, spans, n):
    """n-gram text → every occurrence's offsets."""
    out = defaultdict(list)
    for i in range(len(tokens) - n + 1):
        out[" ".join(tokens[i:i + n])].append([spans[i][0], spans[i + n - 1][1]])
    return out


def record_id(rec: dict) -> str:
    if rec.get("id") is not None:
        return str(rec["id"])
    encoded = msgspec.msgpack.encode(rec, order="deterministic")
    return str(int.from_bytes(hashlib.blake2b(encoded, digest_size=8).digest(), "big"))


def dataset_name(path: str) -> str:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    for suffixes in ((".gz", ".zst"), (".jsonl", ".json", ".parquet")):
        for s in suffixes:
            if name.endswith(s):
                name = name[: -len(s)]
                break
    name = re.sub(r"-[0-9a-fA-F]{6}$", "", name)
    return name[: -len("-dolma")] if name.endswith("-dolma") else name


def read_rows(path: Path, field: str = "text"):
    """Every row of a file: the record, or None for a row the job must reject."""
    name = path.name
    if name.endswith(".parquet"):
        return [r if isinstance(r.get(field), str) else None for r in pq.read_table(path).to_pylist()]
    if name.endswith(".gz"):
        data = gzip.decompress(path.read_bytes())
    elif name.endswith(".zst"):
        with pa.CompressedInputStream(pa.OSFile(str(path)), "zstd") as f:
            data = f.read()
    else:
        data = path.read_bytes()
    rows = []
    for line in data.split(b"\n"):
        if not line.strip(b" \t\r\n"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rows.append(None)
            continue
        rows.append(rec if usable(rec, field) else None)
    return rows


def utf8(s: str) -> bool:
    """Whether a str can be written as UTF-8 (holds no lone surrogate)."""
    try:
        s.encode()
        return True
    except UnicodeEncodeError:
        return False


def usable(rec, field: str) -> bool:
    """Whether the rules keep a record: a dict with a text (that an output can hold),
    an id that str() prints, and, without an id, a record msgspec can encode."""
    if not (isinstance(rec, dict) and isinstance(rec.get(field), str) and utf8(rec[field])):
        return False
    rid = rec.get("id")
    if isinstance(rid, (list, dict)) or (isinstance(rid, str) and not utf8(rid)):
        return False
    if rid is None:
        try:
            msgspec.msgpack.encode(rec)
        except (OverflowError, UnicodeEncodeError):
            return False
    return True


def reference(eval_files, train_files):
    """(stats lines, detail records, instances per training file, rejected rows) by
    the rules; files are (url as the job names it, local path)."""
    evals = []  # (dataset, url, row, id, text, {(eff, ngram): (configured, offsets)})
    instances = defaultdict(int)
    rejected = 0
    for url, path in eval_files:
        ds = dataset_name(url)
        for row, rec in enumerate(read_rows(path)):
            if rec is None:
                rejected += 1
                continue
            instances[ds] += 1
            tokens, spans = tokens_with_spans(rec["text"])
            grams = {}
            for n in N_VALUES:
                eff = min(n, len(tokens))
                for g, offs in windows(tokens, spans, eff).items():
                    grams.setdefault((eff, g), (set(), offs))[0].add(n)
            evals.append((ds, url, row, record_id(rec), rec["text"], grams))
    lengths = sorted({eff for e in evals for eff, _ in e[5]})
    details, stats = [], defaultdict(set)
    per_file = []
    for url, path in train_files:
        mine = defaultdict(set)
        for row, rec in enumerate(read_rows(path)):
            if rec is None:
                rejected += 1
                continue
            tokens, spans = tokens_with_spans(rec["text"])
            by_len = {n: windows(tokens, spans, n) for n in lengths}
            for ds, eurl, erow, eid, etext, grams in evals:
                for (eff, g), (configured, eoffs) in grams.items():
                    toffs = by_len[eff].get(g)
                    if not toffs:
                        continue
                    details.append(dict(
                        eval_dataset=ds, eval_path=eurl, eval_row=erow, instance_id=eid, eval_text=etext,
                        ngram=g, eval_offsets=eoffs, n=eff, train_path=url, train_row=row,
                        train_text=rec["text"], train_ngram=g, train_offsets=toffs,
                        train_doc_id=record_id(rec)))
                    for n in configured:
                        stats[(ds, n)].add(eid)
                        mine[(row, ds, n, record_id(rec))].add(eid)
        per_file.append(sorted(
            (dict(eval_dataset=ds, n=n, instance_ids=sorted(ids), train_path=url, train_row=row, train_doc_id=doc)
             for (row, ds, n, doc), ids in mine.items()),
            key=lambda r: (r["train_row"], r["eval_dataset"], r["n"])))
    stat_lines = [
        dict(eval_dataset=ds, n=n, num_instances=instances[ds], instance_ids=sorted(stats[(ds, n)]))
        for ds in sorted(instances) for n in sorted(N_VALUES)
    ]
    return stat_lines, details, per_file, rejected


# --- the corpus --------------------------------------------------------------------------

SPECIAL = [
    "İstanbul İzmir and İİ",              # İ lowers to two characters
    "ΟΔΟΣ ΟΔΟΣ. ΣΟΦΟΣ",                   # final sigma
    "fields\x1cseparated\x1dby\x1einformation\x1fseparators",  # \s in Python, not in Rust
    "next\u0085line and\u00a0no-break space",
    "Straße ﬁne ǅemal ΐ",                  # lowering that changes length or is special
    "tab\tvertical\x0bform\x0creturn\r end",
    "\U00010d50Σ \ua7cbΣ aΣ\U00010d70 aΣ\u0897 a\U00010efcΣ aΣ' ΣΣ",  # sigma by Unicode 14 only
]


def words(rng: random.Random, k: int) -> list[str]:
    syll = ["ka", "to", "ri", "mu", "se", "no", "za", "pe", "lo", "vi", "qu", "xe"]
    return ["".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(k)]


def sentence(rng, vocab, k):
    out = []
    for _ in range(k):
        w = rng.choice(vocab)
        out.append(w.upper() if rng.random() < 0.1 else w)
        out.append(rng.choice([" ", " ", " ", ", ", "; ", " - ", "\n"]))
    return "".join(out).strip()


def make_corpus(root: Path) -> tuple[list[Path], list[Path]]:
    rng = random.Random(7)
    vocab = words(rng, 3000)
    eval_dir, train_dir = root / "eval", root / "train"
    eval_dir.mkdir(parents=True)
    train_dir.mkdir(parents=True)
    # Eval rows: generated sentences, the special texts, short rows, empty and
    # punctuation-only texts.
    texts = [sentence(rng, vocab, rng.randint(5, 30)) for _ in range(60)]
    texts += SPECIAL + ["", "!!!", "?", "Short one", "Two words.", "ΟΔΟΣ"]
    rng.shuffle(texts)
    chunks = [texts[i::4] for i in range(4)]

    def with_id(i, t):
        return {"id": f"q-{i}", "text": t}

    def without_id(i, t):
        return {"text": t, "meta": {"n": i, "f": i / 7, "neg": -i, "ok": i % 2 == 0, "none": None},
                "tags": ["a", i, 1.5], "ünï": "ké"}

    # JSONL with ids, plus a bad line and a null text (rejected, rows still counted).
    lines = [json.dumps(with_id(i, t), ensure_ascii=False) for i, t in enumerate(chunks[0])]
    lines.insert(3, "{not json")
    lines.insert(5, json.dumps({"id": "x", "text": None}))
    lines.insert(7, "   ")  # blank: skipped, not a row
    (eval_dir / "mmlu-dolma-a1b2c3.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # gzip JSONL without ids (hashed records).
    body = "".join(json.dumps(without_id(i, t), ensure_ascii=False) + "\n" for i, t in enumerate(chunks[1]))
    (eval_dir / "gsm8k-0f1e2d.jsonl.gz").write_bytes(gzip.compress(body.encode(), mtime=0))
    # zstd JSONL with integer ids.
    body = "".join(json.dumps({"id": 1000 + i, "text": t}) + "\n" for i, t in enumerate(chunks[2]))
    with pa.CompressedOutputStream(str(eval_dir / "arc-dolma.jsonl.zst"), "zstd") as f:
        f.write(body.encode())
    # Parquet: some ids null (the whole row is hashed).
    ids = [None if i % 3 == 0 else f"p-{i}" for i in range(len(chunks[3]))]
    pq.write_table(pa.table({"id": ids, "text": chunks[3], "k": list(range(len(chunks[3])))}),
                   eval_dir / "hellaswag-abcdef.parquet")

    # Training documents: random text with planted copies (case and punctuation
    # changed) of eval texts or their parts.
    docs = []
    for i in range(240):
        doc = sentence(rng, vocab, rng.randint(10, 80))
        if rng.random() < 0.4:
            src = rng.choice(texts)
            toks = src.split(" ")
            a = rng.randint(0, max(0, len(toks) - 3))
            part = " ".join(toks[a:a + rng.randint(3, 14)])
            part = part.upper() if rng.random() < 0.3 else part.replace(" ", "  ,")
            cut = rng.randint(0, len(doc))
            doc = doc[:cut] + " " + part + " " + doc[cut:]
        docs.append(doc)
    docs += SPECIAL + ["", "...", "short one!", "the ΟΔΟΣ ΟΔΟΣ ΣΟΦΟΣ."]
    parts = [docs[i::4] for i in range(4)]
    lines = [json.dumps({"id": f"d{i}", "text": t}, ensure_ascii=False) for i, t in enumerate(parts[0])]
    lines.insert(2, json.dumps({"id": "bad", "text": 42}))
    lines.insert(4, json.dumps({"id": ["not", "an", "id"], "text": "never matches anything"}))
    (train_dir / "train-00000.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # gzip of two members (as `cat a.gz b.gz` makes): every member is read.
    body = [json.dumps({"text": t, "src": "web", "i": i}) + "\n" for i, t in enumerate(parts[1])]
    members = [gzip.compress("".join(half).encode(), mtime=0) for half in (body[:20], body[20:])]
    (train_dir / "train-00001.jsonl.gz").write_bytes(b"".join(members))
    body = "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(parts[2]))
    with pa.CompressedOutputStream(str(train_dir / "train-00002.jsonl.zst"), "zstd") as f:
        f.write(body.encode())
    pq.write_table(pa.table({"text": parts[3], "i": list(range(len(parts[3])))}),
                   train_dir / "train-00003.parquet")
    return sorted(eval_dir.iterdir()), sorted(train_dir.iterdir())


def overlap_job(path: Path, eval_urls, train_urls, output, mode="local", workers=2, port=0,
                index_memory=None, lease=60, n=N_VALUES) -> Path:
    memory = "" if index_memory is None else f'memory = "{index_memory}"\n'
    path.write_text(f"""
kind = "ngram_overlap"
[eval]
paths = {json.dumps([str(u) for u in eval_urls])}
[train]
paths = {json.dumps([str(u) for u in train_urls])}
[ngrams]
n = {n}
[index]
partitions = 8
{memory}[output]
url = "{output}"
[run]
mode = "{mode}"
workers = {workers}
listen = "127.0.0.1:{port}"
memory_per_worker = "256MiB"
scratch = "{path.parent / 'scratch'}"
lease_seconds = {lease}
""")
    return path


def read_jsonl_gz(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def rejected(out: Path) -> list[dict]:
    """Every rejected row an output kept aside, file by file (`rejects/*.jsonl`)."""
    return [json.loads(line) for f in sorted((out / "rejects").glob("*.jsonl"))
            for line in f.read_text().splitlines()]


def canonical(records) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, ensure_ascii=False) for r in records)


def output_files(out: Path) -> dict[str, bytes]:
    """The job's deterministic outputs: everything but its journal and progress logs,
    and of `.SUCCESS` the summary (its fingerprint covers the output URL)."""
    files = {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not str(p.relative_to(out)).startswith(("_job", "progress"))
    }
    files[".SUCCESS"] = json.loads(files[".SUCCESS"])["summary"].encode()
    return files


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


def check_against_reference(out: Path, eval_files, train_files) -> None:
    stats, details, per_file, rejected = reference(eval_files, train_files)
    got_stats = [json.loads(line) for line in (out / "stats" / "overlap_stats.jsonl").read_text().splitlines()]
    assert got_stats == stats
    got = read_jsonl_gz(out / "stats" / "overlap_details.jsonl.gz")
    assert canonical(got) == canonical(details)
    for t, want in enumerate(per_file):
        got_inst = read_jsonl_gz(out / "tmp" / f"overlap_instances-{t:05}-of-{len(per_file):05}.jsonl.gz")
        assert got_inst == want, f"training file {t}"
    summary = json.loads((out / "progress_summary.json").read_text())
    assert summary["totals"]["eval_rejected"] + summary["totals"]["train_rejected"] == rejected
    # The output says which Python's text semantics it has; the reference ran on it.
    assert summary["text_semantics"] == {"python": "3.11", "unicode": "14.0.0"}
    if sys.version_info[:2] == (3, 11):
        assert unicodedata.unidata_version == "14.0.0"
    return details, stats


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
    assert json.loads((local_run / ".SUCCESS").read_text())["fingerprint"]


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
    (out / ".SUCCESS").unlink()
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
    (out / ".SUCCESS").unlink()
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
    from test_cluster import Cluster
    root, eval_files, train_files = corpus
    port = free_port()
    out = tmp_path / "out"
    spec = overlap_job(tmp_path / "cluster.toml", eval_files, [root / "in" / "train"], out,
                       mode="cluster", port=port)
    c = Cluster(tmp_path, spec, port)
    journal = out / "_job" / "journal"
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
        while not list(journal.glob("scan-*.json")):
            assert time.time() < deadline + 120
            time.sleep(0.02)
        c.coordinator.send_signal(signal.SIGKILL)
        c.coordinator.wait()
        assert not (out / ".SUCCESS").exists()
        time.sleep(1)
        c.coordinator = c.start_coordinator()
        log = c.finish()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, log[-3000:]
    assert "resumed from the journal" in log
    assert output_files(out) == output_files(local_run)


def test_a_worker_away_at_the_end_learns_the_overlap_job_is_done(corpus, local_run, tmp_path):
    """A cluster worker paused past its lease while the job finishes without it finds,
    when it comes back to no coordinator, this kind's completion marker (`.SUCCESS`)
    and exits 0 at once, not after --give-up-after."""
    from test_cluster import Cluster, finish_without, stopped_in
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
