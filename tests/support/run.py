"""The binaries the end-to-end tests run (built by tests/run), and running them."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
COORDINATOR = Path(os.environ.get("PROBEFLOW_COORDINATOR", TARGET / "debug" / "coordinator"))
WORKER = Path(os.environ.get("PROBEFLOW_WORKER", TARGET / "debug" / "worker"))
#: The cluster tests' cookie (a worker joins only with the coordinator's).
COOKIE = "5f0c2a7be1d94c3e8a6b0d2f4c1e9a77"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for servers the tests start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, check=True, **kw):
    proc = subprocess.run([str(COORDINATOR), *args], capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"coordinator {args} failed ({proc.returncode}):\n{proc.stderr}")
    return proc
