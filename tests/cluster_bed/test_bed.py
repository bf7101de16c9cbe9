"""The preprocessing job on the multi-host bed (bed.py): coordinator and workers on
hosts of their own, with private scratch, input and output only on the object store,
reachable only over the links; and faults made on the links. Each run must end with
the shards local mode writes from the same input, byte for byte.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import blake3
import pytest

from bed import Bed, require_namespaces

from support.outputs import READER
from support.probe_rows import SHARDS, job_toml
from support.run import COOKIE, COORDINATOR, WORKER, run

ROWS = 200_000
BUCKET = "bed"
COORDINATOR_PORT = 7400


def generate_input(root: Path, rows: int) -> Path:
    """`rows` synthetic input rows (seed 4), made by a local run of the synthetic job
    under `root`; returns the folder of their Parquet files, `root/input`."""
    gen = root / "gen.toml"
    gen.write_text(f"""
[input]
synthetic = {{ rows = {rows}, seed = 4 }}
[output]
url = "{root / 'gen'}"
shards = 1
[run]
workers = 2
scratch = "{root / 'scratch'}"
""")
    run(["run", str(gen)])
    inputs = root / "input"
    inputs.mkdir()
    for f in (root / "gen" / "_job" / "input").glob("*.parquet"):
        f.rename(inputs / f.name)
    return inputs


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Input Parquet files (made by a local run of the synthetic job) and the shards
    local mode writes from them: {relative path: blake3}."""
    root = tmp_path_factory.mktemp("reference")
    inputs = generate_input(root, ROWS)
    local = root / "local.toml"
    local.write_text(job_text(f"{inputs}/*.parquet", root / "local-out", "local", "", 60))
    run(["run", str(local)])
    return inputs, shards_of(json.loads((root / "local-out" / "manifest.json").read_text()))


def shards_of(manifest: dict) -> dict[str, str]:
    return {s["path"]: s["blake3"] for s in manifest["shards"]}


def job_text(input_url: str, output: str | Path, mode: str, listen: str, lease: int,
             lock: int = 60, map_rows: int = 50_000) -> str:
    """The bed's probe-rows job (`listen`: a `listen = …` line, or none)."""
    return job_toml(
        {
            "input": {"url": input_url, "rows_per_map_task": map_rows},
            "output": {"url": output, "shards": SHARDS},
            "split": {"test_fraction": 0.1, "seed": 3},
            "run": {"mode": mode, "workers": 2, "memory_per_worker": "256MiB",
                    "lease_seconds": lease, "output_lock_seconds": lock},
        },
        raw={"run": listen},
    )


#: The stores a test runs against, by `@on_stores`: moto's server, and Ceph's RADOS
#: Gateway (a real S3 implementation: support/ceph_rgw.py).
STORES = ("moto", "ceph")
on_stores = pytest.mark.parametrize("bed", STORES, indirect=True)


@pytest.fixture
def bed(tmp_path, request):
    """The bed: 2 workers and a second coordinator host; its store host runs moto's S3
    server, or the server `@on_stores` names."""
    why = require_namespaces()
    if why:
        pytest.skip(why)
    b = Bed(tmp_path, workers=2, extra=("coord2",), store_server=getattr(request, "param", "moto"))
    try:
        yield b
    finally:
        b.close()


def start_job(bed: Bed, inputs: Path, lease: int = 60, env: dict | None = None, host: str = "coord",
              upload: bool = True, lock: int = 60, log: str = "coordinator",
              map_rows: int = 50_000) -> subprocess.Popen:
    """Uploads the input to the store and starts the coordinator on `host`."""
    if upload:
        bed.store("mkbucket", BUCKET)
        bed.store("upload", str(inputs), f"s3://{BUCKET}/in")
    coord = bed.hosts[host]
    spec = coord.home / "job.toml"
    spec.write_text(job_text(
        f"s3://{BUCKET}/in/*.parquet", f"s3://{BUCKET}/out", "cluster",
        f'listen = "{coord.address}:{COORDINATOR_PORT}"\nallow_plaintext = true\n'
        f'scratch = "{coord.home / "scratch"}"', lease, lock, map_rows))
    env = {"PROBEFLOW_COOKIE": COOKIE, "NO_COLOR": "1",
           "RUST_LOG": "info,probeflow_engine::coordinator=debug,ractor_cluster=warn", **(env or {})}
    return bed.spawn(host, [str(COORDINATOR), "run", str(spec)], log=log, env=env)


def start_worker(bed: Bed, host: str, give_up: int = 120, env: dict | None = None,
                 coordinator: str = "coord", log: str = "worker", name: str | None = None) -> subprocess.Popen:
    h = bed.hosts[host]
    env = {"PROBEFLOW_COOKIE": COOKIE, "NO_COLOR": "1", "RUST_LOG": "info,worker=debug,probeflow=debug",
           **(env or {})}
    return bed.spawn(host, [str(WORKER), "--join", f"{bed.hosts[coordinator].address}:{COORDINATOR_PORT}",
                            "--name", name or host, "--memory", "256MiB", "--scratch", str(h.home / "scratch"),
                            "--give-up-after", str(give_up)], log=log, env=env)


def leftovers(root: Path, output: set[str]) -> list[str]:
    """Files under a downloaded output `root` that are neither `output` (relative paths)
    nor the job's kept bookkeeping (`_job/journal/`, the event log `_job/events/`,
    progress files)."""
    kept = ("_job/journal/", "_job/events/", "_job/progress", "_job/excluded-workers.json", "progress")
    return sorted(f for f in (str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
                  if f not in output and not f.startswith(kept))


def output_shards(bed: Bed) -> dict[str, str]:
    """The output's shards, as its manifest on the store lists them, each checked against
    its bytes on the store; nothing else left on the store under the output (no
    shuffle file, no stray shard or rejects of a fenced attempt)."""
    got = bed.hosts["store"].home / f"fetched-{time.time_ns()}"
    bed.store("download", f"s3://{BUCKET}/out", str(got))
    manifest = json.loads((got / "manifest.json").read_text())
    shards = shards_of(manifest)
    for path, digest in shards.items():
        assert blake3.blake3((got / path).read_bytes()).hexdigest() == digest, path
    listed = {"manifest.json", "_SUCCESS", *shards, *manifest.get("rejects", [])}
    assert not leftovers(got, listed), leftovers(got, listed)
    return shards


def wait_for(predicate, timeout: float = 120) -> float:
    start = time.time()
    while not predicate():
        if time.time() - start > timeout:
            raise AssertionError("timed out")
        time.sleep(0.1)
    return time.time() - start


def w1_holding_a_task(bed: Bed, inputs: Path, lease: int,
                      env: dict | None = None) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Starts the job (lease `lease` seconds) and worker w1 alone (`env`: its own
    environment, e.g. a slow store); returns both once w1 runs a task."""
    coordinator = start_job(bed, inputs, lease=lease)
    w1 = start_worker(bed, "w1", env=env)
    wait_for(lambda: re.search(r"running.*(map|reduce)-", bed.log("w1", "worker")) is not None)
    return coordinator, w1


@on_stores
def test_a_cluster_of_separate_hosts_writes_the_local_bytes(bed, reference):
    """Coordinator and two workers on hosts of their own, each with private scratch, the
    input and output only on the store: local mode's shards, byte for byte."""
    inputs, want = reference
    coordinator = start_job(bed, inputs)
    workers = [start_worker(bed, "w1"), start_worker(bed, "w2")]
    assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
    for w in workers:
        w.wait(timeout=60)
    assert output_shards(bed) == want
    # Each worker used only its own scratch; nothing of one is under another's home.
    for host in ("w1", "w2"):
        assert "running" in bed.log(host, "worker"), bed.log(host, "worker")[-2000:]


def test_a_worker_partitioned_past_its_lease_is_fenced_and_its_task_done_elsewhere(bed, reference):
    """w1's link is cut while it holds a task (its packets vanish: no socket closes);
    its lease expires and w2 does the task; the link heals and w1's late result is
    refused. The same bytes. Prints the time to detect (lease expiry) and to finish."""
    inputs, want = reference
    lease = 4
    coordinator, w1 = w1_holding_a_task(bed, inputs, lease)
    bed.cut("w1")
    cut_at = time.time()
    start_worker(bed, "w2")
    detect = wait_for(lambda: "lease expired" in bed.log("coord", "coordinator"), timeout=120)
    time.sleep(2 * lease)
    bed.heal("w1")
    assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
    finished = time.time() - cut_at
    print(f"partition: lease expiry seen {detect:.1f} s after the cut (lease {lease} s); job done {finished:.1f} s after it")
    w1.wait(timeout=120)
    assert output_shards(bed) == want
    log = bed.log("coord", "coordinator")
    assert re.search(r"lease expired.*w1|w1.*lease expired", log), log[-3000:]


@on_stores
def test_a_slow_throttling_failing_store_still_gives_the_local_bytes(bed, reference):
    """Every store request of the coordinator and the workers goes through a proxy that
    adds 50 ms, answers 10 % with 503 SlowDown, 2 % with 500 and resets 2 % of
    connections: the job finishes, no task fails for good, the same bytes."""
    inputs, want = reference
    through = bed.start_proxy(delay_ms=50, slowdown=0.1, error=0.02, reset=0.02, seed=7)
    started = time.time()
    coordinator = start_job(bed, inputs, env=through)
    workers = [start_worker(bed, "w1", env=through), start_worker(bed, "w2", env=through)]
    assert coordinator.wait(timeout=600) == 0, bed.log("coord", "coordinator")[-3000:]
    took = time.time() - started
    for w in workers:
        w.wait(timeout=60)
    assert output_shards(bed) == want
    faults = [line for line in bed.log("store", "proxy").splitlines() if line.startswith("fault ")]
    kinds = {line.split()[1] for line in faults}
    print(f"faulty store: {len(faults)} faults injected ({', '.join(sorted(kinds))}); job {took:.1f} s")
    assert {"slowdown", "error", "reset"} <= kinds, faults
    assert "failed after" not in bed.log("coord", "coordinator")


@on_stores
def test_a_coordinator_cut_off_is_taken_over_from_another_host_after_its_lock_expires(bed, reference):
    """The coordinator's host is cut off mid-job. A coordinator started on another host
    against the same output is refused while the old one's lock lives (exit 2, naming
    the owner), takes over once it has expired and resumes from the journal with new
    workers; the old one, healed, finds its lock taken and stops without writing. The
    same bytes."""
    inputs, want = reference
    lock = 6
    slow = bed.start_proxy(delay_ms=100, seed=3)
    old = start_job(bed, inputs, env=slow, lock=lock)
    for w in ("w1", "w2"):
        start_worker(bed, w, env=slow, give_up=600)
    wait_for(lambda: "journaled" in bed.log("coord", "coordinator"), timeout=120)
    bed.cut("coord")
    cut_at = time.time()
    early = start_job(bed, inputs, host="coord2", upload=False, lock=lock, log="early")
    assert early.wait(timeout=120) == 2, bed.log("coord2", "early")[-3000:]
    assert "coord-" in bed.log("coord2", "early"), bed.log("coord2", "early")[-3000:]  # the owner's host
    refused_for = time.time() - cut_at
    time.sleep(max(0.0, lock + 1 - refused_for))
    new = start_job(bed, inputs, host="coord2", upload=False, lock=lock, log="takeover")
    for w in ("w1", "w2"):
        start_worker(bed, w, coordinator="coord2", log="worker-2")
    assert new.wait(timeout=300) == 0, bed.log("coord2", "takeover")[-3000:]
    took_over = time.time() - cut_at
    assert "resum" in bed.log("coord2", "takeover"), bed.log("coord2", "takeover")[-3000:]
    assert output_shards(bed) == want
    bed.heal("coord")
    assert old.wait(timeout=120) != 0, bed.log("coord", "coordinator")[-3000:]
    assert "lost the output lock" in bed.log("coord", "coordinator"), bed.log("coord", "coordinator")[-3000:]
    assert output_shards(bed) == want
    print(f"takeover: refused {refused_for:.1f} s after the cut (lock {lock} s), done {took_over:.1f} s after it")


def test_a_worker_paused_past_its_lease_is_fenced(bed, reference):
    """w1 is paused (SIGSTOP: a GC pause, swap, a live migration) while it holds a task,
    past its lease; w2 does the task; w1 resumes (SIGCONT) and its late result is
    refused. The same bytes."""
    inputs, want = reference
    lease = 4
    coordinator, w1 = w1_holding_a_task(bed, inputs, lease)
    os.killpg(w1.pid, signal.SIGSTOP)
    start_worker(bed, "w2")
    detect = wait_for(lambda: "lease expired" in bed.log("coord", "coordinator"), timeout=120)
    os.killpg(w1.pid, signal.SIGCONT)
    assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
    print(f"pause: lease expiry seen {detect:.1f} s after the pause (lease {lease} s)")
    assert output_shards(bed) == want


def test_a_worker_host_that_never_returns_mid_job(bed, reference):
    """w1's host goes away for good while it holds a task: its link is cut first (no
    FIN or RST ever reaches the coordinator), then its processes are killed and its
    namespace deleted. Its lease expires, w2 finishes the job. The same bytes."""
    inputs, want = reference
    lease = 4
    coordinator, w1 = w1_holding_a_task(bed, inputs, lease)
    bed.cut("w1")
    os.killpg(w1.pid, signal.SIGKILL)
    w1.wait(timeout=30)
    subprocess.run(["ip", "netns", "del", bed.hosts["w1"].netns], check=True)
    gone_at = time.time()
    start_worker(bed, "w2")
    assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
    print(f"host gone: job done {time.time() - gone_at:.1f} s after (lease {lease} s)")
    assert re.search(r"lease expired.*w1", bed.log("coord", "coordinator")), bed.log("coord", "coordinator")[-3000:]
    assert output_shards(bed) == want


def test_a_workers_full_scratch_disk_fails_its_task_there_and_the_job_goes_on(bed, reference):
    """w1's scratch is a real 256 KiB filesystem: its reduce fails with a full disk,
    named (directory, space, what it wrote), and the task is done by w2, whose disk has
    room. The same bytes."""
    inputs, want = reference
    scratch = bed.hosts["w1"].home / "scratch"
    scratch.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(scratch)], check=True)
    try:
        coordinator = start_job(bed, inputs)
        start_worker(bed, "w1")
        start_worker(bed, "w2")
        assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
        log = bed.log("coord", "coordinator")
        full = [line for line in log.splitlines() if "No space left on device" in line]
        assert full and all(str(scratch) in line and " free of " in line for line in full), log[-3000:]
        assert output_shards(bed) == want
    finally:
        bed.close()
        subprocess.run(["umount", "-l", str(scratch)], check=False)


@on_stores
def test_the_reader_through_a_faulty_store_gives_the_same_batches(bed, reference):
    """A training host reads the output on the store through the fault proxy (50 ms,
    SlowDown, 500s, resets, and every third request one of them): the same batches as
    from local disk, no hang."""
    inputs, _ = reference
    local_out = inputs.parent / "local-out"
    bed.store("mkbucket", BUCKET)
    bed.store("upload", str(local_out), f"s3://{BUCKET}/read")
    def batches(out: dict) -> tuple:
        return out["digest"], out["batches"]

    want = json.loads(subprocess.run([sys.executable, "-c", READER, json.dumps({"path": str(local_out)})],
                                     capture_output=True, text=True, check=True).stdout)
    through = bed.start_proxy(delay_ms=50, slowdown=0.1, error=0.02, reset=0.02, every=3, seed=11)
    cache = bed.hosts["w1"].home / "cache"
    started = time.time()
    got = bed.run("w1", [sys.executable, "-c", READER, json.dumps({"path": f"s3://{BUCKET}/read"})],
                  timeout=300, env={**through, "PROBEFLOW_CACHE_DIR": str(cache)})
    print(f"reader through faults: {time.time() - started:.1f} s")
    assert batches(json.loads(got.stdout)) == batches(want) and want["batches"] > 0
    faults = [line for line in bed.log("store", "proxy").splitlines() if line.startswith("fault ")]
    assert faults, "the proxy injected nothing"


def test_a_worker_cut_off_from_the_store_but_not_the_coordinator_gives_its_task_back(bed, reference):
    """w1 reaches the coordinator but not the store: every request of its hangs (the
    proxy in front of it never answers), while it heartbeats. Its store requests give
    up after its retry budget (PROBEFLOW_STORE_RETRY_SECONDS, 5 s here), its task
    fails and goes to w2, and w1 takes no other task while it cannot reach the store
    (it probes the store first). The job ends on w2 in bounded time, with the same
    bytes. (Before: each attempt held its lease ~3 minutes, object_store's default
    retry budget, then w1 took the next task: a 5 s job took 6 minutes.) Prints how
    long w1 held its task."""
    inputs, want = reference
    stalled = bed.start_proxy(port=9002, log="stall-proxy", stall=1.0)
    started = time.time()
    coordinator = start_job(bed, inputs)
    start_worker(bed, "w1", env={**stalled, "PROBEFLOW_STORE_RETRY_SECONDS": "5"})
    wait_for(lambda: re.search(r"running.*map-", bed.log("w1", "worker")) is not None)
    leased_at = time.time()
    start_worker(bed, "w2")
    assert coordinator.wait(timeout=120) == 0, bed.log("coord", "coordinator")[-3000:]
    took = time.time() - started
    log = bed.log("coord", "coordinator")
    failed = [line for line in log.splitlines() if "task failed" in line and "w1" in line]
    held = re.search(r"^(\S+) .*task failed worker=w1", log, re.M)
    held_s = (datetime.datetime.fromisoformat(held.group(1).replace("Z", "+00:00")).timestamp() - leased_at
              if held else float("nan"))
    print(f"store cut off: w1 gave its task back {held_s:.1f} s after taking it (retry budget 5 s); "
          f"job done {took:.1f} s; w1's failed attempts: {len(failed)}")
    assert len(failed) == 1, "\n".join(failed) or log[-3000:]
    assert "store unreachable" in bed.log("w1", "worker"), bed.log("w1", "worker")[-3000:]
    assert took < 60, f"the job took {took:.0f} s"
    assert output_shards(bed) == want


def test_a_coordinator_cut_off_from_the_store_but_not_its_workers_stops_and_resumes(bed, reference):
    """The coordinator cannot reach the store for 8 s (iptables in its namespace) while
    its workers still reach it and the store: its journal writes give up after its retry
    budget (PROBEFLOW_STORE_RETRY_SECONDS, 2 s), well before its 60 s lock would expire.
    It stops, exit 1, naming the journal entry it could not write, and leaves its lock
    and journal; started again on its host once the store answers, it takes its dead
    predecessor's lock at once, resumes from the journal (the workers reconnect and
    offer what they finished meanwhile) and ends with local mode's bytes, only the
    output and the journal left."""
    inputs, want = reference
    budget = {"PROBEFLOW_STORE_RETRY_SECONDS": "2"}
    coordinator = start_job(bed, inputs, env=budget, map_rows=2000)
    for w in ("w1", "w2"):
        start_worker(bed, w, give_up=300)
    wait_for(lambda: bed.log("coord", "coordinator").count("journaled") >= 5, timeout=120)
    bed.cut_store("coord")
    try:
        rc = coordinator.wait(timeout=60)
    finally:
        time.sleep(max(0.0, 8 - 2))
        bed.heal_store("coord")
    log = bed.log("coord", "coordinator")
    assert rc == 1, log[-3000:]
    assert re.search(r"_job/journal/\S+\.json", log.splitlines()[-1]), log[-3000:]
    journaled = log.count(": journaled ")
    again = start_job(bed, inputs, env=budget, upload=False, map_rows=2000, log="coordinator-2")
    assert again.wait(timeout=300) == 0, bed.log("coord", "coordinator-2")[-3000:]
    log2 = bed.log("coord", "coordinator-2")
    assert "resum" in log2, log2[-3000:]
    print(f"coordinator cut from the store: stopped after {journaled} journaled results; "
          f"the second run adopted {log2.count('attempt adopted')} of its workers' attempts")
    assert output_shards(bed) == want


def test_a_worker_partition_healed_before_its_lease_expires_redoes_nothing(bed, reference):
    """w1's link is cut for 3 s, well within its 10 s lease, while it holds a task (its
    store requests are slowed to 300 ms, so the task outlasts the cut): TCP delivers
    the held-up heartbeats once the link is back, the lease never expires, w1's task is
    taken after the heal and no task runs twice. The same bytes."""
    inputs, want = reference
    slow = bed.start_proxy(delay_ms=300)
    coordinator, w1 = w1_holding_a_task(bed, inputs, lease=10, env=slow)
    leased = re.search(r"leased worker=w1 task=(\S+) attempt=1", bed.log("coord", "coordinator"))
    assert leased, bed.log("coord", "coordinator")[-2000:]
    bed.cut("w1")
    time.sleep(3)
    bed.heal("w1")
    healed = datetime.datetime.now(datetime.timezone.utc)
    start_worker(bed, "w2")
    assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
    log = bed.log("coord", "coordinator")
    assert "lease expired" not in log and "re-queued" not in log, log[-3000:]
    journaled = re.search(rf"^(\S+) .*journaled task={re.escape(leased.group(1))} attempt=1", log, re.M)
    assert journaled, log[-3000:]
    at = datetime.datetime.fromisoformat(journaled.group(1).replace("Z", "+00:00"))
    assert at > healed, f"w1's task was done before the cut ({at} <= {healed}): the test tested nothing"
    assert output_shards(bed) == want


def test_a_chaos_run_ends_with_the_local_bytes(tmp_path, reference):
    """A chaos run (chaos.py): 4 workers and a 3 s lease, a fault every ~2 s (worker
    killed, worker paused or cut off past its lease, coordinator killed and restarted)
    and store faults throughout, until the job finishes; the same bytes as local mode.
    Small map tasks (1 000 rows: 200 maps) and a store 100 ms away make the job last
    for at least one fault of each kind.
    A longer run: tests/bench/cluster_bed_chaos.py."""
    chaos = chaos_run(tmp_path, reference, timeout=600, every=2.0, seed=5, map_rows=1000)
    assert sum(chaos.counts.values()) >= 4, chaos.log


def chaos_run(tmp_path, reference, timeout: float, after=None, **options):
    """A chaos run (chaos.py) on a bed of 4 workers, 3 s lease and 4 s lock, with store
    faults throughout (100 ms, 2 % SlowDown, 1 % 500s, 1 % resets) and `options`
    (every, seed, map_rows, overlapping); checks the output is local mode's bytes and
    nothing else is left beside it, then calls `after(bed)` (more checks) before the
    bed closes; returns the run."""
    why = require_namespaces()
    if why:
        pytest.skip(why)
    from chaos import Chaos

    inputs, want = reference
    bed = Bed(tmp_path, workers=4)
    try:
        chaos = Chaos(bed, inputs, start_job, start_worker, lease=3, lock=4,
                      store_faults=dict(delay_ms=100, slowdown=0.02, error=0.01, reset=0.01), **options)
        chaos.run(timeout=timeout)
        assert output_shards(bed) == want
        if after is not None:
            after(bed)
        return chaos
    finally:
        bed.close()


def test_a_chaos_run_with_overlapping_faults_ends_with_the_local_bytes_and_only_the_journal(tmp_path, reference):
    """A chaos run whose faults overlap (chaos.py, overlapping=True): besides the four
    kinds, a worker cut off while the coordinator restarts, two workers killed at once,
    and the coordinator cut off from the store (not from its workers) past its lock; a
    fault every ~1 s (small map tasks: 400 rows) until the job finishes. The same bytes as local mode, and
    nothing left under _job/ but the journal and the event log. A longer run:
    tests/bench/cluster_bed_chaos.py --overlapping."""
    from chaos import OVERLAPPING

    def only_the_journal(bed: Bed) -> None:
        left = bed.store("list", f"s3://{BUCKET}/out/_job/").stdout.split()
        # The journal (tasks and coordinator epochs), the event log and, if a worker was
        # excluded, its record for `coordinator status`.
        stray = [k for k in left if "/_job/journal/" not in k and "/_job/events/" not in k
                 and not k.endswith("/_job/excluded-workers.json")]
        assert left and not stray, stray[:20]

    chaos = chaos_run(tmp_path, reference, timeout=900, every=1.0, seed=11, map_rows=400, overlapping=True,
                      after=only_the_journal)
    assert sum(chaos.counts.values()) >= 5, chaos.log
    assert any(chaos.counts.get(k) for k in OVERLAPPING), chaos.counts


def start_overlap_job(bed: Bed, inputs: Path, eval_files: list[Path], through: dict,
                      extra: str = "") -> tuple[subprocess.Popen, list[str]]:
    """Uploads the overlap corpus under `inputs` (``eval/``, ``train/``) to the store and
    starts the n-gram overlap job (cluster mode, lease 4 s, `extra` sections appended) on
    the coordinator's host, its store requests `through` the proxy; returns the
    coordinator and the eval files' URLs. Its output is ``s3://BUCKET/ov-out``."""
    from support.overlap import overlap_job

    bed.store("mkbucket", BUCKET)
    bed.store("upload", str(inputs), f"s3://{BUCKET}/ov")
    eval_urls = [f"s3://{BUCKET}/ov/eval/{p.name}" for p in eval_files]
    coord = bed.hosts["coord"]
    spec = overlap_job(coord.home / "overlap.toml", eval_urls, [f"s3://{BUCKET}/ov/train/*"],
                       f"s3://{BUCKET}/ov-out", mode="cluster", lease=4, extra=extra)
    spec.write_text(spec.read_text().replace(
        'listen = "127.0.0.1:0"',
        f'listen = "{coord.address}:{COORDINATOR_PORT}"\nallow_plaintext = true'))
    env = {"PROBEFLOW_COOKIE": COOKIE, "NO_COLOR": "1",
           "RUST_LOG": "info,probeflow_engine::coordinator=debug,ractor_cluster=warn", **through}
    return bed.spawn("coord", [str(COORDINATOR), "run", str(spec)], log="coordinator", env=env), eval_urls


@on_stores
def test_the_overlap_job_on_separate_hosts_through_a_faulty_store_with_a_worker_cut_off(bed, tmp_path):
    """The n-gram overlap job in cluster mode on the bed: eval and training files and
    the output only on the store, every store request through the fault proxy (50 ms,
    SlowDown, 500s, resets), and w1 cut off while it holds a task, past its lease. Its
    task is done by w2, w1's late result fenced, and the outputs (read back from the
    store) are the plain-Python reference's."""
    from support.overlap import check_against_reference, make_corpus

    eval_files, train_files = make_corpus(tmp_path / "in")
    through = bed.start_proxy(delay_ms=50, slowdown=0.1, error=0.02, reset=0.02, seed=13)
    coordinator, eval_urls = start_overlap_job(bed, tmp_path / "in", eval_files, through)
    start_worker(bed, "w1", env=through)
    wait_for(lambda: re.search(r"running.*(index|scan)-", bed.log("w1", "worker")) is not None)
    bed.cut("w1")
    cut_at = time.time()
    start_worker(bed, "w2", env=through)
    detect = wait_for(lambda: "lease expired" in bed.log("coord", "coordinator"), timeout=120)
    time.sleep(4)
    bed.heal("w1")
    assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
    print(f"overlap job: w1's lease expiry seen {detect:.1f} s after the cut (lease 4 s); "
          f"done {time.time() - cut_at:.1f} s after it")
    assert re.search(r"lease expired.*w1|w1.*lease expired", bed.log("coord", "coordinator"))
    got = bed.hosts["store"].home / "ov-out"
    bed.store("download", f"s3://{BUCKET}/ov-out", str(got))
    files = ([(u, p) for u, p in zip(eval_urls, eval_files)],
             [(f"s3://{BUCKET}/ov/train/{p.name}", p) for p in train_files])
    check_against_reference(got, *files)
    work = [str(p.relative_to(got)) for p in got.rglob("*") if p.is_file() and "_job/overlap" in str(p)]
    assert not work, f"intermediate files left on the store: {work[:5]}"


def test_a_store_that_ignores_conditional_writes_is_refused_at_start(bed, reference):
    """The store (through the proxy) drops the If-None-Match and If-Match headers of
    every PUT, as a store without conditional writes ignores them: two coordinators
    could both take the output lock. The coordinator finds that out before it writes
    anything of the job's and refuses, exit 2, naming the feature; nothing is left
    under the output."""
    inputs, _ = reference
    through = bed.start_proxy(ignore_conditions=True)
    coordinator = start_job(bed, inputs, env=through)
    assert coordinator.wait(timeout=120) == 2, bed.log("coord", "coordinator")[-3000:]
    log = bed.log("coord", "coordinator")
    assert "conditional writes" in log and "If-None-Match" in log, log[-3000:]
    assert bed.store("list", f"s3://{BUCKET}/out").stdout.split() == []


@on_stores
def test_lock_requests_that_fail_or_lose_their_answers_do_not_stop_the_coordinator(bed, reference):
    """Every request on the output lock (`_job/lock.json`: taking it, renewing it every
    2 s with a 6 s lock, in a job of 100 small maps against a store 100 ms away) has
    a 1 in 4 chance of a reset before it reaches the store
    and 1 in 4 of its answer being lost after the store applied it (the coordinator
    cannot know whether its write happened). Transient errors are retried, and a lock
    found holding this coordinator's own record is its own: the job finishes, the same
    bytes. (Before: the first reset taking the lock exited 1; a renewal whose answer was
    lost made the next one fail its precondition and the coordinator stopped, "lost the
    output lock; it is now held by" itself.)"""
    inputs, want = reference
    through = bed.start_proxy(delay_ms=100, reset=0.25, lose_answer=0.25, only=r"lock\.json", seed=17)
    coordinator = start_job(bed, inputs, env=through, lock=6, map_rows=2000)
    for w in ("w1", "w2"):
        start_worker(bed, w, env=through)
    assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
    faults = [line for line in bed.log("store", "proxy").splitlines() if line.startswith("fault ")]
    kinds = {line.split()[1] for line in faults}
    print(f"lock faults: {len(faults)} ({', '.join(sorted(kinds))})")
    assert {"reset", "lose-answer"} <= kinds, faults
    assert output_shards(bed) == want


def test_cleaning_on_separate_hosts_through_a_faulty_store_gives_the_local_bytes(bed, tmp_path):
    """The overlap job with `[clean] cut` in cluster mode on the bed, every store request
    through the fault proxy (50 ms, SlowDown, 500s, resets, and answers lost after the
    store applied a write), and w1 cut off past its lease while it cleans a file. The
    cleaned files and the manifest, read back from the store, are the same job's on
    local files in local mode, byte for byte (the manifest's training paths aside)."""
    from support.overlap import CUT, make_corpus, overlap_job, read_jsonl_gz

    eval_files, train_files = make_corpus(tmp_path / "in")
    local = tmp_path / "local-out"
    run(["run", str(overlap_job(tmp_path / "local.toml", eval_files, [tmp_path / "in" / "train"], local,
                                extra=CUT))])
    through = bed.start_proxy(delay_ms=50, slowdown=0.1, error=0.02, reset=0.02, lose_answer=0.02, seed=29)
    coordinator, _ = start_overlap_job(bed, tmp_path / "in", eval_files, through, extra=CUT)
    start_worker(bed, "w1", env=through)
    wait_for(lambda: re.search(r"running.*clean-", bed.log("w1", "worker")) is not None, timeout=300)
    bed.cut("w1")
    cut_at = time.time()
    start_worker(bed, "w2", env=through)
    detect = wait_for(lambda: "lease expired" in bed.log("coord", "coordinator"), timeout=120)
    bed.heal("w1")
    assert coordinator.wait(timeout=300) == 0, bed.log("coord", "coordinator")[-3000:]
    print(f"cleaning: w1's lease expiry seen {detect:.1f} s after the cut (lease 4 s); "
          f"done {time.time() - cut_at:.1f} s after it")
    assert re.search(r"lease expired.*w1|w1.*lease expired", bed.log("coord", "coordinator"))
    faults = [line.split()[1] for line in bed.log("store", "proxy").splitlines() if line.startswith("fault ")]
    print(f"cleaning through the proxy: faults {dict(Counter(faults))}")
    assert {"slowdown", "lose-answer"} <= set(faults), faults
    got = bed.hosts["store"].home / "ov-out"
    bed.store("download", f"s3://{BUCKET}/ov-out", str(got))
    names = sorted(str(p.relative_to(local)) for p in (local / "cleaned").rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(got)) for p in (got / "cleaned").rglob("*") if p.is_file())
    assert len(names) == len(train_files)
    for name in names:
        assert (got / name).read_bytes() == (local / name).read_bytes(), name

    def manifest(out: Path, prefix: str) -> list[dict]:
        records = read_jsonl_gz(out / "stats" / "clean_manifest.jsonl.gz")
        for r in records:
            assert r["train_path"].startswith(prefix), r["train_path"]
            r["train_path"] = r["train_path"][len(prefix):]
        return records

    want = manifest(local, str(tmp_path / "in" / "train") + "/")
    assert want and {r["action"] for r in want} >= {"cut", "dropped"}
    assert manifest(got, f"s3://{BUCKET}/ov/train/") == want
