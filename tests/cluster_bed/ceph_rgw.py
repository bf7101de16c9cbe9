"""A real S3 server for the bed's store host: Ceph's RADOS Gateway (radosgw), the S3
implementation behind many production object stores, from Debian's packages
(`ceph-mon`, `ceph-osd`, `radosgw`; tests/run installs them).

A one-host Ceph cluster, made from nothing in the store host's home on each start:

    ceph-mon  (mon.a, <store>:3300, msgr2)   the cluster map
    ceph-osd  (osd.0, memstore)              the objects, in memory (size 1, no replicas)
    radosgw   (beast, <store>:STORE_PORT)    S3, with the bed's credentials as a user

Authentication inside the cluster is off (one host, loopback-like links); S3 requests
are signed with the bed's credentials (SigV4) as on any S3 store. Every daemon runs in
the foreground under :meth:`bed.Bed.spawn`, so :meth:`bed.Bed.close` ends them with the
bed; the admin sockets live in a short directory of their own (a Unix socket path has
at most 107 bytes), removed by :meth:`CephRgw.close`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

MON_PORT = 3300
#: What the store host needs on PATH.
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool", "ceph-authtool")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


class CephRgw:
    def __init__(self, bed, port: int, access_key: str, secret_key: str) -> None:
        self.bed = bed
        self.port = port
        self.access_key = access_key
        self.secret_key = secret_key
        self.host = bed.hosts["store"]
        self.dir = self.host.home / "ceph"
        self.sockets = Path(tempfile.mkdtemp(prefix="pfceph-"))
        self.conf = self.dir / "ceph.conf"

    def config(self, fsid: str) -> str:
        a, d, s = self.host.address, self.dir, self.sockets
        return f"""[global]
fsid = {fsid}
mon host = v2:{a}:{MON_PORT}
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
        return self.bed.run("store", ["ceph", "-c", str(self.conf), *args], timeout=timeout).stdout

    def start(self) -> None:
        """Makes the cluster and starts its daemons; returns once S3 answers."""
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
        subprocess.run(["monmaptool", "--create", "--add", "a", f"v2:{self.host.address}:{MON_PORT}",
                        "--fsid", fsid, monmap], check=True, capture_output=True)
        self.bed.run("store", ["ceph-mon", "-c", c, "--mkfs", "-i", "a", "--monmap", monmap,
                               "--keyring", str(self.dir / "keyring")])
        self.bed.spawn("store", ["ceph-mon", "-f", "-c", c, "-i", "a"], log="ceph-mon")
        osd = self.ceph("osd", "create").strip()
        assert osd == "0", osd
        self.bed.run("store", ["ceph-osd", "-c", c, "-i", "0", "--mkfs"])
        self.ceph("osd", "crush", "add", "osd.0", "1.0", "host=store", "root=default")
        self.bed.spawn("store", ["ceph-osd", "-f", "-c", c, "-i", "0"], log="ceph-osd")
        deadline = time.time() + 60
        while "1 up" not in self.ceph("osd", "stat"):
            if time.time() > deadline:
                raise RuntimeError(f"osd.0 never came up: {self.log('osd.0')}")
            time.sleep(0.3)
        self.bed.spawn("store", ["radosgw", "-f", "-c", c, "-n", "client.rgw"], log="radosgw")
        # The user exists once radosgw has made its pools; until then radosgw-admin waits.
        self.bed.run("store", ["radosgw-admin", "-c", c, "-n", "client.rgw", "user", "create",
                               "--uid=probeflow", "--display-name=probeflow",
                               f"--access-key={self.access_key}", f"--secret={self.secret_key}"],
                     timeout=120)

    def log(self, name: str) -> str:
        path = self.dir / "log" / f"{name}.log"
        return path.read_text()[-3000:] if path.exists() else f"(no {path})"

    def version(self) -> str:
        return subprocess.run(["radosgw", "--version"], capture_output=True, text=True).stdout.strip()

    def close(self) -> None:
        shutil.rmtree(self.sockets, ignore_errors=True)

