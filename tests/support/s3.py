"""S3 servers on loopback for the tests: the `s3` fixture gives each test module moto's
server and then Ceph's RADOS Gateway (a real S3 implementation, support/ceph_rgw.py):
every test that asks for `s3` runs against both."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.run import free_port


BUCKET = "probeflow-e2e"


#: The S3 settings of a job against the test server (its endpoint added by `start_moto`).
CREDENTIALS = dict(
    AWS_ALLOW_HTTP="true",
    AWS_ACCESS_KEY_ID="probeflow",
    AWS_SECRET_ACCESS_KEY="probeflow-secret",
    AWS_REGION="us-east-1",
)


class Moto:
    """A moto S3 server on `host` (an address of this machine), with `bucket` made."""

    def __init__(self, host: str, log_dir: Path, bucket: str):
        import boto3  # noqa: PLC0415  (not in the MaxText test's environment, which has no S3 test)
        moto = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        port = free_port()
        self.log = open(log_dir / "moto.log", "w")
        self.server = subprocess.Popen([moto, "-H", host, "-p", str(port)], stdout=self.log, stderr=self.log)
        #: The job's S3 settings.
        self.settings = dict(CREDENTIALS, AWS_ENDPOINT_URL=f"http://{host}:{port}")
        self.client = boto3.client(
            "s3",
            endpoint_url=self.settings["AWS_ENDPOINT_URL"],
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_REGION"],
        )
        deadline = time.time() + 30
        while True:
            try:
                self.client.list_buckets()
                break
            except Exception:  # noqa: BLE001  (not up yet)
                if time.time() > deadline or self.server.poll() is not None:
                    self.server.kill()
                    raise
                time.sleep(0.2)
        self.client.create_bucket(Bucket=bucket)

    def stop(self) -> None:
        self.server.send_signal(signal.SIGTERM)
        self.server.wait(timeout=10)
        self.log.close()


class LocalRgw:
    """Ceph's radosgw on 127.0.0.1 (a one-host cluster, support/ceph_rgw.py), for the
    whole session: its start takes ~15 s."""

    def __init__(self, home: Path):
        from support.ceph_rgw import CephRgw  # noqa: PLC0415

        self.procs: list[subprocess.Popen] = []
        self.home = home
        port = free_port()
        self.rgw = CephRgw("127.0.0.1", port, home, CREDENTIALS["AWS_ACCESS_KEY_ID"],
                           CREDENTIALS["AWS_SECRET_ACCESS_KEY"], run=self.run, spawn=self.spawn,
                           mon_port=free_port())
        try:
            self.rgw.start()
        except BaseException:
            self.stop()
            raise
        self.settings = dict(CREDENTIALS, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")

    def run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc

    def spawn(self, argv: list[str], log: str) -> subprocess.Popen:
        out = open(self.home / f"{log}.log", "w")
        proc = subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        self.rgw.close()


def client_for(settings: dict):
    import boto3  # noqa: PLC0415

    return boto3.client(
        "s3",
        endpoint_url=settings["AWS_ENDPOINT_URL"],
        aws_access_key_id=settings["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=settings["AWS_SECRET_ACCESS_KEY"],
        region_name=settings["AWS_REGION"],
    )


@pytest.fixture(scope="session")
def rgw_server(tmp_path_factory):
    """One radosgw for the session, started when a test first asks."""
    server = LocalRgw(tmp_path_factory.mktemp("rgw"))
    yield server
    server.stop()


#: The S3 servers every `s3` test runs against.
S3_SERVERS = ("moto", "ceph")


@pytest.fixture(scope="module", params=S3_SERVERS)
def s3(request, tmp_path_factory):
    """An S3 server on 127.0.0.1 with BUCKET made (and empty): moto's, then radosgw;
    yields (boto3 client, environment for the job)."""
    if request.param == "moto":
        moto = Moto("127.0.0.1", tmp_path_factory.mktemp("moto"), BUCKET)
        yield moto.client, dict(os.environ, **moto.settings)
        moto.stop()
        return
    rgw = request.getfixturevalue("rgw_server")
    client = client_for(rgw.settings)
    # The server outlives the module: its bucket starts empty for each.
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    empty_bucket(client)
    yield client, dict(os.environ, **rgw.settings)
    empty_bucket(client)


def empty_bucket(client) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})

