"""The overlap job's training scan against the plain-Python reference, on one core
(a benchmark, not a test).

    .venv/bin/python tests/bench/overlap.py [--train-mb 200] [--bin target/release]
    .venv/bin/python tests/bench/overlap.py --shape production [--eval-rows 200000]
    .venv/bin/python tests/bench/overlap.py --shape cleaning [--job-runs 2]

`--shape production` is the decontamination runs' shape (see [production] below);
without it, a small eval side:

Writes a corpus (2 000 eval rows; `--train-mb` MB of training text in 8 gzip JSONL
files, ~1% of documents with a planted eval passage, ~2% with non-ASCII text), then, on
CPU 0 only:

* runs the job (`coordinator run`, local mode, one worker) and reads its scan tasks'
  CPU times from the log (`task CPU time ... cpu_ms=`: the CPU time of the thread that
  ran the task, reading and inflating included): training text scanned per CPU second
  by the scan stage; also per wall second of the scan tasks, and of the whole job
  (planning, index, scan, report);
* runs the reference scan in Python (the design notes' rules: `str.lower`, `re.split`,
  n-grams joined by spaces, looked up in a set of the eval n-grams) on one training
  file: text per CPU second;

in `--rounds` rounds (default 8: every training file once in Python), and one more job
run: the median job run is compared with the median Python file. CPU time on both sides
and alternating rounds, as the machine is shared and its speed drifts: one job run
against a minute of Python swung the ratio from 24x to 36x here.

Prints both, their ratio, the job's peak RSS and the number of overlap records each
found on the part both scanned (they must be equal).

[production] `--eval-rows` eval records (default 200 000) of about 100 words drawn from
a 200 000-word vocabulary with Zipf weights (1/rank): about 17.6M distinct 13-grams,
107 MB of eval JSONL; `--train-mb` MB of training text (default 210) in 8 `.jsonl.gz`
files of the same words, one document in a hundred with a 20-word eval passage; `n =
[13]`, one worker, `memory_per_worker = --memory` (default 2GiB), one core. The job and
the plain-Python reference (a dict of the eval n-gram strings, then every training
window looked up in it) run in fresh processes under `/usr/bin/time`, the job
`--job-runs` times (default 3; its median run is the one compared) and Python once:
CPU seconds (user + system) and peak RSS side by side, their ratio, the job's stages'
CPU seconds, the index's bytes per distinct n-gram and the number of index groups
(each training file is read once per group), and the overlap records each found (they
must be equal).

[cleaning] On the production corpus: the job without and with `[clean]` (drop, cut),
alternating, `--job-runs` times each, and the plain-Python drop cleaner (the peer: each
training file read and written again with gzip at level 6, the manifest's rows left
out; its lines must equal the job's); then the job run again on each cleaned corpus
(overlap records left: 0). On a copy with a planted 30-word template (1% of eval rows,
5% of training documents): the job with `[triage]` (limits 100, `exclude = true`) and
`[clean] mode = "cut"`: its time, hot n-grams, contaminated instances, and what a run
on its cleaned corpus finds (only n-grams the first run called hot). Without triage
that corpus makes rows × documents × 18 = 242M detail records: not run.
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
import sys
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


def python_index(eval_dir: Path) -> dict[int, dict[str, list[int]]]:
    """The reference's index: effective n → n-gram → eval rows."""
    index: dict[int, dict[str, list[int]]] = {}
    with open(eval_dir / "bench-dolma-abcdef.jsonl") as f:
        for row, line in enumerate(f):
            tokens = SPLIT.split(json.loads(line)["text"].lower())
            for n in N_VALUES:
                eff = min(n, len(tokens))
                for i in range(len(tokens) - eff + 1):
                    index.setdefault(eff, {}).setdefault(" ".join(tokens[i:i + eff]), []).append(row)
    return index


def python_scan(index: dict[int, dict[str, list[int]]], path: Path) -> tuple[float, int, int]:
    """The reference on one training file: (text per CPU second, text bytes, overlap
    records)."""
    started = time.process_time()
    scanned, records = 0, 0
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
    return scanned / (time.process_time() - started), scanned, records


def make_production_corpus(work: Path, eval_rows: int, train_mb: int) -> None:
    import numpy as np

    rng = np.random.default_rng(27)
    vocab = np.array([f"w{i}" for i in range(200_000)])
    cdf = np.cumsum(1 / np.arange(1, len(vocab) + 1))
    cdf /= cdf[-1]

    def words(k: int) -> list[str]:
        return list(vocab[np.minimum(np.searchsorted(cdf, rng.random(k)), len(vocab) - 1)])
    eval_dir, train_dir = work / "eval", work / "train"
    eval_dir.mkdir(parents=True)
    train_dir.mkdir(parents=True)
    evals = []
    with open(eval_dir / "prod-0a1b2c.jsonl", "w") as f:
        for i in range(eval_rows):
            text = " ".join(words(int(rng.integers(90, 111))))
            evals.append(text)
            f.write(json.dumps({"id": f"e{i}", "text": text}) + "\n")
    per_file = train_mb * 1_000_000 // 8
    for k in range(8):
        written = 0
        with gzip.open(train_dir / f"train-{k:05}.jsonl.gz", "wt", compresslevel=1) as f:
            while written < per_file:
                doc_words = words(int(rng.integers(100, 500)))
                if rng.random() < 0.01:
                    src = evals[int(rng.integers(len(evals)))].split(" ")
                    a = int(rng.integers(0, len(src) - 20))
                    doc_words[10:10] = src[a:a + 20]
                doc = " ".join(doc_words)
                f.write(json.dumps({"text": doc}) + "\n")
                written += len(doc) + 1


def python_reference(eval_dir: Path, train_dir: Path, n: int) -> None:
    """The plain-Python reference, whole (index, then scan): prints its overlap
    records (one per eval row, training row and n-gram)."""
    index: dict[str, list[int]] = {}
    for path in sorted(eval_dir.iterdir()):
        with open(path) as f:
            for row, line in enumerate(f):
                tokens = SPLIT.split(json.loads(line)["text"].lower())
                eff = min(n, len(tokens))
                for g in {" ".join(tokens[i:i + eff]) for i in range(len(tokens) - eff + 1)}:
                    index.setdefault(g, []).append(row)
    records = 0
    for path in sorted(train_dir.iterdir()):
        with gzip.open(path, "rt") as f:
            for line in f:
                tokens = SPLIT.split(json.loads(line)["text"].lower())
                found = {g for g in (" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
                         if g in index}
                records += sum(len(index[g]) for g in found)
    print(records)


def write_job(spec: Path, eval_path: Path, train_dir: Path, n: list[int], out: Path, memory: str,
              scratch: Path) -> None:
    """Writes the benchmark's job file: local mode, one worker."""
    spec.write_text(f"""
kind = "ngram_overlap"
[eval]
paths = ["{eval_path}"]
[train]
paths = ["{train_dir}"]
[ngrams]
n = {n}
[output]
url = "{out}"
[run]
mode = "local"
workers = 1
memory_per_worker = "{memory}"
scratch = "{scratch}"
""")


def timed(cmd: list[str], env=None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Runs cmd under /usr/bin/time: (the process, CPU seconds, peak RSS in MiB)."""
    proc = subprocess.run(["/usr/bin/time", "-f", "TIME %U %S %M", *cmd], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed:\n{proc.stderr[-3000:]}")
    user, sys_, rss = re.findall(r"TIME ([\d.]+) ([\d.]+) (\d+)", proc.stderr)[-1]
    return proc, float(user) + float(sys_), int(rss) / 1024


def production(args) -> None:
    corpus = args.work / f"production-{args.eval_rows}-{args.train_mb}"
    if not (corpus / "train").exists():
        shutil.rmtree(corpus, ignore_errors=True)
        print(f"writing the corpus ({args.eval_rows} eval rows, {args.train_mb} MB of training text) ...",
              flush=True)
        make_production_corpus(corpus, args.eval_rows, args.train_mb)
    eval_dir, train_dir = corpus / "eval", corpus / "train"
    out = args.work / "out-production"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(args.work / "scratch", ignore_errors=True)
    spec = args.work / "overlap-production.toml"
    write_job(spec, eval_dir, train_dir, [13], out, args.memory, args.work / "scratch")
    env = dict(os.environ, RUST_LOG="info,probeflow=debug", NO_COLOR="1")
    # The job runs a few times (seconds each; the machine is shared and one run can be
    # 20% off): the run of median CPU time is the one reported.
    runs = []
    for _ in range(args.job_runs):
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(args.work / "scratch", ignore_errors=True)
        runs.append(timed([str(args.bin / "coordinator"), "run", str(spec)], env=env))
    runs.sort(key=lambda r: r[1])
    proc, job_cpu, job_rss = runs[len(runs) // 2]
    job_rss = max(r[2] for r in runs)
    stages = {}
    for stage, ms in re.findall(r"task CPU time task=(\w+)-\d+ attempt=\d+ cpu_ms=(\d+)", proc.stderr):
        stages[stage] = stages.get(stage, 0) + int(ms) / 1000
    loaded = re.findall(r"index group loaded .*?ngrams=(\d+) bytes=(\d+)", proc.stderr)
    ngrams = sum(int(a) for a, _ in loaded)
    index_bytes = sum(int(b) for _, b in loaded)
    summary = json.loads((out / "progress_summary.json").read_text())
    groups = summary["index_groups"]
    details = gzip.decompress((out / "stats" / "overlap_details.jsonl.gz").read_bytes()).count(b"\n")
    text_mb = summary["totals"]["train_text_bytes"] / 1e6
    eval_mb = sum(p.stat().st_size for p in eval_dir.iterdir()) / 1e6
    print(f"eval: {args.eval_rows} rows ({eval_mb:.0f} MB); training text: {text_mb:.0f} MB in 8 .jsonl.gz "
          f"files; n = [13]; one worker, memory_per_worker = {args.memory}; one core", flush=True)
    print(f"job:    {job_cpu:7.2f} CPU s (median of {len(runs)} runs: "
          + ", ".join(f"{r[1]:.2f}" for r in runs) + f"), peak RSS {job_rss:6.0f} MiB (the most of any run); stages (CPU s): "
          + ", ".join(f"{k} {v:.1f}" for k, v in sorted(stages.items())))
    print(f"        index: {ngrams / 1e6:.1f}M distinct n-grams, {index_bytes / max(ngrams, 1):.1f} bytes each; "
          f"{groups} index group(s)", flush=True)
    py, py_cpu, py_rss = timed([sys.executable, __file__, "--python-reference", str(eval_dir), str(train_dir)])
    py_records = int(py.stdout.split()[-1])
    print(f"Python: {py_cpu:7.1f} CPU s, peak RSS {py_rss:6.0f} MiB")
    print(f"ratio (Python CPU / job CPU): {py_cpu / job_cpu:.1f}x; "
          f"scan stage alone: {text_mb / stages.get('scan', 1):.0f} MB per CPU s")
    print(f"overlap records: job {details}, Python {py_records}")
    if details != py_records:
        raise SystemExit("the job and the reference disagree")


TEMPLATE = " ".join(f"bp{i}" for i in range(30))


def plant_template(src: Path, dst: Path) -> None:
    """A copy of corpus `src` with TEMPLATE before 1% of its eval texts and inside 5% of
    its training documents (seeded)."""
    rng = random.Random(11)
    (dst / "eval").mkdir(parents=True)
    (dst / "train").mkdir()
    for p in sorted((src / "eval").iterdir()):
        with open(p) as f, open(dst / "eval" / p.name, "w") as out:
            for line in f:
                r = json.loads(line)
                if rng.random() < 0.01:
                    r["text"] = TEMPLATE + " " + r["text"]
                out.write(json.dumps(r) + "\n")
    for p in sorted((src / "train").iterdir()):
        lines = []
        for line in gzip.decompress(p.read_bytes()).decode().splitlines():
            r = json.loads(line)
            if rng.random() < 0.05:
                words = r["text"].split(" ")
                at = rng.randrange(len(words) + 1)
                r["text"] = " ".join(words[:at] + [TEMPLATE] + words[at:])
            lines.append(json.dumps(r) + "\n")
        (dst / "train" / p.name).write_bytes(gzip.compress("".join(lines).encode(), mtime=0))


def python_drop_cleaner(out: Path, train_dir: Path, dst: Path) -> None:
    """The peer: every training file written again, the manifest's rows left out."""
    drop: dict[str, set[int]] = {}
    with gzip.open(out / "stats" / "clean_manifest.jsonl.gz", "rt") as f:
        for line in f:
            r = json.loads(line)
            drop.setdefault(r["train_path"], set()).add(r["train_row"])
    dst.mkdir(parents=True)
    for p in sorted(train_dir.iterdir()):
        rows, row = drop.get(str(p), set()), 0
        with gzip.open(p, "rb") as src, gzip.open(dst / p.name, "wb", compresslevel=6) as w:
            for line in src:
                if not line.strip(b" \t\r\n"):
                    w.write(line)
                    continue
                if row not in rows:
                    w.write(line)
                row += 1


def cleaning(args) -> None:
    corpus = args.work / f"production-{args.eval_rows}-{args.train_mb}"
    if not (corpus / "train").exists():
        shutil.rmtree(corpus, ignore_errors=True)
        make_production_corpus(corpus, args.eval_rows, args.train_mb)
    planted = args.work / f"planted-{args.eval_rows}-{args.train_mb}"
    if not (planted / "train").exists():
        shutil.rmtree(planted, ignore_errors=True)
        plant_template(corpus, planted)
    coordinator = str(args.bin / "coordinator")

    def job(name: str, source: Path, train: Path, extra: str) -> tuple[Path, float, float, float]:
        out, spec = args.work / f"clean-{name}", args.work / f"clean-{name}.toml"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(args.work / "scratch", ignore_errors=True)
        write_job(spec, source / "eval", train, [13], out, args.memory, args.work / "scratch")
        spec.write_text(spec.read_text() + extra)
        started = time.time()
        _, cpu, rss = timed([coordinator, "run", str(spec)])
        return out, time.time() - started, cpu, rss

    def details(out: Path) -> int:
        return gzip.decompress((out / "stats" / "overlap_details.jsonl.gz").read_bytes()).count(b"\n")

    train = corpus / "train"
    runs: dict[str, list[tuple[float, float, float]]] = {}
    outs: dict[str, Path] = {}
    for _ in range(args.job_runs):
        for name, extra in [("none", ""), ("drop", '[clean]\nmode = "drop"\n'), ("cut", '[clean]\nmode = "cut"\n')]:
            outs[name], wall, cpu, rss = job(name, corpus, train, extra)
            runs.setdefault(name, []).append((wall, cpu, rss))
        peer = args.work / "clean-python"
        shutil.rmtree(peer, ignore_errors=True)
        started, before = time.time(), resource.getrusage(resource.RUSAGE_SELF)
        python_drop_cleaner(outs["drop"], train, peer)
        after = resource.getrusage(resource.RUSAGE_SELF)
        runs.setdefault("python drop cleaner", []).append(
            (time.time() - started, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 0))
    for p in sorted(train.iterdir()):
        if gzip.decompress((peer / p.name).read_bytes()) != gzip.decompress(
                (outs["drop"] / "cleaned" / p.name).read_bytes()):
            raise SystemExit(f"{p.name}: the job's cleaned lines are not the peer's")
    print(f"production corpus, {len(list(train.iterdir()))} training files; median of {args.job_runs} runs:")
    for name, r in runs.items():
        r.sort()
        wall, cpu, rss = r[len(r) // 2]
        print(f"  {name:<22} {wall:6.2f} s wall {cpu:6.2f} CPU s" + (f"  peak RSS {rss:5.0f} MiB" if rss else ""))
    for name in ("drop", "cut"):
        again, *_ = job(f"{name}-again", corpus, outs[name] / "cleaned", "")
        print(f"  run again on the {name} corpus: {details(again)} overlap records")
    triage = "[triage]\nmax_train_docs = 100\nmax_eval_rows = 100\nexclude = true\n"
    out, wall, cpu, rss = job("planted", planted, planted / "train", triage + '[clean]\nmode = "cut"\n')
    hot = [json.loads(line) for line in (out / "stats" / "hot_ngrams.jsonl").read_text().splitlines()]
    stats = [json.loads(line) for line in (out / "stats" / "overlap_stats.jsonl").read_text().splitlines()]
    print(f"planted template, [triage] limits 100 exclude, [clean] cut: {wall:.2f} s wall {cpu:.2f} CPU s "
          f"peak RSS {rss:.0f} MiB; {len(hot)} hot n-grams; contaminated "
          + ", ".join(f"{s['eval_dataset']} n={s['n']}: {len(s['instance_ids'])}" for s in stats))
    again, *_ = job("planted-again", planted, out / "cleaned", triage)
    hot_before = {(h["n"], h["ngram"]) for h in hot}
    left = {(d["n"], d["ngram"]) for d in map(json.loads, gzip.decompress(
        (again / "stats" / "overlap_details.jsonl.gz").read_bytes()).splitlines())}
    print(f"  run again on its cleaned corpus: {details(again)} records of {len(left)} n-grams, "
          f"{len(left - hot_before)} of them not hot in the first run")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--python-reference":
        python_reference(Path(sys.argv[2]), Path(sys.argv[3]), 13)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=["small", "production", "cleaning"], default="small")
    ap.add_argument("--eval-rows", type=int, default=200_000, help="production: eval records")
    ap.add_argument("--memory", default="2GiB", help="production: memory_per_worker")
    ap.add_argument("--job-runs", type=int, default=3,
                    help="production: job runs (the median is compared with Python's one run)")
    ap.add_argument("--train-mb", type=int, default=None,
                    help="MB of training text (default 200; production: 210)")
    ap.add_argument("--rounds", type=int, default=8,
                    help="rounds of one job run and the reference on one training file (at most 8)")
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release")
    ap.add_argument("--work", type=Path, default=ROOT / "target" / "bench-overlap")
    args = ap.parse_args()
    args.work = args.work.resolve()
    os.sched_setaffinity(0, {0})  # one core, for both (children inherit it)
    if args.shape == "production":
        args.train_mb = args.train_mb or 210
        production(args)
        return
    if args.shape == "cleaning":
        args.train_mb = args.train_mb or 210
        cleaning(args)
        return
    args.train_mb = args.train_mb or 200
    corpus = args.work / f"corpus-{args.train_mb}"
    if not (corpus / "train").exists():
        shutil.rmtree(corpus, ignore_errors=True)
        print(f"writing the corpus ({args.train_mb} MB of training text) ...", flush=True)
        make_corpus(corpus, args.train_mb)
    eval_dir, train_dir = corpus / "eval", corpus / "train"
    out = args.work / "out"
    shutil.rmtree(out, ignore_errors=True)
    spec = args.work / "overlap.toml"
    write_job(spec, eval_dir / "bench-dolma-abcdef.jsonl", train_dir, N_VALUES, out, "1GiB",
              args.work / "scratch")
    env = dict(os.environ, RUST_LOG="info,probeflow=debug", NO_COLOR="1")

    def run_job() -> tuple[float, float, float, float, int]:
        """One run of the job: (scan-stage rate per CPU second, per wall second,
        whole-job rate, scan CPU seconds, text bytes)."""
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(args.work / "scratch", ignore_errors=True)
        started = time.time()
        proc = subprocess.run([str(args.bin / "coordinator"), "run", str(spec)], env=env,
                              capture_output=True, text=True)
        wall = time.time() - started
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        scan_ms = sum(int(m) for m in re.findall(r"task=scan-\d+ attempt=\d+ ms=(\d+)", proc.stderr))
        cpu_ms = sum(int(m) for m in re.findall(
            r"task CPU time task=scan-\d+ attempt=\d+ cpu_ms=(\d+)", proc.stderr))
        if not cpu_ms:  # a build from before the CPU times were logged
            print("(no scan task CPU times in the job's log: wall times used)", flush=True)
            cpu_ms = scan_ms
        summary = json.loads((out / "progress_summary.json").read_text())["totals"]
        text_bytes = summary["train_text_bytes"]
        return (text_bytes / (cpu_ms / 1000), text_bytes / (scan_ms / 1000), text_bytes / wall,
                cpu_ms / 1000, text_bytes)

    # The machine is shared and its speed drifts: job runs (a second or two each) and
    # the reference's files (seconds each) alternate, and the medians are compared.
    py_index = python_index(eval_dir)
    train_files = sorted(train_dir.iterdir())[:max(1, min(args.rounds, 8))]
    runs, py_runs = [], []
    for path in train_files:
        runs.append(run_job())
        py_runs.append(python_scan(py_index, path))
    runs.append(run_job())
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    job_scan, job_scan_wall, job_all, scan_s, text_bytes = sorted(runs)[len(runs) // 2]
    py_rate = sorted(r[0] for r in py_runs)[len(py_runs) // 2]
    py_bytes, py_records = sum(r[1] for r in py_runs), sum(r[2] for r in py_runs)
    train_paths = {str(p) for p in train_files}
    details = gzip.decompress((out / "stats" / "overlap_details.jsonl.gz").read_bytes()).splitlines()
    job_records = sum(1 for line in details if json.loads(line)["train_path"] in train_paths)
    print(f"training text: {text_bytes / 1e6:.0f} MB in 8 files; eval: 2000 rows; n = {N_VALUES}; one core")
    print(f"job, scan stage:   {job_scan / 1e6:8.1f} MB per CPU s  ({scan_s:.2f} CPU s of scan tasks; "
          f"median of {len(runs)} runs: {', '.join(f'{r[0] / 1e6:.0f}' for r in runs)})")
    print(f"                   {job_scan_wall / 1e6:8.1f} MB per wall s of the scan tasks")
    print(f"job, whole run:    {job_all / 1e6:8.1f} MB per wall s  (peak RSS {rss_mib:.0f} MiB)")
    print(f"Python reference:  {py_rate / 1e6:8.2f} MB per CPU s  (median of {len(py_runs)} files, "
          f"{py_bytes / 1e6:.0f} MB: {', '.join(f'{r[0] / 1e6:.2f}' for r in py_runs)})")
    print(f"ratio (scan stage / Python, CPU time): {job_scan / py_rate:.1f}x; "
          f"scan wall time: {job_scan_wall / py_rate:.1f}x; whole job, wall: {job_all / py_rate:.1f}x")
    print(f"overlap records on the files both scanned: job {job_records}, Python {py_records}")
    if job_records != py_records:
        raise SystemExit("the job and the reference disagree")


if __name__ == "__main__":
    main()
