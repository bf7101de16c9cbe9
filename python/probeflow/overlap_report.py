"""A report on an n-gram overlap output: who is contaminated, by what, and how it looks.

``python -m probeflow.overlap_report OUTPUT [--html report.html] [--json figures.json]``
reads an overlap job's finished output (a local directory, or ``s3://``/``gs://``: read
in ranges of 8 MiB, never whole) and prints a summary; with
``--html`` it writes one self-contained page (no network access, nothing to install to
view it), with ``--json`` the figures behind it.

Data flow::

    stats/overlap_stats.jsonl ──► per eval dataset and n: instances, contaminated, fraction
    stats/overlap_details.jsonl.gz, streamed one record at a time (never loaded whole)
        ──► train file × eval dataset matrix (training documents, eval instances)
        ──► most-leaked eval instances (training documents that contain them)
        ──► hot n-grams (training documents and eval instances that share them)
        ──► a seeded sample of matches, both texts with the matched spans
    stats/hot_ngrams.jsonl ([triage]) ──► which n-grams are hot (and, excluded, in no
        detail record), the top ones
    stats/clean_manifest.jsonl.gz ([clean]) ──► documents dropped and cut, and why
    Figures (JSON-able) ──► text summary | HTML page (figures embedded as JSON too)

Memory: the details are read in their order (training file in the job's listing order,
training row, eval file, eval row, n, n-gram), so a training document's records are
consecutive and distinct documents are counted without being kept. What is kept: a
number for every contaminated eval instance (with the start of its text) and every
distinct matched n-gram, and one int per distinct (n-gram, instance) and (cell,
instance) pair; it grows with those, not with the details' size.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import heapq
import html
import io
import json
import os
import random
import sys
from collections import defaultdict
from typing import Any, Iterator

from ._native import (
    COMPLETION_MARKER,
    EARLIER_COMPLETION_MARKERS,
    REMOTE_SCHEMES,
    remote_object_range,
    remote_object_size,
)
from .errors import OutputError, RemoteError

STATS = "stats/overlap_stats.jsonl"
DETAILS = "stats/overlap_details.jsonl.gz"
HOT = "stats/hot_ngrams.jsonl"
CLEAN_MANIFEST = "stats/clean_manifest.jsonl.gz"

#: Characters of context shown around a highlighted span in the sample.
CONTEXT_CHARS = 200

#: Characters of a most-leaked instance's text kept and shown.
TEXT_SHOWN = 300


@dataclasses.dataclass
class Figures:
    """Everything the report shows, JSON-able (``dataclasses.asdict``)."""

    output: str
    #: One per (eval dataset, n): ``eval_dataset``, ``n``, ``num_instances``,
    #: ``contaminated``, ``fraction``.
    contamination: list[dict[str, Any]]
    #: Detail records read.
    details: int
    #: Training documents with at least one match.
    training_documents: int
    #: Rows: training files; columns: eval datasets; cells: training documents of the
    #: file that overlap the dataset, and the dataset's instances they overlap.
    matrix: dict[str, Any]
    #: The most-leaked eval instances: ``eval_dataset``, ``instance_id``,
    #: ``training_documents`` (that contain one of its n-grams), ``eval_text`` (its first
    #: ``TEXT_SHOWN`` characters).
    most_leaked: list[dict[str, Any]]
    #: The n-grams matched in the most training documents: ``ngram``, ``n``,
    #: ``training_documents``, ``eval_instances``, ``hot`` (the job's triage called it
    #: hot).
    hot_ngrams: list[dict[str, Any]]
    #: A seeded sample of detail records, with both texts and offsets.
    sample: list[dict[str, Any]]
    #: With the job's ``[triage]``: ``hot`` (how many n-grams it called hot),
    #: ``excluded`` (whether their matches count; excluded, they are in no detail
    #: record either), ``by`` (hot n-grams per limit), ``top`` (the ``top`` hot n-grams
    #: in the most training documents: ``n``, ``ngram``, ``train_docs``,
    #: ``eval_rows``); else ``None``.
    triage: dict[str, Any] | None = None
    #: With the job's ``[clean]``: ``dropped``, ``cut`` (documents), ``reasons``
    #: (documents per action and reason), ``chars`` and ``chars_removed`` (code points
    #: of the contaminated documents, and of them removed); else ``None``.
    cleaning: dict[str, Any] | None = None


#: Bytes asked of an object store at once.
REMOTE_PART_BYTES = 8 << 20


def _is_remote(path: str) -> bool:
    return path.startswith(tuple(REMOTE_SCHEMES))


def _join(output: str, rel: str) -> str:
    return f"{output.rstrip('/')}/{rel}" if _is_remote(output) else os.path.join(output, rel)


class _RemoteObject(io.RawIOBase):
    """An object on ``s3://`` or ``gs://`` as a read-only binary file, fetched in the
    ranges its buffer asks for (one request each)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.size = remote_object_size(url)
        self.at = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self.size - self.at)
        if n <= 0:
            return 0
        data = remote_object_range(self.url, self.at, self.at + n)
        view[: len(data)] = data
        self.at += len(data)
        return len(data)


def _open_binary(path: str) -> io.BufferedIOBase:
    if _is_remote(path):
        return io.BufferedReader(_RemoteObject(path), buffer_size=REMOTE_PART_BYTES)
    return open(path, "rb")


def _exists(path: str) -> bool:
    if not _is_remote(path):
        return os.path.exists(path)
    try:
        remote_object_size(path)
    except FileNotFoundError:
        return False
    return True


def _open_text(path: str) -> Iterator[str]:
    try:
        # A GzipFile does not close the file it reads: the outer `with` does.
        with _open_binary(path) as raw, (
            gzip.open(raw, "rt", encoding="utf-8") if path.endswith(".gz")
            else io.TextIOWrapper(raw, encoding="utf-8")
        ) as f:
            yield from f
    except FileNotFoundError as e:
        raise OutputError(f"{path}: not found (is this a finished overlap output?)") from e
    except RemoteError:
        raise
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise OutputError(f"{path}: unreadable: {e}") from e


def _records(path: str) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(_open_text(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise OutputError(f"{path}: line {number} is not JSON: {e}") from e
        if not isinstance(record, dict):
            raise OutputError(f"{path}: line {number} is not a JSON object")
        yield record


def _field(record: dict[str, Any], name: str, path: str, kind: type | None = None) -> Any:
    """`record[name]`, an OutputError naming `path` when it is missing or (given `kind`)
    not of that JSON type: a damaged output is an error, never a figure counted from the
    wrong thing (a string's characters taken for a list's items)."""
    try:
        value = record[name]
    except KeyError:
        raise OutputError(f"{path}: a record has no {name!r}") from None
    if kind is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise OutputError(f"{path}: a record's {name!r} is {value!r}, not {_JSON_TYPE[kind]}")
    return value


_JSON_TYPE = {int: "an integer", str: "a string", list: "a list", bool: "true or false"}

#: The fields of a sampled detail record the page shows, and their JSON types.
_SAMPLE_FIELDS = {
    "eval_dataset": str, "instance_id": None, "eval_path": str, "eval_row": int, "eval_text": str,
    "eval_offsets": list, "ngram": str, "n": int, "train_path": str, "train_row": int,
    "train_doc_id": None, "train_text": str, "train_offsets": list,
}


def _offsets(record: dict[str, Any], name: str, path: str) -> list[list[int]]:
    """A detail record's offsets: a list of [start, end] pairs of integers."""
    spans = _field(record, name, path, list)
    for span in spans:
        if not (isinstance(span, list) and len(span) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in span)):
            raise OutputError(f"{path}: a record's {name!r} holds {span!r}, not a [start, end] pair")
    return spans


def _check_finished_overlap_output(output: str) -> None:
    """An OutputError unless `output` has a completion record (this release's marker, or
    an earlier release's: the overlap job's `.SUCCESS`) of an overlap job."""
    for marker in (COMPLETION_MARKER, *EARLIER_COMPLETION_MARKERS):
        path = _join(output, marker)
        if not _exists(path):
            continue
        try:
            with _open_binary(path) as f:
                record = json.loads(f.read())
        except (OSError, ValueError) as e:
            raise OutputError(f"{path}: not a completion record: {e}") from e
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind not in (None, "", "ngram_overlap"):
            raise OutputError(f"{output}: a {kind} output, not an overlap output")
        return
    raise OutputError(f"{output}: no {COMPLETION_MARKER}: not a finished overlap output")


def figures(output: str, *, top: int = 20, sample: int = 12, seed: int = 0) -> Figures:
    """Reads a finished overlap output (a local directory, ``s3://…`` or ``gs://…``) and
    computes the report's figures: the ``top`` most-leaked instances and hot n-grams,
    and ``sample`` detail records drawn with ``seed``."""
    output = os.fspath(output)
    _check_finished_overlap_output(output)
    stats_path = _join(output, STATS)
    contamination = []
    for r in _records(stats_path):
        instances = _field(r, "num_instances", stats_path, int)
        contaminated = len(_field(r, "instance_ids", stats_path, list))
        contamination.append({
            "eval_dataset": _field(r, "eval_dataset", stats_path, str),
            "n": _field(r, "n", stats_path, int),
            "num_instances": instances,
            "contaminated": contaminated,
            "fraction": contaminated / instances if instances else 0.0,
        })

    hot_path = _join(output, HOT)
    hot_set: set[tuple[int, str]] = set()
    triage = None
    if _exists(hot_path):
        by: dict[str, int] = defaultdict(int)
        excluded = False
        heap: list[tuple[int, int, int, str]] = []
        for r in _records(hot_path):
            gram = (_field(r, "n", hot_path, int), _field(r, "ngram", hot_path, str))
            hot_set.add(gram)
            excluded = _field(r, "excluded", hot_path, bool)
            for limit in _field(r, "hot_by", hot_path, list):
                by[limit] += 1
            heap.append((-_field(r, "train_docs", hot_path, int), -_field(r, "eval_rows", hot_path, int), *gram))
        triage = {"hot": len(hot_set), "excluded": excluded, "by": dict(sorted(by.items())),
                  "top": [{"n": n, "ngram": g, "train_docs": -d, "eval_rows": -e}
                          for d, e, n, g in heapq.nsmallest(top, heap)]}

    details_path = _join(output, DETAILS)
    # Instances and n-grams are numbered as first met; what is kept per pair is one int.
    instance_ids: dict[tuple[str, str], int] = {}
    gram_ids: dict[tuple[int, str], int] = {}
    # Cells: (train file, dataset) → documents; (cell number, instance) pairs as ints.
    cell_ids: dict[tuple[str, str], int] = {}
    cell_docs: list[int] = []
    cell_instances: list[int] = []
    cell_pairs: set[int] = set()
    leaked: list[int] = []  # per instance: training documents
    leaked_text: list[str] = []  # per instance: its text, as much as the page shows
    gram_docs: list[int] = []
    gram_instances: list[int] = []
    gram_pairs: set[int] = set()
    rng = random.Random(seed)
    reservoir: list[dict[str, Any]] = []
    count = documents = 0
    doc: tuple[str, int] | None = None
    # The details' order: training files in the job's listing order (first met here; not
    # the paths' sort order), rows ascending within a file. A file met again after
    # another, or a row not after the one before it, is out of order.
    files_met: set[str] = set()
    # What the current training document has met (each counted once per document).
    doc_cells: set[int] = set()
    doc_instances: set[int] = set()
    doc_grams: set[int] = set()

    def close_document() -> None:
        for c in doc_cells:
            cell_docs[c] += 1
        for i in doc_instances:
            leaked[i] += 1
        for g in doc_grams:
            gram_docs[g] += 1
        doc_cells.clear()
        doc_instances.clear()
        doc_grams.clear()

    for r in _records(details_path):
        key = (_field(r, "train_path", details_path, str), _field(r, "train_row", details_path, int))
        if key != doc:
            if doc is not None and (key[1] < doc[1] if key[0] == doc[0] else key[0] in files_met):
                after = f"row {doc[1]}" if key[0] == doc[0] else f"records of {doc[0]}"
                raise OutputError(
                    f"{details_path}: records out of (training file, row) order at record "
                    f"{count + 1}: {key[0]} row {key[1]} after {after}"
                )
            files_met.add(key[0])
            close_document()
            doc = key
            documents += 1
        dataset = _field(r, "eval_dataset", details_path, str)
        instance = (dataset, str(_field(r, "instance_id", details_path)))
        i = instance_ids.setdefault(instance, len(instance_ids))
        if i == len(leaked):
            leaked.append(0)
            leaked_text.append(_field(r, "eval_text", details_path, str)[:TEXT_SHOWN])
        gram = (_field(r, "n", details_path, int), _field(r, "ngram", details_path, str))
        g = gram_ids.setdefault(gram, len(gram_ids))
        if g == len(gram_docs):
            gram_docs.append(0)
            gram_instances.append(0)
        c = cell_ids.setdefault((key[0], dataset), len(cell_ids))
        if c == len(cell_docs):
            cell_docs.append(0)
            cell_instances.append(0)
        doc_cells.add(c)
        doc_instances.add(i)
        doc_grams.add(g)
        if (pair := (c << 40) | i) not in cell_pairs:
            cell_pairs.add(pair)
            cell_instances[c] += 1
        if (pair := (g << 40) | i) not in gram_pairs:
            gram_pairs.add(pair)
            gram_instances[g] += 1
        count += 1
        # Reservoir sampling (algorithm R): every record equally likely, seeded. A record
        # that enters it is checked whole, as the page shows it.
        if len(reservoir) < sample:
            reservoir.append(_sampled(r, details_path))
        else:
            j = rng.randrange(count)
            if j < sample:
                reservoir[j] = _sampled(r, details_path)
    close_document()
    cells = {cell: (cell_docs[c], cell_instances[c]) for cell, c in cell_ids.items()}

    files = sorted({f for f, _ in cells})
    datasets = sorted({d for _, d in cells} | {c["eval_dataset"] for c in contamination})
    matrix = {
        "train_files": files,
        "eval_datasets": datasets,
        "documents": [[cells.get((f, d), (0, 0))[0] for d in datasets] for f in files],
        "instances": [[cells.get((f, d), (0, 0))[1] for d in datasets] for f in files],
    }
    most = heapq.nsmallest(top, instance_ids.items(), key=lambda kv: (-leaked[kv[1]], kv[0]))
    hot = heapq.nsmallest(
        top, gram_ids.items(), key=lambda kv: (-gram_docs[kv[1]], -gram_instances[kv[1]], kv[0]))
    return Figures(
        output=output,
        contamination=contamination,
        details=count,
        training_documents=documents,
        matrix=matrix,
        most_leaked=[
            {"eval_dataset": d, "instance_id": i, "training_documents": leaked[k],
             "eval_text": leaked_text[k]}
            for (d, i), k in most
        ],
        hot_ngrams=[
            {"ngram": g, "n": n, "training_documents": gram_docs[k], "eval_instances": gram_instances[k],
             "hot": (n, g) in hot_set}
            for (n, g), k in hot
        ],
        sample=sorted(reservoir, key=lambda r: (r["train_path"], r["train_row"], r["eval_path"], r["eval_row"])),
        triage=triage,
        cleaning=_cleaning(output),
    )


def _sampled(record: dict[str, Any], path: str) -> dict[str, Any]:
    """The fields of a detail record the page shows, each checked."""
    shown = {}
    for name, kind in _SAMPLE_FIELDS.items():
        if name.endswith("_offsets"):
            shown[name] = _offsets(record, name, path)
        elif kind is None:
            shown[name] = record.get(name)
        else:
            shown[name] = _field(record, name, path, kind)
    return shown


def _cleaning(output: str) -> dict[str, Any] | None:
    """The cleaning pass's figures, from its manifest (streamed), if the job cleaned."""
    path = _join(output, CLEAN_MANIFEST)
    if not _exists(path):
        return None
    actions: dict[str, int] = defaultdict(int)
    reasons: dict[str, int] = defaultdict(int)
    chars = removed = 0
    for r in _records(path):
        action = _field(r, "action", path, str)
        actions[action] += 1
        reasons[f"{action}: {_field(r, 'reason', path)}"] += 1
        record_chars = _field(r, "chars", path, int)
        chars += record_chars
        removed += record_chars - _field(r, "chars_left", path, int)
    return {"dropped": actions["dropped"], "cut": actions["cut"], "reasons": dict(sorted(reasons.items())),
            "chars": chars, "chars_removed": removed}


def summary(f: Figures) -> str:
    """The figures as plain text."""
    lines = [f"overlap report: {f.output}", ""]
    lines.append(f"{'eval dataset':<24} {'n':>4} {'instances':>10} {'contaminated':>13} {'fraction':>9}")
    for c in f.contamination:
        lines.append(
            f"{c['eval_dataset']:<24} {c['n']:>4} {c['num_instances']:>10} {c['contaminated']:>13} "
            f"{c['fraction']:>9.2%}"
        )
    lines += ["", f"{f.details} matches in {f.training_documents} training documents", ""]
    if f.most_leaked:
        lines.append("most-leaked eval instances (training documents):")
        for m in f.most_leaked:
            lines.append(f"  {m['training_documents']:>6}  {m['eval_dataset']} {m['instance_id']}")
        lines.append("")
    if f.triage:
        lines.append(
            f"triage: {f.triage['hot']} hot n-grams, "
            + ("excluded (in no figure above)" if f.triage["excluded"] else "counted above"))
        for h in f.triage["top"]:
            lines.append(f"  {h['train_docs']:>6} {h['eval_rows']:>6}  {h['ngram']!r}  hot")
    if f.hot_ngrams:
        lines.append("hot n-grams (training documents, eval instances):")
        for h in f.hot_ngrams:
            mark = "  hot" if h["hot"] else ""
            lines.append(f"  {h['training_documents']:>6} {h['eval_instances']:>6}  {h['ngram']!r}{mark}")
    if f.cleaning:
        c = f.cleaning
        lines += ["", f"cleaned: {c['dropped']} documents dropped, {c['cut']} cut; "
                  f"{c['chars_removed']} of their {c['chars']} characters removed"]
        for reason, k in c["reasons"].items():
            lines.append(f"  {k:>6}  {reason}")
    return "\n".join(lines)


def _highlight(text: str, offsets: list[list[int]], context: int = CONTEXT_CHARS) -> str:
    """``text`` around its first span, every span in range marked (offsets in code
    points, as the job writes them)."""
    if not offsets:
        return html.escape(text[: 2 * context])
    first, first_end = min((s, e) for s, e in offsets)
    # The spans that end within a few contexts of the first (all of it, however long).
    last = max((e for _, e in offsets if e - first <= 4 * context), default=first_end)
    last = max(last, first_end)
    lo, hi = max(0, first - context), min(len(text), last + context)
    spans = sorted((max(s, lo), min(e, hi)) for s, e in offsets if e > lo and s < hi)
    out, at = [], lo
    for s, e in spans:
        if s < at:
            s = at
        if e <= s:
            continue
        out.append(html.escape(text[at:s]))
        out.append(f"<mark>{html.escape(text[s:e])}</mark>")
        at = e
    out.append(html.escape(text[at:hi]))
    return ("…" if lo > 0 else "") + "".join(out) + ("…" if hi < len(text) else "")


def _heat(value: int, top: int) -> str:
    """A cell's style: white for 0, then light to dark red up to ``top`` (text turns
    white where the red is dark)."""
    if value == 0 or top == 0:
        return "background: #ffffff"
    a = 0.1 + 0.9 * value / top
    text = "#fff" if a > 0.55 else "#222"
    return f"background: rgba(200, 30, 30, {a:.2f}); color: {text}"


def page(f: Figures) -> str:
    """The figures as one self-contained HTML page."""
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(c['eval_dataset'])}</td><td>{c['n']}</td><td>{c['num_instances']}</td>"
        f"<td>{c['contaminated']}</td><td class=frac><span class=bar style='width:{10 * c['fraction']:.2f}em'></span>"
        f"{c['fraction']:.2%}</td></tr>"
        for c in f.contamination
    )
    m = f.matrix
    top = max((v for row in m["documents"] for v in row), default=0)
    matrix = "<tr><th>training file \\ eval dataset</th>" + "".join(
        f"<th>{e(d)}</th>" for d in m["eval_datasets"]) + "</tr>" + "".join(
        f"<tr><th class=file>{e(os.path.basename(t))}</th>" + "".join(
            f"<td style='{_heat(docs, top)}' title='{docs} documents, {insts} instances'>"
            f"{docs}<small> / {insts}</small></td>"
            for docs, insts in zip(m["documents"][i], m["instances"][i]))
        + "</tr>"
        for i, t in enumerate(m["train_files"]))
    leaked = "".join(
        f"<tr><td>{x['training_documents']}</td><td>{e(x['eval_dataset'])}</td><td>{e(x['instance_id'])}</td>"
        f"<td class=text>{e(x['eval_text'])}</td></tr>"
        for x in f.most_leaked)
    hot = "".join(
        f"<tr{' class=hot' if h['hot'] else ''}><td>{h['training_documents']}</td><td>{h['eval_instances']}</td>"
        f"<td>{h['n']}</td><td>{'hot' if h['hot'] else ''}</td><td class=text>{e(h['ngram'])}</td></tr>"
        for h in f.hot_ngrams)
    triage = ""
    if f.triage:
        t = f.triage
        by = ", ".join(f"{k} over its limit: {v}" for k, v in t["by"].items())
        tops = "".join(
            f"<tr class=hot><td>{h['train_docs']}</td><td>{h['eval_rows']}</td><td>{h['n']}</td>"
            f"<td class=text>{e(h['ngram'])}</td></tr>" for h in t["top"])
        triage = (f"<p>The job's triage called {t['hot']} n-grams hot ({e(by) or 'none'}); their matches "
                  + ("are excluded: in no statistic, detail record or figure here."
                     if t["excluded"] else "count in every figure (not excluded).") + "</p>"
                  + "<table><tr><th>training documents</th><th>eval rows</th><th>n</th><th>hot n-gram</th></tr>"
                  + tops + "</table>")
    cleaning = ""
    if f.cleaning:
        c = f.cleaning
        reasons = "".join(f"<tr><td class=text>{e(r)}</td><td>{k}</td></tr>" for r, k in c["reasons"].items())
        cleaning = (f"<h2>Cleaned corpus</h2><p>{c['dropped']} documents dropped, {c['cut']} cut: "
                    f"{c['chars_removed']} of their {c['chars']} characters removed "
                    f"(<code>cleaned/</code>, <code>{CLEAN_MANIFEST}</code>).</p>"
                    f"<table><tr><th>action: reason</th><th>documents</th></tr>{reasons}</table>")
    sample = "".join(
        f"<div class=match><h3>{e(s['eval_dataset'])} {e(str(s['instance_id']))} "
        f"(row {s['eval_row']}) ↔ {e(os.path.basename(str(s['train_path'])))} row {s['train_row']}"
        f" · n = {s['n']}</h3>"
        f"<p class=ngram>{e(s['ngram'])}</p>"
        f"<p><b>eval</b> {s['eval_offsets']}: {_highlight(s['eval_text'], s['eval_offsets'])}</p>"
        f"<p><b>train</b> {s['train_offsets']}: {_highlight(s['train_text'], s['train_offsets'])}</p></div>"
        for s in f.sample)
    data = json.dumps(dataclasses.asdict(f)).replace("</", "<\\/")
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>overlap report: {e(f.output)}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; vertical-align: top; }}
th.file, td.text {{ text-align: left; }}
td.text {{ max-width: 50em; white-space: pre-wrap; word-break: break-word; }}
.frac {{ white-space: nowrap; text-align: left; }}
.bar {{ display: inline-block; height: .8em; background: #c83; margin-right: .5em; }}
mark {{ background: #fd5; }}
.match {{ border-top: 1px solid #ddd; padding: .5em 0; }}
.match p {{ white-space: pre-wrap; word-break: break-word; }}
.ngram {{ font-family: monospace; color: #555; }}
small {{ opacity: .75; }}
tr.hot td {{ background: #fde2d2; }}
</style></head><body>
<h1>Overlap report</h1>
<p>{e(f.output)} · {f.details} matches in {f.training_documents} training documents</p>
<h2>Contaminated eval instances</h2>
<table><tr><th>eval dataset</th><th>n</th><th>instances</th><th>contaminated</th><th>fraction</th></tr>{rows}</table>
<h2>Training files × eval datasets</h2>
<p>Training documents of the file that share an n-gram with the dataset / the dataset's instances they share one with.</p>
<table>{matrix}</table>
<h2>Most-leaked eval instances</h2>
<table><tr><th>training documents</th><th>dataset</th><th>instance</th><th>text</th></tr>{leaked}</table>
<h2>Hot n-grams</h2>
<p>Matched in the most training documents: boilerplate and templates show here first.</p>
{triage}
<table><tr><th>training documents</th><th>eval instances</th><th>n</th><th>triage</th><th>n-gram</th></tr>{hot}</table>
{cleaning}
<h2>Sample of matches</h2>
{sample}
<script type=application/json id=figures>{data}</script>
</body></html>
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m probeflow.overlap_report",
        description="Report on a finished n-gram overlap output: contamination per eval "
        "dataset, the training × eval matrix, the most-leaked instances, hot n-grams and "
        "a sample of matches.",
    )
    parser.add_argument("output", help="the overlap job's output: a directory, s3://… or gs://…")
    parser.add_argument("--html", help="write a self-contained HTML page here")
    parser.add_argument("--json", help="write the figures as JSON here")
    parser.add_argument("--top", type=int, default=20, help="most-leaked instances and hot n-grams shown (20)")
    parser.add_argument("--sample", type=int, default=12, help="matches sampled for the page (12)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (0)")
    args = parser.parse_args(argv)
    if args.top < 0 or args.sample < 0:
        parser.error("--top and --sample must be at least 0")
    try:
        f = figures(args.output, top=args.top, sample=args.sample, seed=args.seed)
        print(summary(f))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(dataclasses.asdict(f), out, indent=1)
        if args.html:
            with open(args.html, "w", encoding="utf-8") as out:
                out.write(page(f))
    except (OutputError, OSError) as e:  # RemoteError is an OSError
        print(f"probeflow.overlap_report: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
