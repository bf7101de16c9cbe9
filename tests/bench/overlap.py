"""The overlap job's training scan against the plain-Python reference, on one core
(a benchmark, not a test).

    .venv/bin/python tests/bench/overlap.py [--train-mb 200] [--bin target/release]

Writes a corpus (2 000 eval rows; `--train-mb` MB of training text in 8 gzip JSONL
files, ~1% of documents with a planted eval passage, ~2% with non-ASCII text), then, on
CPU 0 only:

* runs the job (`coordinator run`, local mode, one worker) and reads its scan tasks'
  times from the log: training text scanned per second by the scan stage, and by the
  whole job (planning, index, scan, report); `--job-runs` times (default 3), before
  and after the reference, as the machine may be shared: the median run is reported;
* runs the reference scan in Python (the design notes' rules: `str.lower`, `re.split`,
  n-grams joined by spaces, looked up in a set of the eval n-grams) over the first files
  until `--python-seconds` have passed: text per second.

Prints both, their ratio, the job's peak RSS and the number of overlap records each
found on the part both scanned (they must be equal).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import resource
import shutil
import string
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPLIT = re.compile(rf"[\s{re.escape(string.punctuation)}]+")
N_VALUES = [8, 13]


def make_corpus(work: Path, train_mb: int) -> tuple[Path, Path]:
    rng = random.Random(3)
    syll = ["ka", "to", "ri", "mu", "se", "no", "za", "pe", "lo", "vi", "qu", "xe", "an", "el", "os"]
    vocab = ["".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(50_000)]
    accents = ["é", "ü", "ß", "İ", "Σ", "ñ", "ø"]

    def text(words: int) -> str:
        out = []
        for _ in range(words):
            w = rng.choice(vocab)
            if rng.random() < 0.05:
                w = w.capitalize()
            out.append(w)
            out.append(rng.choice([" "] * 12 + [", ", ". ", "\n"]))
        return "".join(out)

    eval_dir, train_dir = work / "eval", work / "train"
    eval_dir.mkdir(parents=True)
    train_dir.mkdir(parents=True)
    evals = [text(rng.randint(20, 80)) for _ in range(2000)]
    with open(eval_dir / "bench-dolma-abcdef.jsonl", "w") as f:
        for i, t in enumerate(evals):
            f.write(json.dumps({"id": f"e{i}", "text": t}) + "\n")
    per_file = train_mb * 1_000_000 // 8
    for k in range(8):
        written = 0
        with gzip.open(train_dir / f"train-{k:05}.jsonl.gz", "wt", compresslevel=1) as f:
            while written < per_file:
                doc = text(rng.randint(100, 500))
                r = rng.random()
                if r < 0.01:
                    src = rng.choice(evals).split(" ")
                    a = rng.randint(0, max(0, len(src) - 15))
                    doc += " " + " ".join(src[a:a + 15])
                elif r < 0.03:
                    doc = doc.replace("a", rng.choice(accents), 3)
                f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
                written += len(doc.encode())
    return eval_dir, train_dir


def python_scan(eval_dir: Path, train_dir: Path, seconds: float) -> tuple[float, int, list[str], int]:
    """The reference: (text bytes, records, files fully scanned, overlap records) in
    about `seconds`, whole files only."""
    index: dict[int, dict[str, list[int]]] = {}
    with open(eval_dir / "bench-dolma-abcdef.jsonl") as f:
        for row, line in enumerate(f):
            tokens = SPLIT.split(json.loads(line)["text"].lower())
            for n in N_VALUES:
                eff = min(n, len(tokens))
                for i in range(len(tokens) - eff + 1):
                    index.setdefault(eff, {}).setdefault(" ".join(tokens[i:i + eff]), []).append(row)
    started = time.process_time()
    scanned, records, done = 0, 0, []
    for path in sorted(train_dir.iterdir()):
        with gzip.open(path, "rt") as f:
            for line in f:
                text = json.loads(line)["text"]
                scanned += len(text.encode())
                tokens = SPLIT.split(text.lower())
                found: dict[str, set[int]] = {}
                for n, grams in index.items():
                    for i in range(len(tokens) - n + 1):
                        g = " ".join(tokens[i:i + n])
                        if g in grams:
                            found.setdefault(g, set()).update(grams[g])
                records += sum(len(rows) for rows in found.values())
        done.append(path.name)
        if time.process_time() - started > seconds:
            break
    return scanned / (time.process_time() - started), records, done, scanned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-mb", type=int, default=200)
    ap.add_argument("--python-seconds", type=float, default=60)
    ap.add_argument("--job-runs", type=int, default=3, help="runs of the job (the median is reported)")
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release")
    ap.add_argument("--work", type=Path, default=ROOT / "target" / "bench-overlap")
    args = ap.parse_args()
    args.work = args.work.resolve()
    os.sched_setaffinity(0, {0})  # one core, for both (children inherit it)
    corpus = args.work / f"corpus-{args.train_mb}"
    if not (corpus / "train").exists():
        shutil.rmtree(corpus, ignore_errors=True)
        print(f"writing the corpus ({args.train_mb} MB of training text) ...", flush=True)
        make_corpus(corpus, args.train_mb)
    eval_dir, train_dir = corpus / "eval", corpus / "train"
    out = args.work / "out"
    shutil.rmtree(out, ignore_errors=True)
    spec = args.work / "overlap.toml"
    spec.write_text(f"""
kind = "ngram_overlap"
[eval]
paths = ["{eval_dir}/bench-dolma-abcdef.jsonl"]
[train]
paths = ["{train_dir}"]
[ngrams]
n = {N_VALUES}
[output]
url = "{out}"
[run]
mode = "local"
workers = 1
memory_per_worker = "1GiB"
scratch = "{args.work / 'scratch'}"
""")
    env = dict(os.environ, RUST_LOG="info,probeflow_worker=debug", NO_COLOR="1")

    def run_job() -> tuple[float, float, float, int]:
        """One run of the job: (scan-stage rate, whole-job rate, scan seconds, text bytes)."""
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(args.work / "scratch", ignore_errors=True)
        started = time.time()
        proc = subprocess.run([str(args.bin / "coordinator"), "run", str(spec)], env=env,
                              capture_output=True, text=True)
        wall = time.time() - started
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        scan_ms = sum(int(m) for m in re.findall(r"task=scan-\d+ attempt=\d+ ms=(\d+)", proc.stderr))
        summary = json.loads((out / "progress_summary.json").read_text())["totals"]
        text_bytes = summary["train_text_bytes"]
        job_scan = text_bytes / (scan_ms / 1000) if scan_ms else float("nan")
        return job_scan, text_bytes / wall, scan_ms / 1000, text_bytes

    # The machine is shared: the job (seconds) runs before and after the reference
    # (a minute), and the median of its runs is compared with the reference.
    runs = [run_job() for _ in range(args.job_runs - 1)]
    py_rate, py_records, py_files, py_bytes = python_scan(eval_dir, train_dir, args.python_seconds)
    runs.append(run_job())
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    job_scan, job_all, scan_s, text_bytes = sorted(runs)[len(runs) // 2]
    train_paths = {str(train_dir / name) for name in py_files}
    details = gzip.decompress((out / "stats" / "overlap_details.jsonl.gz").read_bytes()).splitlines()
    job_records = sum(1 for line in details if json.loads(line)["train_path"] in train_paths)
    print(f"training text: {text_bytes / 1e6:.0f} MB in 8 files; eval: 2000 rows; n = {N_VALUES}; one core")
    print(f"job, scan stage:   {job_scan / 1e6:8.1f} MB/s  ({scan_s:.1f} s of scan tasks; median of "
          f"{len(runs)} runs: {', '.join(f'{r[0] / 1e6:.1f}' for r in runs)})")
    print(f"job, whole run:    {job_all / 1e6:8.1f} MB/s  (peak RSS {rss_mib:.0f} MiB)")
    print(f"Python reference:  {py_rate / 1e6:8.2f} MB/s  ({py_bytes / 1e6:.0f} MB in {len(py_files)} files)")
    print(f"ratio (scan stage / Python): {job_scan / py_rate:.1f}x; whole job / Python: {job_all / py_rate:.1f}x")
    print(f"overlap records on the files both scanned: job {job_records}, Python {py_records}")
    if job_records != py_records:
        raise SystemExit("the job and the reference disagree")


if __name__ == "__main__":
    main()
