"""A report on a preprocessed output: what the dataset holds and what the model sees.

``python -m probeflow.report OUTPUT [--html report.html]`` reads an output's manifest,
decodes its rows (all of them, or a seeded sample of ``--max-rows``), and draws a few
batches with the reader options given (the :class:`probeflow.Dataset` defaults unless
changed). It prints a summary; with ``--html`` it also writes one self-contained page
(plots as inline SVG, no network access, nothing to install to view it) and with
``--json`` the figures behind it.

Data flow::

    manifest.json ──► totals, splits, shards, rejects by reason
    rows (RowDataSource, sample) ──► measurements per probe, row sizes, RTTs, time
                                     coverage, IPv4/IPv6
    Dataset(reader options).batches ──► context lengths, measurements per context,
                                        timestamp modes, field orders, padding, examples
    Figures (JSON-able) ──► text summary | HTML page (figures embedded as JSON too)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import html
import json
import math
import os
import random
import sys
from collections import Counter, defaultdict
from typing import Any, Sequence

import numpy as np

from . import tokenizer
from ._native import TOKENIZER_VERSION, decode_row, splits_of
from .dataset import Dataset, RowDataSource
from .errors import OutputError, ProbeflowError
from .maxtext_input import parse_floats

#: One letter per field of a measurement, for field orders.
FIELD_LETTERS = {"source": "S", "destination": "D", "result": "R", "timestamp": "T"}


@dataclasses.dataclass
class Histogram:
    """Counts per bin: ``edges`` has one more entry than ``counts``."""

    edges: list[float]
    counts: list[int]

    @classmethod
    def of(cls, values: np.ndarray, edges: np.ndarray) -> "Histogram":
        counts, edges = np.histogram(np.clip(values, edges[0], edges[-1]), bins=edges)
        return cls([float(e) for e in edges], [int(c) for c in counts])


def log_edges(lo: float, hi: float, per_decade: int = 5) -> np.ndarray:
    """Bin edges evenly spaced in log10 from ``lo`` to at least ``hi``."""
    lo = max(lo, 1e-9)
    hi = max(hi, lo * 10)
    n = max(1, math.ceil(math.log10(hi / lo) * per_decade))
    return lo * 10 ** (np.arange(n + 1) / per_decade)


@dataclasses.dataclass
class Figures:
    """Everything the report shows (JSON-able with :meth:`to_json`)."""

    output: str
    split: str
    manifest: dict[str, Any]
    splits: dict[str, dict[str, int]]
    shards: list[dict[str, Any]]
    rejects_by_reason: dict[str, int]
    rows_total: int
    rows_read: int
    sampled: bool
    probes: int
    measurements: int
    measurements_per_probe: Histogram
    row_bytes: Histogram
    rtt_ms: Histogram
    failed_fraction: float
    time_coverage: Histogram
    time_range: tuple[int, int]
    ip_versions: dict[str, dict[str, int]]
    reader_options: dict[str, Any]
    sequences: int
    padding_fraction: float
    context_tokens: Histogram
    measurements_per_context: Histogram
    timestamp_modes: dict[str, int]
    field_orders: dict[str, int]
    examples: list[list[dict[str, Any]]]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)


def _manifest(output: str) -> dict[str, Any]:
    if os.path.isdir(output):
        path = os.path.join(output, "manifest.json")
    elif os.path.basename(output) == "manifest.json":
        path = output
    elif not os.path.exists(output):
        raise OutputError(f"{output}: no such output directory")
    else:
        raise OutputError(f"{output}: give a job output directory or its manifest.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise OutputError(f"{path}: no manifest (is this a finished job output?)") from None
    except json.JSONDecodeError as e:
        raise OutputError(f"{path}: not a manifest: {e}") from None


def _dataset_figures(output: str, split: str, max_rows: int, seed: int) -> dict[str, Any]:
    source = RowDataSource(output, split=split)
    total = len(source)
    sampled = total > max_rows
    indices = sorted(random.Random(seed).sample(range(total), max_rows)) if sampled else range(total)
    by_probe: dict[str, int] = defaultdict(int)
    version_of: dict[str, int] = {}
    row_bytes, rtts, times = [], [], []
    failed = measurements = 0
    v_measurements: Counter[int] = Counter()
    for i in indices:
        record = source.record(i)
        row_bytes.append(len(record))
        row = decode_row(record)
        n = int(row["n_measurements"])
        by_probe[row["src_addr"]] += n
        version_of[row["src_addr"]] = int(row["ip_version"])
        v_measurements[int(row["ip_version"])] += n
        measurements += n
        ok = ~row["failed"]
        failed += int(n - ok.sum())
        rtts.append(row["rtt_ms"][ok])
        times.append(row["event_time"])
    per_probe = np.array(list(by_probe.values()), dtype=np.int64)
    rtt = np.concatenate(rtts) if rtts else np.zeros(0)
    t = np.concatenate(times) if times else np.zeros(0, dtype=np.int64)
    t0, t1 = (int(t.min()), int(t.max())) if len(t) else (0, 0)
    day = 86400
    span_days = max(1, math.ceil((t1 - t0 + 1) / day))
    step = day * max(1, math.ceil(span_days / 60))
    time_edges = np.arange(t0 - t0 % day, t1 + step + 1, step, dtype=np.float64)
    return dict(
        rows_total=total,
        rows_read=len(indices),
        sampled=sampled,
        probes=len(by_probe),
        measurements=measurements,
        measurements_per_probe=Histogram.of(per_probe, log_edges(1, max(by_probe.values(), default=1) + 1, 4)),
        row_bytes=Histogram.of(
            np.array(row_bytes, dtype=np.int64), log_edges(min(row_bytes, default=1), max(row_bytes, default=1) + 1, 4)
        ),
        rtt_ms=Histogram.of(rtt, log_edges(0.01, max(float(rtt.max()) if len(rtt) else 1.0, 1.0) * 1.01, 5)),
        failed_fraction=failed / measurements if measurements else 0.0,
        time_coverage=Histogram.of(t.astype(np.float64), time_edges),
        time_range=(t0, t1),
        ip_versions={
            f"IPv{v}": {"probes": sum(1 for x in version_of.values() if x == v), "measurements": v_measurements[v]}
            for v in (4, 6)
        },
    )


def _timestamp_mode(measurements: list[dict[str, Any]]) -> str:
    timed = sum(1 for m in measurements if m["timestamp_kind"] is not None)
    if timed == len(measurements):
        return "full"
    return "none" if timed == 0 else "partial"


def _model_figures(output: str, split: str, batches: int, options: dict[str, Any]) -> dict[str, Any]:
    lengths, per_context = [], []
    modes: Counter[str] = Counter()
    orders: Counter[str] = Counter()
    examples: list[list[dict[str, Any]]] = []
    padding = total = sequences = 0
    with Dataset(output, split, num_epochs=1, shard_index=0, shard_count=1, **options) as ds:
        for _, batch in zip(range(batches), ds):
            seg = batch["inputs_segmentation"]
            padding += int((seg == 0).sum())
            total += seg.size
            for i in range(seg.shape[0]):
                if not seg[i].any():
                    continue
                sequences += 1
                for ctx in tokenizer.segments(batch["inputs"][i], seg[i]):
                    ms = tokenizer.detokenize(ctx)
                    lengths.append(len(ctx))
                    per_context.append(len(ms))
                    modes[_timestamp_mode(ms)] += 1
                    for m in ms:
                        orders["".join(FIELD_LETTERS[f] for f in m["fields"])] += 1
                    if len(examples) < 3:
                        examples.append([_readable(m) for m in ms[:12]])
    seq_len = options["seq_len"]
    return dict(
        sequences=sequences,
        padding_fraction=padding / total if total else 0.0,
        context_tokens=Histogram.of(np.array(lengths, dtype=np.int64), np.linspace(0, seq_len, 17)),
        measurements_per_context=Histogram.of(
            np.array(per_context, dtype=np.int64), _integer_edges(max(per_context, default=1) + 1, 20)
        ),
        timestamp_modes={k: modes[k] for k in ("full", "partial", "none")},
        field_orders=dict(orders.most_common()),
        examples=examples,
    )


def _integer_edges(top: int, bins: int) -> np.ndarray:
    """At most about ``bins`` bins of whole numbers from 0 past ``top``."""
    step = max(1, math.ceil(top / bins))
    return np.arange(0, top + step + 1, step, dtype=np.float64)


def _readable(m: dict[str, Any]) -> dict[str, Any]:
    kind, value = m["timestamp_kind"], m["timestamp_value"]
    stamp = "—" if kind is None else (_utc(value) if kind == "abs" else f"+{value} s")
    return {
        "order": "".join(FIELD_LETTERS[f] for f in m["fields"]),
        "src": m["src_addr"],
        "dst": m["dst_addr"],
        "rtt": "failed" if m["failed"] else f"{m['rtt_ms']:.3g} ms",
        "time": stamp,
    }


def _utc(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def build(
    output: str,
    split: str = "train",
    *,
    max_rows: int = 20_000,
    batches: int = 16,
    seed: int = 0,
    **reader_options: Any,
) -> Figures:
    """The report's figures for ``split`` of ``output`` (a job output directory or its
    ``manifest.json``). ``reader_options``: :class:`probeflow.Dataset` options for the
    model's view (``seq_len``, ``batch_size``, ``packing``, sampler options…)."""
    manifest = _manifest(output)
    splits_held = splits_of([output])
    if split not in splits_held:
        raise OutputError(f"{output}: no {split} split (it has {', '.join(splits_held)})")
    options = dict(seq_len=1024, batch_size=8, seed=seed)
    options.update(reader_options)
    splits: dict[str, dict[str, int]] = {}
    for s in manifest["shards"]:
        agg = splits.setdefault(s["split"], {"shards": 0, "rows": 0, "probes": 0, "measurements": 0, "bytes": 0})
        agg["shards"] += 1
        agg["rows"] += s["rows"]
        agg["probes"] += s.get("sources", 0)
        agg["measurements"] += s.get("measurements", 0)
        agg["bytes"] += s["bytes"]
    totals = manifest.get("totals", {})
    summary = {
        k: manifest.get(k)
        for k in ("job_fingerprint", "shards_per_split", "split_seed", "test_fraction", "val_fraction",
                  "row_format_version", "tokenizer_version", "array_record_options", "max_row_bytes")
    }
    summary.update({f"totals.{k}": v for k, v in totals.items() if k != "rejected_by_reason"})
    summary["inputs"] = len(manifest.get("inputs", []))
    return Figures(
        output=output,
        split=split,
        manifest=summary,
        splits=splits,
        shards=[{k: s[k] for k in ("split", "partition", "path", "rows", "bytes")} for s in manifest["shards"]],
        rejects_by_reason=dict(totals.get("rejected_by_reason", {})),
        reader_options=options,
        **_dataset_figures(output, split, max_rows, seed),
        **_model_figures(output, split, batches, options),
    )


# --- rendering ---------------------------------------------------------------------


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}" if isinstance(x, float) and not float(x).is_integer() else str(int(x))


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def bar_chart(
    labels: Sequence[str], values: Sequence[float], title: str, x_title: str = "", y_title: str = "count",
    width: int = 600, height: int = 240, color: str = "#3b6ea5",
) -> str:
    """An inline SVG bar chart (labels under the bars, thinned to fit)."""
    left, right, top, bottom = 58, 12, 28, 58
    w, h = width - left - right, height - top - bottom
    n = max(1, len(values))
    peak = max([float(v) for v in values] + [1e-12])
    ticks = [peak * k / 4 for k in range(5)]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">',
        f"<title>{html.escape(title)}</title>",
        f'<text x="{left}" y="16" class="t">{html.escape(title)}</text>',
    ]
    for t in ticks:
        y = top + h - (t / peak) * h
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" class="g"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="yl">{_si(t)}</text>')
    bw = w / n
    label_px = 6 * max([len(str(x)) for x in labels] + [1]) + 10
    every = max(1, math.ceil(n / max(1, w // label_px)))
    for i, (label, v) in enumerate(zip(labels, values)):
        bh = (float(v) / peak) * h
        x = left + i * bw
        out.append(
            f'<rect x="{x + bw * 0.08:.1f}" y="{top + h - bh:.1f}" width="{max(bw * 0.84, 0.5):.1f}" '
            f'height="{bh:.1f}" fill="{color}"><title>{html.escape(str(label))}: {_si(float(v))}</title></rect>'
        )
        if i % every == 0:
            out.append(f'<text x="{x + bw / 2:.1f}" y="{top + h + 14}" class="xl">{html.escape(str(label))}</text>')
    out.append(f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" class="a"/>')
    out.append(f'<text x="{left + w / 2}" y="{height - 8}" class="at">{html.escape(x_title)}</text>')
    out.append(
        f'<text x="14" y="{top + h / 2}" class="at" transform="rotate(-90 14 {top + h / 2})">{html.escape(y_title)}</text>'
    )
    out.append("</svg>")
    return "".join(out)


def _histogram_chart(hist: Histogram, title: str, x_title: str, fmt=_si, **kw: Any) -> str:
    labels = [fmt(e) for e in hist.edges[:-1]]
    return bar_chart(labels, hist.counts, title, x_title, **kw)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f5f6f8;color:#1d2330}
header{background:#1d2b45;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:22px}header p{margin:4px 0 0;opacity:.8}
main{padding:18px 28px;max-width:1320px}
h2{font-size:17px;margin:26px 0 10px;border-bottom:1px solid #d5d9e0;padding-bottom:4px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px}.card span{color:#5a6272;font-size:12px}
.grid{display:flex;flex-wrap:wrap;gap:14px}
.plot{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:6px}
.plot p{margin:2px 8px 6px;color:#5a6272;font-size:12px;max-width:580px}
svg .t{font-weight:600;font-size:13px;fill:#1d2330}svg .g{stroke:#eceef2}svg .a{stroke:#8a93a3}
svg .yl{font-size:10px;text-anchor:end;fill:#5a6272}svg .xl{font-size:10px;text-anchor:middle;fill:#5a6272}
svg .at{font-size:11px;text-anchor:middle;fill:#39404d}
table{border-collapse:collapse;background:#fff;font-size:13px}
td,th{border:1px solid #dde1e8;padding:3px 8px;text-align:right}th{background:#eef1f5}
td.l,th.l{text-align:left}code{font-size:12px}
.ex{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:8px;margin-bottom:10px}
"""


def _cards(items: list[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(
        f'<div class="card"><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>' for k, v in items
    ) + "</div>"


def _plot(svg: str, caption: str = "") -> str:
    return f'<div class="plot">{svg}{f"<p>{html.escape(caption)}</p>" if caption else ""}</div>'


def _table(header: list[str], rows: list[list[Any]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{html.escape(str(c))}</td>' for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"


def render_html(f: Figures) -> str:
    """The report as one self-contained HTML page."""
    t0, t1 = f.time_range
    sample = f"a seeded sample of {f.rows_read:,} of {f.rows_total:,} rows" if f.sampled else f"all {f.rows_total:,} rows"
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>probeflow report: {html.escape(f.output)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>probeflow report</h1><p>{html.escape(f.output)} · split <b>{f.split}</b> · "
        f"job {html.escape(str(f.manifest.get('job_fingerprint', ''))[:16])} · tokenizer v{TOKENIZER_VERSION}</p></header><main>",
        "<h2>The output</h2>",
        _cards([
            ("rows (all splits)", f"{sum(s['rows'] for s in f.splits.values()):,}"),
            ("measurements kept", f"{f.manifest.get('totals.kept_measurements', 0):,}"),
            ("input rows", f"{f.manifest.get('totals.input_rows', 0):,}"),
            ("rejected rows", f"{f.manifest.get('totals.rejected_rows', 0):,}"),
            ("shards", f"{len(f.shards)}"),
            ("bytes", _bytes(sum(s["bytes"] for s in f.shards))),
        ]),
        "<p></p>",
        _table(
            ["split", "shards", "rows", "probes", "measurements", "bytes"],
            [[k, v["shards"], f"{v['rows']:,}", f"{v['probes']:,}", f"{v['measurements']:,}", _bytes(v["bytes"])]
             for k, v in sorted(f.splits.items())],
        ),
        '<h2>Rejected input rows, by reason</h2><div class="grid">',
    ]
    if f.rejects_by_reason:
        reasons = sorted(f.rejects_by_reason.items(), key=lambda kv: -kv[1])
        parts.append(_plot(bar_chart([k for k, _ in reasons], [v for _, v in reasons], "Rejected rows by reason",
                                     "reason", "rows", color="#b5473a"),
                           "Rows of the input the job refused, kept aside with their reason (see the output's rejects files)."))
        parts.append(_table(["reason", "rows"], [[k, f"{v:,}"] for k, v in reasons]))
    else:
        parts.append("<p>No input row was rejected.</p>")
    parts += [
        "</div>",
        f"<h2>The {f.split} split's rows <small>({sample})</small></h2>",
        _cards([
            ("probes", f"{f.probes:,}"),
            ("measurements", f"{f.measurements:,}"),
            ("failed pings", f"{100 * f.failed_fraction:.2f} %"),
            ("first measurement", _utc(t0) if f.measurements else "—"),
            ("last measurement", _utc(t1) if f.measurements else "—"),
        ]),
        '<p></p><div class="grid">',
        _plot(_histogram_chart(f.measurements_per_probe, "Measurements per probe", "measurements (log bins, from)", y_title="probes"),
              "How much history each probe has; a probe over the row limit spans several rows."),
        _plot(_histogram_chart(f.row_bytes, "Row sizes", "bytes (log bins, from)", fmt=_bytes, y_title="rows"),
              f"Encoded row sizes (limit {_bytes(f.manifest.get('max_row_bytes') or 0)})."),
        _plot(_histogram_chart(f.rtt_ms, "RTT distribution", "RTT in ms (log bins, from)", y_title="measurements"),
              "Round-trip times of the successful pings."),
        _plot(_histogram_chart(f.time_coverage, "Time coverage", "UTC date (bins from)",
                               fmt=lambda e: _utc(int(e))[:10], y_title="measurements"),
              "Measurements over time: gaps show missing collection periods."),
        _plot(bar_chart(
            [f"{v} probes" for v in f.ip_versions] + [f"{v} meas." for v in f.ip_versions],
            _percent([x["probes"] for x in f.ip_versions.values()]) + _percent([x["measurements"] for x in f.ip_versions.values()]),
            "IPv4 / IPv6 mix", "", "% of probes, % of measurements", color="#4f8a5b"),
              ", ".join(f"{v}: {x['probes']:,} probes, {x['measurements']:,} measurements" for v, x in f.ip_versions.items())),
        "</div>",
        "<h2>Shards by size</h2>",
        _plot(bar_chart([f"{s['split'][:2]}{s['partition']}" for s in f.shards], [s["bytes"] for s in f.shards],
                        "Bytes per shard", "split and partition", "bytes", width=min(1260, 200 + 18 * len(f.shards))),
              _shard_skew(f)),
    ]
    o = f.reader_options
    opts = ", ".join(f"{k}={v}" for k, v in sorted(o.items()))
    total_ctx = sum(f.timestamp_modes.values())
    parts += [
        '<h2 id="model">What the model sees</h2>',
        f"<p>{f.sequences:,} sequences from probeflow.Dataset(<code>{html.escape(opts)}</code>), rank 0 of 1.</p>",
        _cards([
            ("contexts", f"{total_ctx:,}"),
            ("padding", f"{100 * f.padding_fraction:.2f} % of tokens"),
            ("seq_len", str(o.get("seq_len"))),
            ("packing", str(o.get("packing", True))),
        ]),
        '<p></p><div class="grid">',
        _plot(_histogram_chart(f.context_tokens, "Context lengths", "tokens (bins from)", y_title="contexts"),
              "Tokens per context; contexts are packed into sequences of seq_len."),
        _plot(_histogram_chart(f.measurements_per_context, "Window sizes", "measurements per context (bins from)",
                               y_title="contexts"), "Measurements in each context window."),
        _plot(bar_chart(list(f.timestamp_modes), list(f.timestamp_modes.values()), "Timestamp modes", "mode",
                        "contexts", color="#8a5b9e"),
              "full: every measurement timed; partial: some lost their time; none: no times, random order."),
        _plot(bar_chart(list(f.field_orders)[:24], list(f.field_orders.values())[:24], "Field orders",
                        "order (S source, D destination, R result, T timestamp)", "measurements", color="#c07b28"),
              "Each measurement's fields come in a random order."),
        "</div><h2>A few contexts, decoded</h2>",
    ]
    for k, ex in enumerate(f.examples):
        parts.append(f'<div class="ex"><b>context {k + 1}</b> (first {len(ex)} measurements)')
        parts.append(_table(["#", "fields", "source", "destination", "RTT", "time"],
                            [[i + 1, m["order"], m["src"], m["dst"], m["rtt"], m["time"]] for i, m in enumerate(ex)], left=6))
        parts.append("</div>")
    parts.append(f'<script type="application/json" id="probeflow-figures">{html.escape(f.to_json(), quote=False)}</script>')
    parts.append("</main></body></html>")
    return "".join(parts)


def _percent(values: list[int]) -> list[float]:
    total = sum(values)
    return [100 * v / total if total else 0.0 for v in values]


def _shard_skew(f: Figures) -> str:
    """Per split: the size range of its shards and the largest against the mean."""
    parts = []
    for split in sorted({s["split"] for s in f.shards}):
        sizes = [s["bytes"] for s in f.shards if s["split"] == split]
        mean = sum(sizes) / len(sizes)
        parts.append(f"{split}: {len(sizes)} shards, {_bytes(min(sizes))} to {_bytes(max(sizes))} "
                     f"(largest {max(sizes) / mean:.2f}× the mean)")
    return "; ".join(parts) + ". Shards are hash partitions of the probes." if parts else "No shards."


def render_text(f: Figures) -> str:
    """A plain-text summary of the report."""
    lines = [f"probeflow report: {f.output} (split {f.split})"]
    for k, v in sorted(f.splits.items()):
        lines.append(f"  {k:5}: {v['shards']} shards, {v['rows']:,} rows, {v['probes']:,} probes, "
                     f"{v['measurements']:,} measurements, {_bytes(v['bytes'])}")
    lines.append(f"  rejected rows: {f.manifest.get('totals.rejected_rows', 0):,}"
                 + "".join(f"\n    {k}: {v:,}" for k, v in sorted(f.rejects_by_reason.items())))
    lines.append(f"  {f.split} rows read: {f.rows_read:,} of {f.rows_total:,}{' (sample)' if f.sampled else ''}; "
                 f"{f.probes:,} probes, {f.measurements:,} measurements, {100 * f.failed_fraction:.2f} % failed")
    lines.append("  " + ", ".join(f"{k}: {v['probes']:,} probes" for k, v in f.ip_versions.items()))
    if f.measurements:
        lines.append(f"  time: {_utc(f.time_range[0])} to {_utc(f.time_range[1])} UTC")
    lines.append(f"  model: {f.sequences:,} sequences, padding {100 * f.padding_fraction:.2f} %, timestamp modes "
                 + ", ".join(f"{k} {v:,}" for k, v in f.timestamp_modes.items()))
    return "\n".join(lines)


def _numbers(n: int):
    """An argparse type of ``n`` comma-separated numbers, saying what is wrong."""
    parse = parse_floats(n)

    def numbers(text: str) -> tuple[float, ...]:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return numbers


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m probeflow.report",
        description="Report on a probeflow output: the dataset (manifest, rows) and what the model sees "
                    "under the given reader options.",
    )
    p.add_argument("output", help="a job output directory or its manifest.json")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML page")
    p.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    p.add_argument("--split", default="train", help="the split whose rows and batches are shown (default train)")
    p.add_argument("--max-rows", type=int, default=20_000, help="rows decoded at most (a seeded sample beyond)")
    p.add_argument("--batches", type=int, default=16, help="batches drawn for the model's view")
    p.add_argument("--seed", type=int, default=0, help="seeds the row sample and the reader")
    g = p.add_argument_group("reader options (probeflow.Dataset's)")
    g.add_argument("--seq-len", type=int, default=1024)
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--no-packing", action="store_true")
    g.add_argument("--block-rows", type=int)
    g.add_argument("--contexts-per-row", type=int)
    g.add_argument("--measurements-per-context", type=int)
    g.add_argument("--tokens-per-measurement", type=int)
    g.add_argument("--timestamp-modes", type=_numbers(3), help="e.g. 0.4,0.3,0.3 (full, partial, none)")
    g.add_argument("--partial-drop", type=_numbers(2), help="e.g. 0.1,0.9")
    g.add_argument("--strategy", choices=["window", "geometric_stride"])
    a = p.parse_args(argv)
    if a.max_rows < 1 or a.batches < 1:
        p.error("--max-rows and --batches must be at least 1")
    reader = dict(seq_len=a.seq_len, batch_size=a.batch_size, packing=not a.no_packing)
    for k in ("block_rows", "contexts_per_row", "measurements_per_context", "tokens_per_measurement",
              "timestamp_modes", "partial_drop", "strategy"):
        if getattr(a, k) is not None:
            reader[k] = getattr(a, k)
    try:
        figures = build(a.output, a.split, max_rows=a.max_rows, batches=a.batches, seed=a.seed, **reader)
    except (ProbeflowError, OSError) as e:
        print(f"probeflow.report: {e}", file=sys.stderr)
        return 2
    print(render_text(figures))
    if a.html:
        with open(a.html, "w", encoding="utf-8") as f:
            f.write(render_html(figures))
        print(f"wrote {a.html}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(figures.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
