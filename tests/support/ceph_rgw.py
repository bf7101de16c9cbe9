"""A real S3 server for the bed's store host: Ceph's RADOS Gateway (radosgw), the S3
implementation behind many production object stores, from Debian's packages
(`ceph-mon`, `ceph-osd`, `radosgw`; tests/run installs them).

A one-host Ceph cluster, made from nothing in the store host's home on each start:

    ceph-mon  (mon.a, <store>:3300, msgr2)   the cluster map
    ceph-osd  (osd.0, memstore)              the objects, in memory (size 1, no replicas)
    radosgw   (beast, <store>:STORE_PORT)    S3, with the bed's credentials as a user

Authentication inside the cluster is off (one host, loopback-like links); S3 requests
are signed with the bed's credentials (SigV4) as on any S3 store. Every daemon runs in
the foreground (on the bed, under :meth:`bed.Bed.spawn`, so :meth:`bed.Bed.close` ends
them with the bed; on this machine, under tests/support/s3.py's fixture); the admin sockets live in a short directory of their own (a Unix socket path has
at most 107 bytes), removed by :meth:`CephRgw.close`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

MON_PORT = 3300
#: What the store host needs on PATH.
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool", "ceph-authtool")


def require_binaries() -> None:
    """Fails naming what is missing (or skips the test, where PROBEFLOW_NO_CEPH=1)."""
    gone = [b for b in BINARIES if shutil.which(b) is None]
    if not gone:
        return
    why = (f"the real S3 server's tests need {', '.join(gone)}: apt-get install ceph-mon ceph-osd "
           "radosgw (tests/run does, as root)")
    if os.environ.get("PROBEFLOW_NO_CEPH") == "1":
        import pytest  # noqa: PLC0415

        pytest.skip(why)
    raise RuntimeError(why + "; PROBEFLOW_NO_CEPH=1 skips them")


class CephRgw:
    """A one-host Ceph cluster with radosgw on `address:port`, its files under `home`.
    `run(argv, timeout)` runs a command to its end and `spawn(argv, log)` starts a
    daemon on the host that owns `address` (the bed's store host, or this machine);
    the caller ends the daemons it spawned."""

    def __init__(self, address: str, port: int, home: Path, access_key: str, secret_key: str,
                 run: Callable[[list[str], float], subprocess.CompletedProcess],
                 spawn: Callable[[list[str], str], subprocess.Popen], mon_port: int = MON_PORT) -> None:
        self.address = address
        self.port = port
        self.mon_port = mon_port
        self.access_key = access_key
        self.secret_key = secret_key
        self.run = run
        self.spawn = spawn
        self.dir = home / "ceph"
        self.sockets = Path(tempfile.mkdtemp(prefix="pfceph-"))
        self.conf = self.dir / "ceph.conf"

    def config(self, fsid: str) -> str:
        a, d, s = self.address, self.dir, self.sockets
        return f"""[global]
fsid = {fsid}
mon host = v2:{a}:{self.mon_port}
mon initial members = a
public addr = {a}
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms bind ipv6 = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = 4294967296
admin socket = {s}/$name.asok
run dir = {s}
pid file = {s}/$name.pid
log file = {d}/log/$name.log
keyring = {d}/keyring
[mon]
mon data = {d}/mon.$id
[osd]
osd data = {d}/osd.$id
[client.rgw]
rgw frontends = beast endpoint={a}:{self.port}
rgw data = {d}/rgw
"""

    def ceph(self, *args: str, timeout: float = 60) -> str:
        return self.run(["ceph", "-c", str(self.conf), *args], timeout).stdout

    def start(self) -> None:
        """Makes the cluster and starts its daemons; returns once the S3 user exists."""
        require_binaries()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        for sub in ("log", "rgw", "mon.a", "osd.0"):
            (self.dir / sub).mkdir(parents=True)
        fsid = str(uuid.uuid4())
        self.conf.write_text(self.config(fsid))
        c = str(self.conf)
        subprocess.run(["ceph-authtool", "--create-keyring", str(self.dir / "keyring"), "--gen-key",
                        "-n", "mon.", "--cap", "mon", "allow *"], check=True, capture_output=True)
        monmap = str(self.dir / "monmap")
        subprocess.run(["monmaptool", "--create", "--add", "a", f"v2:{self.address}:{self.mon_port}",
                        "--fsid", fsid, monmap], check=True, capture_output=True)
        self.run(["ceph-mon", "-c", c, "--mkfs", "-i", "a", "--monmap", monmap,
                  "--keyring", str(self.dir / "keyring")], 60)
        self.spawn(["ceph-mon", "-f", "-c", c, "-i", "a"], "ceph-mon")
        osd = self.ceph("osd", "create").strip()
        assert osd == "0", osd
        self.run(["ceph-osd", "-c", c, "-i", "0", "--mkfs"], 60)
        self.ceph("osd", "crush", "add", "osd.0", "1.0", "host=store", "root=default")
        self.spawn(["ceph-osd", "-f", "-c", c, "-i", "0"], "ceph-osd")
        deadline = time.time() + 60
        while "1 up" not in self.ceph("osd", "stat"):
            if time.time() > deadline:
                raise RuntimeError(f"osd.0 never came up: {self.log('osd.0')}")
            time.sleep(0.3)
        self.spawn(["radosgw", "-f", "-c", c, "-n", "client.rgw"], "radosgw")
        # radosgw-admin waits until radosgw has made its pools.
        self.run(["radosgw-admin", "-c", c, "-n", "client.rgw", "user", "create",
                  "--uid=probeflow", "--display-name=probeflow",
                  f"--access-key={self.access_key}", f"--secret={self.secret_key}"], 120)

    def log(self, name: str) -> str:
        path = self.dir / "log" / f"{name}.log"
        return path.read_text()[-3000:] if path.exists() else f"(no {path})"

    def close(self) -> None:
        shutil.rmtree(self.sockets, ignore_errors=True)
