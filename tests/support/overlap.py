"""The n-gram overlap job in the tests: a generated corpus, the job file, and the plain-Python reference the job's outputs are checked against."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import string
import sys
import unicodedata
from collections import defaultdict
from pathlib import Path
import msgspec
import pyarrow as pa
import pyarrow.parquet as pq


# --- the reference: the design notes' rules, written from them ------------------------

SPLIT = re.compile(rf"[\s{re.escape(string.punctuation)}]+")


N_VALUES = [4, 9]
#: The `[clean]` section of the cut tests: a small context and pieces, so that
#: `make_corpus`'s documents are both cut and dropped.
CUT = '[clean]\nmode = "cut"\ncontext_chars = 12\nmin_piece_chars = 15\nmax_pieces = 3\n'


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
                index_memory=None, lease=60, n=N_VALUES, extra: str = "") -> Path:
    """The job file at ``path``; ``extra`` is appended (more sections: ``[triage]``,
    ``[clean]``)."""
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
{extra}""")
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
    """The job's deterministic outputs: everything but its journal and progress logs
    (`progress_summary.json` records run settings such as the index groups), and of
    `_SUCCESS` all but the fingerprint (which covers the output URL) and the progress
    summary's entry: the summary, the inputs and every other final file's size and
    blake3."""
    files = {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not str(p.relative_to(out)).startswith(("_job", "progress"))
    }
    record = json.loads(files["_SUCCESS"])
    del record["fingerprint"]
    record["outputs"]["files"] = [f for f in record["outputs"]["files"] if not f["path"].startswith("progress")]
    files["_SUCCESS"] = json.dumps(record, sort_keys=True).encode()
    return files


def check_against_reference(out: Path, eval_files, train_files):
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
