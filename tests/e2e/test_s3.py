"""The job against a real S3-compatible server on loopback (moto's server, from PyPI).

Input and output on ``s3://`` URLs must give the same shard bytes as the same job on
local disk; the journal, the resume and the status on S3 behave as on disk. The objects
are uploaded and read back with boto3, independently of the job's own object store.
"""

from __future__ import annotations

import fnmatch
import json
import signal
import subprocess
import time
from pathlib import Path


from support.probe_rows import job_file
from support.run import COORDINATOR, run
from support.s3 import BUCKET


def keys(client, prefix: str) -> list[str]:
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)


def staged_input(tmp_path: Path, client, prefix: str, rows: int, seed: int, workers: int) -> Path:
    """Generates input locally, uploads it under `prefix/` with boto3, runs the job on the
    local copy; returns that local output (the reference)."""
    local_input = tmp_path / "input"
    run(["generate", "--rows", str(rows), "--out", str(local_input), "--seed", str(seed)])
    for f in sorted(local_input.glob("*.parquet")):
        client.upload_file(str(f), BUCKET, f"{prefix}/{f.name}")
    local_out = tmp_path / "out-local"
    run(["run", str(job_file(tmp_path, "local", f"{local_input}/*.parquet", local_out, workers=workers))])
    return local_out


def test_s3_input_and_output_give_the_local_bytes(tmp_path, s3):
    client, env = s3
    local_out = staged_input(tmp_path, client, "input", 120_000, 8, workers=2)
    spec = job_file(tmp_path, "s3", f"s3://{BUCKET}/input/*.parquet", f"s3://{BUCKET}/out")
    done = run(["run", str(spec)], env=env)
    assert "done." in done.stdout

    local_manifest = json.loads((local_out / "manifest.json").read_text())
    s3_manifest = json.loads(client.get_object(Bucket=BUCKET, Key="out/manifest.json")["Body"].read())
    assert [(s["path"], s["blake3"]) for s in s3_manifest["shards"]] == [
        (s["path"], s["blake3"]) for s in local_manifest["shards"]
    ]
    assert s3_manifest["totals"] == local_manifest["totals"]
    for s in local_manifest["shards"]:
        body = client.get_object(Bucket=BUCKET, Key=f"out/{s['path']}")["Body"].read()
        assert body == (local_out / s["path"]).read_bytes(), s["path"]
    listed = keys(client, "out/")
    assert "out/_SUCCESS" in listed
    assert not [k for k in listed if k.startswith("out/_job/shuffle/")], "shuffle objects removed"

    # The journal lives on S3 too: the finished job says so, status reads it.
    again = run(["run", str(spec)], env=env)
    assert "already complete" in again.stdout
    status = run(["status", f"s3://{BUCKET}/out"], env=env)
    assert "finished" in status.stdout and "120000 kept" in status.stdout
    # `verify` reads the record and every file from the store; the same file list (and
    # digests) as the local run's, but the manifest (it names the input's URLs).
    verified = run(["verify", f"s3://{BUCKET}/out"], env=env)
    assert "probe_rows output" in verified.stdout and "match its completion record" in verified.stdout
    record = json.loads(client.get_object(Bucket=BUCKET, Key="out/_SUCCESS")["Body"].read())
    local_record = json.loads((local_out / "_SUCCESS").read_text())
    def but_manifest(outputs):
        return {**outputs, "files": [f for f in outputs["files"] if f["path"] != "manifest.json"]}
    assert but_manifest(record["outputs"]) == but_manifest(local_record["outputs"])
    client.put_object(Bucket=BUCKET, Key="out/rejects/stray.parquet", Body=b"x")
    verified = run(["verify", f"s3://{BUCKET}/out"], env=env, check=False)
    assert verified.returncode == 1 and "rejects/stray.parquet is not listed" in verified.stderr, verified.stderr


def test_s3_sigkill_then_resume(tmp_path, s3):
    client, env = s3
    local_out = staged_input(tmp_path, client, "crash-input", 200_000, 9, workers=1)
    spec = job_file(tmp_path, "s3", f"s3://{BUCKET}/crash-input/*.parquet", f"s3://{BUCKET}/crash-out",
                    workers=1)
    proc = subprocess.Popen([str(COORDINATOR), "run", str(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and len(keys(client, "crash-out/_job/journal/map-")) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = keys(client, "crash-out/_job/journal/")
    assert done_before, "the job was killed before any task finished"
    assert "crash-out/_SUCCESS" not in keys(client, "crash-out/")

    resumed = run(["run", str(spec)], env=env)
    assert "resumed from the journal" in resumed.stdout
    n_resumed = int(resumed.stdout.split(" resumed")[0].rsplit("(", 1)[1].split(", ")[1].split()[0])
    assert n_resumed == len([k for k in done_before if fnmatch.fnmatch(k.rsplit("/", 1)[1], "*-*.json")])
    ref = json.loads((local_out / "manifest.json").read_text())["shards"]
    for s in ref:
        body = client.get_object(Bucket=BUCKET, Key=f"crash-out/{s['path']}")["Body"].read()
        assert body == (local_out / s["path"]).read_bytes(), s["path"]


def test_an_input_object_replaced_on_s3_mid_run_is_refused(tmp_path, s3):
    """Every read of an input object carries the ETag it was planned with (If-Match):
    the object replaced after planning (the coordinator paused once the plan is in the
    journal, the last file rewritten with half its rows) fails the job naming it,
    rather than a map reading the new version's bytes into the old plan."""
    client, env = s3
    local_input = tmp_path / "input"
    run(["generate", "--rows", "60000", "--out", str(local_input), "--seed", "12"])
    files = sorted(local_input.glob("*.parquet"))
    for f in files:
        client.upload_file(str(f), BUCKET, f"replaced-input/{f.name}")
    spec = job_file(tmp_path, "s3", f"s3://{BUCKET}/replaced-input/*.parquet",
                    f"s3://{BUCKET}/replaced-out", workers=1)
    spec.write_text(spec.read_text().replace("rows_per_map_task = 60000", "rows_per_map_task = 5000"))
    proc = subprocess.Popen([str(COORDINATOR), "run", str(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while "replaced-out/_job/journal/job.json" not in keys(client, "replaced-out/_job/journal/"):
        assert time.time() < deadline and proc.poll() is None, "the job was never planned"
        time.sleep(0.01)
    proc.send_signal(signal.SIGSTOP)
    try:
        import pyarrow.parquet as pq

        victim = files[-1]
        half = tmp_path / "half.parquet"
        table = pq.read_table(victim)
        pq.write_table(table.slice(0, table.num_rows // 2), half)
        client.upload_file(str(half), BUCKET, f"replaced-input/{victim.name}")
    finally:
        proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (1, 2), err
    assert f"s3://{BUCKET}/replaced-input/{victim.name}" in err, err
    assert "changed since the job was planned" in err, err
    assert "replaced-out/_SUCCESS" not in keys(client, "replaced-out/")
