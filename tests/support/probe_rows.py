"""A probe-rows job file for the end-to-end tests, and its settings."""

from __future__ import annotations

import json
from pathlib import Path

#: The job's shards per split, longest row, and split.
SHARDS = 4
MAX_ROW = 64 * 1024
SEED, FRACTION = 17, 0.25


def toml_value(v) -> str:
    """`v` as a TOML value (strings and paths quoted, tables inline)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items() if x is not None) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def write_job(path: Path, sections: dict[str, dict | None], raw: dict[str, str] | None = None) -> Path:
    """Writes the job file :func:`job_toml` makes to `path`."""
    path.write_text(job_toml(sections, raw))
    return path


def job_toml(sections: dict[str, dict | None], raw: dict[str, str] | None = None) -> str:
    """A job file's text: each section (``""`` for top-level keys, ``"run.tls"`` for a
    subtable) with its keys, None values and None sections left out; ``raw[section]``:
    lines added to a section as they are (keys a test wants wrong or unknown)."""
    raw = raw or {}
    lines = []
    for name, table in sections.items():
        if table is None:
            continue
        if name:
            lines.append(f"[{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items() if v is not None]
        if raw.get(name):
            lines.append(raw[name])
    return "\n".join(lines) + "\n"


def job_file(tmp: Path, name: str, input_url: str, output: Path, workers=2, extra_run="", extra_input="") -> Path:
    """The local-mode probe-rows job `tmp/<name>.toml` most tests run: SHARDS shards of
    rows of at most MAX_ROW bytes, split FRACTION/SEED, 60 000-row map tasks;
    `extra_input`/`extra_run`: lines added to those sections."""
    return write_job(
        tmp / f"{name}.toml",
        {
            "input": {"url": input_url, "rows_per_map_task": 60000},
            "output": {"url": output, "shards": SHARDS, "max_row_bytes": MAX_ROW,
                       "array_record_options": "group_size:1,zstd:3"},
            "split": {"test_fraction": FRACTION, "seed": SEED},
            "run": {"mode": "local", "workers": workers, "memory_per_worker": "256MiB",
                    "scratch": tmp / "scratch"},
        },
        raw={"input": extra_input, "run": extra_run},
    )
