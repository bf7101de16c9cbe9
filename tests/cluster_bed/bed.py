"""A multi-host test bed on one machine: each host a Linux network namespace of its own,
all joined by veth links to a bridge that lives in a namespace of its own too.

    store  (10.R.S.2)  an S3 server: the only place input and output live; moto's
                       by default, or Ceph's RADOS Gateway (`store_server="ceph"`,
                       support/ceph_rgw.py), a real S3 implementation
    coord  (10.R.S.3)  the coordinator
    w1..wN (10.R.S.10+) the workers, each with a private scratch directory

The test process has no link to any of them: it runs commands *in* a host
(:meth:`Bed.run`, :meth:`Bed.spawn`), and reaches the store through a host
(`store_client.py`). Faults are made on the links: :meth:`Bed.cut` takes a host's link
down at the bridge (its packets vanish, its TCP connections hang until they time out,
as in a real partition), :meth:`Bed.heal` brings it back. Nothing outside the bed's own
namespaces is touched: the veth pairs are created inside them, so no interface ever
appears in the machine's own namespace. :meth:`Bed.close` (also on a failed test, from
the fixture) kills every process the bed started and deletes its namespaces.

Needs root (`ip netns`, `unshare`). Where namespaces cannot be made, :func:`require_namespaces`
fails with the reason, unless PROBEFLOW_NO_NETNS=1 says to skip (for machines without
root; CI runs as root and does not set it).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
STORE_CLIENT = HERE / "store_client.py"
FAULT_PROXY = HERE / "fault_proxy.py"
STORE_PORT = 9000
PROXY_PORT = 9001
CREDENTIALS = {
    "AWS_ALLOW_HTTP": "true",
    "AWS_ACCESS_KEY_ID": "probeflow",
    "AWS_SECRET_ACCESS_KEY": "probeflow-secret",
    "AWS_REGION": "us-east-1",
}


def ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def require_namespaces() -> str | None:
    """None where the bed can run; else why not (a skip reason when PROBEFLOW_NO_NETNS=1).
    Raises with the reason otherwise."""
    name = f"pfcheck{secrets.token_hex(3)}"
    try:
        ip("netns", "add", name)
        ip("netns", "del", name)
        return None
    except (RuntimeError, FileNotFoundError) as e:
        why = f"the cluster bed needs network namespaces (root, iproute2): {e}"
        if os.environ.get("PROBEFLOW_NO_NETNS") == "1":
            return why
        raise RuntimeError(why + " (set PROBEFLOW_NO_NETNS=1 to skip on a machine without root)") from e


@dataclass
class Host:
    name: str
    netns: str
    address: str
    #: At the bridge: the end of this host's link that :meth:`Bed.cut` takes down.
    port: str
    #: This host's own directory (scratch, logs); no other host uses it.
    home: Path


@dataclass
class Bed:
    root: Path
    workers: int
    #: More hosts (besides store, coord and the workers), e.g. a second coordinator's.
    extra: tuple[str, ...] = ()
    #: The store host's S3 server: "moto" or "ceph" (radosgw).
    store_server: str = "moto"
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        # 10.<200..249>.<0..255>.0/24 from the tag, so two beds on a machine differ.
        n = int(self.tag, 16)
        self.subnet = f"10.{200 + n % 50}.{(n // 50) % 256}"
        self.switch = f"pf{self.tag}sw"
        self.env = dict(CREDENTIALS, AWS_ENDPOINT_URL=f"http://{self.subnet}.2:{STORE_PORT}")
        try:
            ip("netns", "add", self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
            names = ["store", "coord"] + [f"w{i}" for i in range(1, self.workers + 1)]
            for i, name in enumerate(names):
                self.add_host(name, f"{self.subnet}.{2 + i if i < 2 else 8 + i}")
            for i, name in enumerate(self.extra):
                self.add_host(name, f"{self.subnet}.{100 + i}")
            self.start_store()
        except BaseException:
            self.close()
            raise

    def add_host(self, name: str, address: str) -> None:
        netns = f"pf{self.tag}{name}"
        port = f"v{name}"
        ip("netns", "add", netns)
        ip("-n", netns, "link", "set", "lo", "up")
        # The pair is made inside the host's namespace, its other end moved straight
        # into the switch's: no interface ever appears in the machine's own namespace.
        ip("-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", self.switch)
        ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", netns, "link", "set", "eth0", "up")
        ip("-n", self.switch, "link", "set", port, "master", "br0")
        ip("-n", self.switch, "link", "set", port, "up")
        home = self.root / "hosts" / name
        home.mkdir(parents=True, exist_ok=True)
        self.hosts[name] = Host(name, netns, address, port, home)

    def start_store(self) -> None:
        store = self.hosts["store"]
        if self.store_server == "ceph":
            from support.ceph_rgw import CephRgw

            self.rgw = CephRgw(store.address, STORE_PORT, store.home, CREDENTIALS["AWS_ACCESS_KEY_ID"],
                               CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                               run=lambda argv, timeout: self.run("store", argv, timeout=timeout),
                               spawn=lambda argv, log: self.spawn("store", argv, log=log))
            self.rgw.start()
        else:
            assert self.store_server == "moto", self.store_server
            moto = str(Path(sys.executable).parent / "moto_server")
            self.spawn("store", [moto, "-H", store.address, "-p", str(STORE_PORT)], log="moto")
        deadline = time.time() + 60
        while True:
            probe = self.run("store", [sys.executable, str(STORE_CLIENT), "list", "s3://none"], check=False)
            if "NoSuchBucket" in probe.stderr:
                return
            if time.time() > deadline:
                raise RuntimeError(f"the store never answered: {probe.stderr[-2000:]}")
            time.sleep(0.3)

    def start_proxy(self, port: int = PROXY_PORT, log: str = "proxy", **faults) -> dict:
        """Starts fault_proxy.py on the store's host in front of the store, on `port`
        (`faults`: delay_ms, slowdown, error, reset, stall, every, seed, ignore_conditions=True); returns the
        environment that sends a process's store requests through it."""
        store = self.hosts["store"]
        flags = [f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}") for k, v in faults.items()]
        self.spawn("store", [sys.executable, "-u", str(FAULT_PROXY), store.address, str(port),
                             store.address, str(STORE_PORT), *flags], log=log)
        deadline = time.time() + 30
        while "listening" not in self.log("store", log):
            if time.time() > deadline:
                raise RuntimeError(f"the proxy never started: {self.log('store', log)[-2000:]}")
            time.sleep(0.1)
        return {"AWS_ENDPOINT_URL": f"http://{store.address}:{port}"}

    def command(self, host: str, argv: list[str]) -> list[str]:
        """`argv` on `host`: in its network namespace and a UTS namespace of its own,
        whose hostname is the host's name (what a process reports as its host, e.g. in
        the output lock, differs from host to host as on separate machines)."""
        return ["ip", "netns", "exec", self.hosts[host].netns, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', f"{host}-{self.tag}", *argv]

    def run(self, host: str, argv: list[str], check: bool = True, timeout: float = 600,
            env: dict | None = None) -> subprocess.CompletedProcess:
        """Runs `argv` on `host` to its end."""
        proc = subprocess.run(self.command(host, argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env, **(env or {})})
        if check and proc.returncode != 0:
            raise AssertionError(f"{host}: {argv} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return proc

    def spawn(self, host: str, argv: list[str], log: str, env: dict | None = None) -> subprocess.Popen:
        """Starts `argv` on `host`, its output in `<host home>/<log>.log`."""
        out = open(self.hosts[host].home / f"{log}.log", "w")
        full_env = {**os.environ, **self.env, **(env or {})}
        proc = subprocess.Popen(self.command(host, argv), stdout=out, stderr=out, env=full_env,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def log(self, host: str, name: str) -> str:
        return (self.hosts[host].home / f"{name}.log").read_text()

    def store(self, *args: str) -> subprocess.CompletedProcess:
        """`store_client.py ARGS` on the store's own host (whatever links are cut)."""
        return self.run("store", [sys.executable, str(STORE_CLIENT), *args])

    def cut(self, host: str) -> None:
        """Takes `host`'s link down at the bridge: a partition, not a closed socket."""
        ip("-n", self.switch, "link", "set", self.hosts[host].port, "down")

    def heal(self, host: str) -> None:
        ip("-n", self.switch, "link", "set", self.hosts[host].port, "up")

    def cut_store(self, host: str) -> None:
        """Drops `host`'s packets to the store's host (the store and its proxies), and
        nothing else: `host` still reaches every other host."""
        subprocess.run(["ip", "netns", "exec", self.hosts[host].netns, "iptables", "-I", "OUTPUT",
                        "-d", self.hosts["store"].address, "-j", "DROP"], check=True)

    def heal_store(self, host: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.hosts[host].netns, "iptables", "-D", "OUTPUT",
                        "-d", self.hosts["store"].address, "-j", "DROP"], check=True)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.switch], capture_output=True)
        if getattr(self, "rgw", None) is not None:
            self.rgw.close()
