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


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1; yields (boto3 client, environment for the job)."""
    moto = Moto("127.0.0.1", tmp_path_factory.mktemp("moto"), BUCKET)
    yield moto.client, dict(os.environ, **moto.settings)
    moto.stop()

