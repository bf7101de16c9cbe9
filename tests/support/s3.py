"""A real S3 API for the tests: moto's server on loopback, one module-scoped fixture."""

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


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1; yields (boto3 client, environment for the job)."""
    import boto3  # noqa: PLC0415  (not in the MaxText test's environment, which has no S3 test)
    moto = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")
    server = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    env = dict(
        os.environ,
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ALLOW_HTTP="true",
        AWS_ACCESS_KEY_ID="probeflow",
        AWS_SECRET_ACCESS_KEY="probeflow-secret",
        AWS_REGION="us-east-1",
    )
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )
    deadline = time.time() + 30
    while True:
        try:
            client.list_buckets()
            break
        except Exception:  # noqa: BLE001  (not up yet)
            if time.time() > deadline or server.poll() is not None:
                server.kill()
                raise
            time.sleep(0.2)
    client.create_bucket(Bucket=BUCKET)
    yield client, env
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=10)
    log.close()
