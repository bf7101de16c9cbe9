"""The overlap job's memory at a production-like eval side: 20 000 eval rows of 100
Zipf-drawn words (about 1.9M distinct 13-grams), `memory_per_worker = "256MiB"`, one
worker. The index fits one group (every training file is read once), the job's peak
resident memory (a fresh process) stays within 1.25 × the setting, and the overlapping
instances are exactly those a plain-Python reading of the rules finds. And the
production eval side (200 000 rows) on the smallest setting, 64 MiB."""

from __future__ import annotations

import gzip
import itertools
import json
import random


from support.outputs import coordinator_peak_mib, coordinator_run_measured
from support.overlap import SPLIT, overlap_job

MEMORY_MIB = 256
EVAL_ROWS = 20_000
WORDS = 100
N = 13


def zipf_words(rng: random.Random, vocab: list[str], cum_weights: list[float], k: int) -> list[str]:
    return rng.choices(vocab, cum_weights=cum_weights, k=k)


def run_case(tmp_path, memory_mib: int, eval_rows: int):
    """Writes the corpus, runs the job with `memory_mib` per worker; returns (its peak
    RSS in MiB, its progress summary, the instances found, the instances the plain-Python
    reading of the rules finds)."""
    rng = random.Random(27)
    vocab = [f"w{i}" for i in range(200_000)]
    weights = list(itertools.accumulate(1 / (i + 1) for i in range(len(vocab))))
    eval_texts = [" ".join(zipf_words(rng, vocab, weights, WORDS)) for _ in range(eval_rows)]
    (tmp_path / "eval").mkdir()
    with open(tmp_path / "eval" / "bench-0a1b2c.jsonl", "w") as f:
        for i, text in enumerate(eval_texts):
            f.write(json.dumps({"id": f"e{i}", "text": text}) + "\n")
    # Training documents: Zipf text, one in ten with a 20-word passage of an eval row.
    planted = set()
    train = []
    for d in range(4_000):
        words = zipf_words(rng, vocab, weights, 150)
        if d % 10 == 0:
            row = rng.randrange(eval_rows)
            at = rng.randrange(WORDS - 20)
            words[40:40] = eval_texts[row].split()[at:at + 20]
            planted.add(f"e{row}")
        train.append(" ".join(words))
    (tmp_path / "train").mkdir()
    for part in range(2):
        with gzip.open(tmp_path / "train" / f"part-{part}.jsonl.gz", "wt") as f:
            for d, text in enumerate(train[part::2]):
                f.write(json.dumps({"id": f"t{part}-{d}", "text": text}) + "\n")

    # The rules, in plain Python: the eval rows sharing a 13-gram with a training text.
    train_grams = set()
    for text in train:
        tokens = SPLIT.split(text.lower())
        train_grams.update(" ".join(tokens[i:i + N]) for i in range(len(tokens) - N + 1))
    want = set()
    for i, text in enumerate(eval_texts):
        tokens = SPLIT.split(text.lower())
        if any(" ".join(tokens[k:k + N]) in train_grams for k in range(len(tokens) - N + 1)):
            want.add(f"e{i}")
    assert planted <= want

    out = tmp_path / "out"
    spec = tmp_path / "job.toml"
    spec.write_text(f"""
kind = "ngram_overlap"
[eval]
paths = ["{tmp_path / 'eval'}"]
[train]
paths = ["{tmp_path / 'train'}"]
[ngrams]
n = [{N}]
[output]
url = "{out}"
[run]
mode = "local"
workers = 1
memory_per_worker = "{memory_mib}MiB"
scratch = "{tmp_path / 'scratch'}"
""")
    peak_mib = coordinator_peak_mib("run", str(spec))
    summary = json.loads((out / "progress_summary.json").read_text())
    (stats,) = [json.loads(line) for line in (out / "stats" / "overlap_stats.jsonl").read_text().splitlines()]
    assert (stats["n"], stats["num_instances"]) == (N, eval_rows)
    return peak_mib, summary, set(stats["instance_ids"]), want


def test_a_2m_ngram_eval_side_is_one_group_within_the_memory_setting(tmp_path):
    peak_mib, summary, found, want = run_case(tmp_path, MEMORY_MIB, EVAL_ROWS)
    print(f"peak RSS {peak_mib} MiB (setting {MEMORY_MIB} MiB); {summary['index_groups']} index group(s)")
    assert summary["index_groups"] == 1, summary
    assert peak_mib <= 1.25 * MEMORY_MIB, f"peak RSS {peak_mib} MiB > 1.25 × {MEMORY_MIB} MiB"
    assert found == want


def test_an_eval_file_larger_than_the_memory_setting_is_indexed_in_runs_within_it(tmp_path):
    """64 MiB, the smallest setting, and one eval file of 200 000 rows: 17.6M postings,
    about 200 MiB as an index task holds them, which it used to hold at once (the
    worker peaked at 251 MiB). The task writes them in runs of a quarter of its memory;
    the scans read them in several groups; the instances are still exactly the rules'."""
    memory, rows = 64, 200_000
    peak_mib, summary, found, want = run_case(tmp_path, memory, rows)
    bound = 1.25 * memory + 100e6 / 2**20
    print(f"peak RSS {peak_mib} MiB (bound {bound:.0f} MiB); {summary['index_groups']} index group(s)")
    assert summary["index_groups"] > 1, summary
    assert peak_mib <= bound, f"peak RSS {peak_mib} MiB > {bound:.0f} MiB"
    assert found == want


def test_a_line_past_max_line_bytes_fails_naming_file_and_line_in_bounded_memory(tmp_path):
    """A training file whose second line is 1.5 GB without a newline (a gzip bomb of
    about 1.5 MB: `x` repeated inside a JSON string). It took the job to 6.4 GB at
    256 MiB per worker; now the line reader stops at `max_line_bytes` (64 MiB by
    default) and the job fails at once naming the file and the line."""
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "e.jsonl").write_text(json.dumps({"id": "e0", "text": "a b c d e"}) + "\n")
    (tmp_path / "train").mkdir()
    bomb = tmp_path / "train" / "bomb.jsonl.gz"
    chunk = b"x" * (16 << 20)
    with gzip.open(bomb, "wb", compresslevel=1) as f:
        f.write(json.dumps({"id": "t0", "text": "a b"}).encode() + b"\n" + b'{"text": "')
        for _ in range(1536 // 16):
            f.write(chunk)
    assert MEMORY_MIB == 256  # overlap_job's memory_per_worker
    spec = overlap_job(tmp_path / "job.toml", [tmp_path / "eval"], [tmp_path / "train"], tmp_path / "out",
                       workers=1, n=[3], extra="max_attempts = 3\n")
    code, peak_mib, stderr = coordinator_run_measured("run", str(spec))
    print(f"exit {code}, peak RSS {peak_mib} MiB")
    assert code == 1, stderr
    assert "bomb.jsonl.gz" in stderr and "line 2 is longer than" in stderr and "max_line_bytes" in stderr, stderr
    assert "after 1 attempt(s)" in stderr, stderr
    assert peak_mib <= 1.25 * MEMORY_MIB + 3 * 64, f"peak RSS {peak_mib} MiB"
