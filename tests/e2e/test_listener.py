"""The coordinator's cluster listener against peers that never authenticate, while a
real job runs on it: random bytes, a ractor frame length of u64::MAX and of 16 MiB + 1
(with the 16 MiB behind it), a 16 MiB drip over the deadline, one byte a second, a FIN
mid-frame, garbage TLS ClientHellos, and a churn of about 1 000 connections a second
while the workers join. Each connection is closed by the listener's deadline or
sooner; the coordinator's resident memory stays within a few MiB of what the job
alone takes; the job ends with local mode's bytes.

Before the cookie proof (engine/src/preauth.rs) a peer's 16 MiB frames were read
before it authenticated: 2 GiB of them from peers that never did took a coordinator
from 17 to 1 514 MiB.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from pathlib import Path

import pytest

from support.cluster import Cluster, cluster_input, make_certs, same_output, tls_flags, wait_for

#: The listener's deadline (engine/src/listener.rs AUTH_TIMEOUT), and slack for a busy CI.
DEADLINE = 5.0
SLACK = 3.0
#: The most the coordinator's resident memory may grow under the attacks (MiB): what
#: the job itself takes in cluster mode, plus 64 unauthenticated connections' few MiB.
GROWTH_MIB = 48


@pytest.fixture(scope="module")
def cluster_data(tmp_path_factory):
    return cluster_input(tmp_path_factory.mktemp("listener"))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class PeakRss:
    """Samples a process's resident memory every 20 ms until stopped: the peak."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except (FileNotFoundError, ProcessLookupError, AssertionError):
                return
            time.sleep(0.02)

    def done(self) -> float:
        self.stop.set()
        self.thread.join()
        return self.peak


def time_to_close(s: socket.socket, limit: float) -> float:
    """Seconds until the listener closes `s` (reading and dropping what it sends, while
    another thread sends), or `inf`."""
    start = time.time()
    while time.time() - start < limit:
        try:
            ready, _, _ = select.select([s], [], [], 0.2)
            if ready and s.recv(65536) == b"":
                return time.time() - start
        except (ConnectionResetError, BrokenPipeError, OSError):
            return time.time() - start
    return float("inf")


def send_quietly(s: socket.socket, data: bytes) -> bool:
    """Sends `data`; False once the listener has closed the connection."""
    try:
        s.sendall(data)
        return True
    except OSError:
        return False


class Attack:
    """One hostile peer in a thread: `run(socket)` sends; the listener's time to close
    it is recorded."""

    def __init__(self, port: int, name: str, send, limit: float):
        self.name, self.closed_after = name, None
        self.thread = threading.Thread(target=self.go, args=(port, send, limit), daemon=True)
        self.thread.start()

    def go(self, port: int, send, limit: float) -> None:
        s = socket.create_connection(("127.0.0.1", port))
        start = time.time()
        sender = threading.Thread(target=send, args=(s,), daemon=True)
        sender.start()
        try:
            after = time_to_close(s, limit + 1)
            self.closed_after = after if after == float("inf") else time.time() - start
        finally:
            if self.closed_after == float("inf"):
                s.shutdown(socket.SHUT_RDWR)
            sender.join(timeout=limit + 10)
            s.close()


def random_bytes(s):
    send_quietly(s, os.urandom(1 << 20))


def length_u64_max(s):
    send_quietly(s, (2**64 - 1).to_bytes(8, "big"))


def sixteen_mib_and_one(s):
    if send_quietly(s, (16 * 2**20 + 1).to_bytes(8, "big")):
        send_quietly(s, bytes(16 * 2**20 + 1))


FRAME = bytes(16 * 2**20 - 16)


def frame_flood(s):
    """A frame of just under ractor_cluster's 16 MiB limit, whole: what a peer that never
    authenticates could make the coordinator hold (12 of them: 192 MiB)."""
    if send_quietly(s, len(FRAME).to_bytes(8, "big")):
        send_quietly(s, FRAME)


def drip(s):
    """16 MiB in 64 KiB pieces spread over the deadline and past it."""
    s.settimeout(1)
    piece = bytes(64 << 10)
    for _ in range(256):
        if not send_quietly(s, piece):
            return
        time.sleep((DEADLINE + 1) / 256)


def byte_a_second(s):
    for _ in range(int(DEADLINE + SLACK)):
        if not send_quietly(s, b"P"):
            return
        time.sleep(1)


def fin_mid_frame(s):
    send_quietly(s, b"PFCLSTR\x01" + bytes(20))
    s.shutdown(socket.SHUT_WR)


#: Attack, the longest the listener may take to close it.
ATTACKS = [
    (random_bytes, SLACK),
    (length_u64_max, DEADLINE + SLACK),
    (sixteen_mib_and_one, DEADLINE + SLACK),
    (drip, DEADLINE + SLACK + 2),
    (byte_a_second, DEADLINE + SLACK),
    (fin_mid_frame, SLACK),
] + [(frame_flood, SLACK)] * 12


def churn(port: int, stop: threading.Event, counts: list) -> None:
    """Connects and closes (half of them after a few random bytes) about 1 000 times a
    second until stopped."""
    n = 0
    start = time.time()
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            if n % 2:
                send_quietly(s, os.urandom(16))
            s.close()
        except OSError:
            pass
        n += 1
        ahead = n / 1000 - (time.time() - start)
        if ahead > 0:
            time.sleep(ahead)
    counts.append((n, time.time() - start))


def run_attacks(c: Cluster, attacks, tls_peers: int = 0) -> tuple[float, float, list, tuple]:
    """Runs `attacks` (and the churn) against a running job while two workers join:
    (baseline RSS, peak RSS, each attack's time to close, (churn connections, seconds))."""
    baseline = rss_mib(c.coordinator.pid)
    peak = PeakRss(c.coordinator.pid)
    stop, counts = threading.Event(), []
    churner = threading.Thread(target=churn, args=(c.port, stop, counts), daemon=True)
    churner.start()
    running = [Attack(c.port, f.__name__, f, limit) for f, limit in attacks]
    # Every attack takes its place before the workers try theirs.
    time.sleep(0.5)
    c.start_worker("w1", fault="slow-report:1500")
    c.start_worker("w2")
    for a in running:
        a.thread.join(timeout=60)
    wait_for(lambda: "joined" in c.log("w1") and "joined" in c.log("w2"), timeout=60)
    stop.set()
    churner.join()
    return baseline, peak.done(), [(a.name, a.closed_after) for a in running], counts[0]


def test_hostile_peers_are_closed_in_time_in_bounded_memory_and_the_job_is_unchanged(tmp_path, cluster_data):
    d, inputs, manifest = cluster_data
    c = Cluster.for_job(tmp_path, inputs, "hostile")
    try:
        baseline, peak, closed, (churned, seconds) = run_attacks(c, ATTACKS)
        stdout = c.finish()
    finally:
        c.kill_all()
    print(f"coordinator RSS {baseline:.0f} → peak {peak:.0f} MiB; closed after {closed}; "
          f"churn {churned} connections in {seconds:.1f} s")
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(c.out, manifest)
    for (name, after), (_, limit) in zip(closed, ATTACKS):
        assert after is not None and after <= limit, f"{name}: closed after {after} s (limit {limit})"
    assert churned / seconds > 300, f"the churn ran at {churned / seconds:.0f} connections/s"
    assert peak - baseline <= GROWTH_MIB, f"coordinator RSS {baseline:.0f} → {peak:.0f} MiB"


def garbage_client_hello(s):
    # A TLS record header (handshake, TLS 1.2) over random bytes.
    send_quietly(s, b"\x16\x03\x03\x40\x00" + os.urandom(1 << 14))


def client_hello_then_silence(s):
    send_quietly(s, b"\x16\x03\x01\x00\x05\x01\x00\x00\x01")


@pytest.mark.parametrize("peers", [32])
def test_garbage_client_hellos_on_the_tls_listener_are_closed_and_the_job_is_unchanged(tmp_path, cluster_data, peers):
    d, inputs, manifest = cluster_data
    certs = make_certs(tmp_path / "certs", 2)
    c = Cluster.for_job(tmp_path, inputs, "hostile-tls", tls=certs, handshake_timeout=2)
    try:
        attacks = [(garbage_client_hello, SLACK)] * (peers // 2) + [(client_hello_then_silence, 2 + DEADLINE + SLACK)] * (peers // 2)
        baseline = rss_mib(c.coordinator.pid)
        peak = PeakRss(c.coordinator.pid)
        running = [Attack(c.port, f.__name__, f, limit) for f, limit in attacks]
        time.sleep(0.5)
        for i, name in enumerate(["w0", "w1"]):
            c.start_worker(name, extra=tls_flags(certs, f"worker-{i + 1}"))
        for a in running:
            a.thread.join(timeout=60)
        stdout = c.finish()
        top = peak.done()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(c.out, manifest)
    for a, (_, limit) in zip(running, attacks):
        assert a.closed_after is not None and a.closed_after <= limit, f"{a.name}: {a.closed_after} s"
    assert top - baseline <= GROWTH_MIB, f"coordinator RSS {baseline:.0f} → {top:.0f} MiB"
