"""The container image, as a Kubernetes user runs it: a coordinator container and two
worker containers on a container network of their own, mutual TLS between them, input
and output on the S3 test server (moto, on the network's gateway address), the job file
from a mounted file as `infra/k8s/probeflow.yaml` mounts it. The output is
byte-identical to local mode's; then the same with a worker container killed mid-job.

`tests/run` builds the image (`release/image --binaries`, from the test builds) and names
it in PROBEFLOW_IMAGE; it needs root and podman (it installs Debian's podman, runc and
mmdebstrap).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from support.cluster import MAKE_CERTS
from support.probe_rows import write_job
from support.run import COOKIE, run
from support.s3 import Moto

IMAGE = os.environ.get("PROBEFLOW_IMAGE")

pytestmark = pytest.mark.skipif(
    not IMAGE, reason="tests/run sets PROBEFLOW_IMAGE (release/image builds it)")

BUCKET = "probeflow-image"
SHARDS = 4


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {args[:3]} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


class Bed:
    """A container network (10.89.N.0/24) with the S3 test server on its gateway."""

    def __init__(self, root: Path):
        """Made whole or not at all: what was made is removed if a step fails."""
        self.root = root
        self.net = f"pf-image-{os.getpid()}"
        third = random.Random(os.getpid()).randint(100, 250)
        self.prefix = f"10.89.{third}"
        self.gateway = f"{self.prefix}.1"
        self.containers: list[str] = []
        self.moto: Moto | None = None
        podman("network", "create", "--subnet", f"{self.prefix}.0/24", self.net)
        try:
            self._populate()
        except BaseException:
            self.close()
            raise

    def _populate(self) -> None:
        # The network's bridge exists once a container is on it: the S3 server binds there.
        self.start("anchor", 2, "sleep", "infinity")
        self.moto = Moto(self.gateway, self.root, BUCKET)
        self.s3 = self.moto.client
        self.certs = self.root / "certs"
        subprocess.run([str(MAKE_CERTS), str(self.certs), "--host", self.ip(10), "--workers", "2"],
                       check=True, capture_output=True)
        for f in self.certs.iterdir():
            f.chmod(0o644)  # read by the containers' user (uid 10001)

    def ip(self, host: int) -> str:
        return f"{self.prefix}.{host}"

    def start(self, name: str, host: int, *command: str, mounts: tuple[str, ...] = ()) -> str:
        """Container `name` at address `host`, with the cookie and (once the S3 server
        is up) the job's S3 settings."""
        full = f"{self.net}-{name}"
        settings = {"PROBEFLOW_COOKIE": COOKIE, **(self.moto.settings if self.moto else {})}
        env = [a for k, v in settings.items() for a in ("-e", f"{k}={v}")]
        volumes = [a for m in mounts for a in ("-v", m)]
        podman("run", "-d", "--name", full, "--network", self.net, "--ip", self.ip(host), *env,
               *volumes, IMAGE, *command)
        self.containers.append(full)
        return full

    def close(self) -> None:
        for c in reversed(self.containers):
            podman("rm", "-f", "-t", "0", c, check=False)
        podman("network", "rm", "-f", self.net, check=False)
        if self.moto:
            self.moto.stop()


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    root = tmp_path_factory.mktemp("image")
    b = Bed(root)
    try:
        # The input: generated here, uploaded to the store; local mode's output of the
        # same files is the reference.
        inp = root / "input"
        run(["generate", "--rows", "120000", "--out", str(inp), "--seed", "23"])
        for f in sorted(inp.glob("*.parquet")):
            b.s3.upload_file(str(f), BUCKET, f"input/{f.name}")
        local = root / "out-local"
        run(["run", str(job_file(root / "local.toml", f"{inp}/*.parquet", local, "local"))])
        b.local = local
        yield b
    finally:
        b.close()


def job_file(path: Path, input_url: str, output_url, mode: str) -> Path:
    return write_job(path, {
        "input": {"url": input_url, "rows_per_map_task": 10000},
        "output": {"url": output_url, "shards": SHARDS, "max_row_bytes": 65536},
        "split": {"test_fraction": 0.25, "seed": 17},
        "run": {"mode": mode, "workers": 2, "listen": "0.0.0.0:7077", "memory_per_worker": "256MiB",
                "scratch": "/tmp/probeflow-scratch" if mode == "cluster" else path.parent / "scratch",
                "lease_seconds": 4},
        "run.tls": None if mode == "local" else {
            "cert": "/var/run/probeflow-tls/coordinator.pem",
            "key": "/var/run/probeflow-tls/coordinator.key",
            "ca": "/var/run/probeflow-tls/ca.pem",
        },
    })


def start_cluster(bed: Bed, name: str) -> tuple[str, list[str]]:
    """The job into s3://BUCKET/<name>: the coordinator container (the job file mounted
    read-only at /etc/probeflow, as the k8s manifest does) and two worker containers."""
    jobs = bed.root / f"job-{name}"
    jobs.mkdir()
    job_file(jobs / "preprocess.toml", f"s3://{BUCKET}/input/*.parquet", f"s3://{BUCKET}/{name}", "cluster")
    tls = f"{bed.certs}:/var/run/probeflow-tls:ro"
    coordinator = bed.start(f"{name}-coordinator", 10, "coordinator", "run", "/etc/probeflow/preprocess.toml",
                            mounts=(f"{jobs}:/etc/probeflow:ro", tls))
    workers = []
    for i in (1, 2):
        workers.append(bed.start(
            f"{name}-w{i}", 10 + i, "worker", "--join", f"{bed.ip(10)}:7077", "--name", f"w{i}",
            "--threads", "1", "--memory", "256MiB", "--scratch", "/tmp/probeflow-scratch",
            "--tls-cert", f"/var/run/probeflow-tls/worker-{i}.pem",
            "--tls-key", f"/var/run/probeflow-tls/worker-{i}.key",
            "--tls-ca", "/var/run/probeflow-tls/ca.pem", mounts=(tls,)))
    return coordinator, workers


def wait_exit(container: str, timeout: float = 300) -> int:
    done = subprocess.run(["podman", "wait", container], capture_output=True, text=True, timeout=timeout)
    return int(done.stdout.strip().splitlines()[-1])


def logs(container: str) -> str:
    done = podman("logs", container, check=False)
    return done.stdout + done.stderr


def assert_local_bytes(bed: Bed, name: str) -> None:
    manifest = json.loads((bed.local / "manifest.json").read_text())
    remote = json.loads(bed.s3.get_object(Bucket=BUCKET, Key=f"{name}/manifest.json")["Body"].read())
    assert [(s["path"], s["blake3"]) for s in remote["shards"]] == [
        (s["path"], s["blake3"]) for s in manifest["shards"]]
    for s in manifest["shards"]:
        body = bed.s3.get_object(Bucket=BUCKET, Key=f"{name}/{s['path']}")["Body"].read()
        assert body == (bed.local / s["path"]).read_bytes(), s["path"]
    record = json.loads(bed.s3.get_object(Bucket=BUCKET, Key=f"{name}/_SUCCESS")["Body"].read())
    assert record["kind"] == "probe_rows" and record["release"], record


def test_the_image_runs_as_its_user_under_tini():
    done = podman("run", "--rm", IMAGE, "sh", "-c", "id -u; cat /proc/1/comm; coordinator --version; "
                  "worker --version; test -s /etc/ssl/certs/ca-certificates.crt && echo certs")
    lines = done.stdout.split()
    assert lines[0] == "10001" and lines[1] == "tini" and "certs" in lines, done.stdout
    version = IMAGE.rsplit(":", 1)[1]
    assert f"coordinator {version}" in done.stdout and f"worker {version}" in done.stdout
    labels = json.loads(podman("image", "inspect", IMAGE).stdout)[0]["Labels"]
    assert labels["org.opencontainers.image.version"] == version


def test_a_cluster_of_containers_gives_local_modes_bytes(bed):
    coordinator, workers = start_cluster(bed, "cluster")
    code = wait_exit(coordinator)
    assert code == 0, logs(coordinator)[-4000:]
    assert "done." in logs(coordinator)
    for w in workers:
        assert wait_exit(w, timeout=120) == 0, logs(w)[-3000:]
    assert_local_bytes(bed, "cluster")


def test_a_worker_container_killed_mid_job_gives_the_same_bytes(bed):
    coordinator, workers = start_cluster(bed, "killed")
    deadline = time.time() + 180
    while True:  # a map result journaled: the job is under way
        listed = bed.s3.list_objects_v2(Bucket=BUCKET, Prefix="killed/_job/journal/").get("Contents", [])
        if any("map-" in o["Key"] for o in listed):
            break
        assert time.time() < deadline, logs(coordinator)[-3000:]
        time.sleep(0.1)
    podman("kill", workers[0])
    finished = bed.s3.list_objects_v2(Bucket=BUCKET, Prefix="killed/_SUCCESS").get("KeyCount", 0)
    assert not finished, "the job finished before the worker was killed"
    assert wait_exit(workers[0]) == 137
    code = wait_exit(coordinator)
    log = logs(coordinator)
    assert code == 0, log[-4000:]
    assert_local_bytes(bed, "killed")
    # The killed worker's loss was seen, and the job went on with the other one. Whether
    # it held a lease when the kill landed is chance (it may be between a report and its
    # next task): a lease it held was re-queued, and no other.
    assert "worker left worker=w1" in log, log[-4000:]
    requeued = [line for line in log.splitlines() if "re-queued" in line]
    assert all("worker=w1" in line and ("lost" in line or "expired" in line) for line in requeued), requeued
    print(log[-3000:])
