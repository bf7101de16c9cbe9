"""Real full disks where the job keeps its state (root: tmpfs mounts). The bed's own
test covers a worker's full scratch; this one fills the disk the coordinator writes its
journal to, with the output local: the job must stop naming the journal's path and the
full disk, leave no `_SUCCESS`, and, once there is room again, resume from the journal
to local mode's bytes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bed import require_namespaces

from support.probe_rows import write_job
from support.run import COORDINATOR


def job(path: Path, input_url: str, output: Path, scratch: Path) -> Path:
    return write_job(path, {
        "input": {"url": input_url, "rows_per_map_task": 20000},
        "output": {"url": output, "shards": 4},
        "run": {"workers": 2, "memory_per_worker": "256MiB", "scratch": scratch},
    })


def shards(out: Path) -> dict[str, bytes]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {s["path"]: (out / s["path"]).read_bytes() for s in manifest["shards"]}


@pytest.fixture
def mounts():
    made: list[Path] = []
    yield made
    for m in reversed(made):
        subprocess.run(["umount", "-l", str(m)], check=False)


def test_a_full_journal_disk_stops_the_job_naming_it_and_it_resumes_with_room(tmp_path, mounts):
    why = require_namespaces()
    if why:
        pytest.skip(why)
    gen = job(tmp_path / "gen.toml", "", tmp_path / "gen", tmp_path / "scratch")
    gen.write_text(gen.read_text().replace('url = ""', "synthetic = { rows = 400000, seed = 4 }"))
    subprocess.run([str(COORDINATOR), "run", str(gen)], check=True, capture_output=True)
    inputs = f"{tmp_path / 'gen' / '_job' / 'input'}/*.parquet"
    reference = tmp_path / "reference"
    subprocess.run([str(COORDINATOR), "run", str(job(tmp_path / "ref.toml", inputs, reference, tmp_path / "s1"))],
                   check=True, capture_output=True)

    # The journal's directory is a disk of its own with room for a few entries (26 tasks).
    out = tmp_path / "out"
    journal = out / "_job" / "journal"
    journal.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(journal)], check=True)
    mounts.append(journal)
    spec = job(tmp_path / "job.toml", inputs, out, tmp_path / "s2")
    failed = subprocess.run([str(COORDINATOR), "run", str(spec)], capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0, failed.stdout
    error = failed.stderr.strip().splitlines()[-1]
    assert str(journal) in error and "No space left on device" in error, failed.stderr[-3000:]
    assert not (out / "_SUCCESS").exists()
    entries = [p.name for p in journal.iterdir() if p.name != "job.json"]
    assert entries, "the disk was full before any task was journaled: the test tested nothing"

    # Room again (the same disk, grown): the run resumes from what was journaled.
    subprocess.run(["mount", "-o", "remount,size=4m", str(journal)], check=True)
    resumed = subprocess.run([str(COORDINATOR), "run", str(spec)], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from the journal" in resumed.stdout and " 0 resumed" not in resumed.stdout, resumed.stdout
    assert shards(out) == shards(reference)
    print(f"full journal disk: stopped with {error[:200]!r}; resumed: {resumed.stdout.strip()[-120:]}")
