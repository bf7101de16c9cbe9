"""Cluster mode: a coordinator process and `worker` processes on loopback.

Each test starts real processes (`coordinator run` with `[run] mode = "cluster"`,
`worker --join`), does something to them (SIGKILL, SIGSTOP, wrong cookie) and checks
that the output is byte-identical to local mode's for the same job.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest


from support.cluster import (Cluster, cluster_input, env, finish_without, job, make_certs, same_output, stopped_in,
                             tls_flags, wait_for)
from support.run import COORDINATOR, WORKER, free_port, run


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Input of several files (so there are several map tasks) and local mode's output."""
    return cluster_input(tmp_path_factory.mktemp("cluster"))


def tasks_run(stdout: str) -> int:
    m = re.search(r"\((\d+) tasks run, (\d+) resumed", stdout)
    assert m, stdout[-2000:]
    return int(m.group(1))


def why_attempts_ran_again(stdout: str) -> list[str]:
    """The coordinator's lines that explain an attempt beyond the plan (for a failure message)."""
    return [line for line in stdout.splitlines() if re.search(r"task failed|re-queued|refused|left", line)]


def planned_tasks(out: Path) -> int:
    record = json.loads((out / "_job" / "journal" / "job.json").read_text())
    return len(record["plan"]["maps"]) + record["plan"]["shards"]


def test_three_workers_give_local_bytes(tmp_path, data):
    d, inputs, manifest = data
    c = Cluster.for_job(tmp_path, inputs, "c3")
    try:
        for i in range(3):
            c.start_worker(f"w{i}")
        out = c.finish()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, out[-3000:]
    assert all(w.returncode == 0 for w in c.workers.values()), [c.log(n)[-2000:] for n in c.workers]
    same_output(tmp_path / "out-c3", manifest)
    assert tasks_run(out) == planned_tasks(tmp_path / "out-c3"), why_attempts_ran_again(out)
    assert "lease expired" not in out


@pytest.mark.parametrize("moment", ["map", "reduce", "report"])
def test_sigkill_a_worker_reruns_its_task_once(tmp_path, data, moment):
    d, inputs, manifest = data
    # A long lease: the requeue must come from the node session ending (the fast path).
    c = Cluster.for_job(tmp_path, inputs, f"kill-{moment}", lease=120)
    out = c.out
    try:
        victim = c.start_worker("victim", fault="park-before-report" if moment == "report" else None)
        if moment == "report":
            # The victim wrote its first task's outputs and is about to report them.
            wait_for(lambda: "parked before reporting" in c.log("victim"))
            assert re.search(r"task ended.*ok=true", c.log("victim")), c.log("victim")[-2000:]
        elif moment == "map":
            # The victim is alone at first, so it holds the first map task when killed.
            wait_for(lambda: re.search(r"running.*map-", c.log("victim")) is not None)
        else:
            c.start_worker("helper")
            wait_for(lambda: re.search(r"running.*reduce-", c.log("victim")) is not None, timeout=120)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        c.start_worker("w1")
        c.start_worker("w2")
        stdout = c.finish()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(out, manifest)
    requeued = [line for line in stdout.splitlines() if "re-queued" in line]
    assert requeued and all("node lost" in line and "victim" in line for line in requeued), stdout[-3000:]
    assert tasks_run(stdout) == planned_tasks(out) + len(requeued)


def stopped_in_a_map(c: Cluster, name: str, **worker) -> subprocess.Popen:
    """Starts worker `name` alone and SIGSTOPs it while it runs its first map task."""
    return stopped_in(c, name, r"running.*map-", **worker)


def test_sigstop_past_the_lease_late_result_is_refused(tmp_path, data):
    d, inputs, manifest = data
    c = Cluster.for_job(tmp_path, inputs, "stop", lease=3)
    out = c.out
    try:
        sleeper = stopped_in_a_map(c, "sleeper")
        c.start_worker("w1")
        wait_for(lambda: "lease expired" in c.log("coordinator-0"), timeout=60)
        sleeper.send_signal(signal.SIGCONT)
        stdout = c.finish()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(out, manifest)
    assert any("lease expired; re-queued" in line and "sleeper" in line for line in stdout.splitlines())
    assert "late or duplicate result refused" in stdout, stdout[-3000:]


def test_a_worker_away_at_the_end_learns_the_job_is_done(tmp_path, data):
    d, inputs, manifest = data
    c = Cluster.for_job(tmp_path, inputs, "away", lease=3)
    out = c.out
    away = finish_without(c, lambda: stopped_in_a_map(c, "away", give_up=120))
    assert c.coordinator.returncode == 0
    same_output(out, manifest)
    assert away.returncode == 0, c.log("away")[-3000:]
    assert "the job finished while this worker was away" in c.log("away")
    # Its late map attempt wrote a shuffle file after the job had removed them; it is gone.
    assert "the job finished without this attempt; its files are removed" in c.log("away"), c.log("away")[-3000:]
    assert list((out / "_job" / "shuffle").glob("*")) == []


def test_wrong_cookie_and_duplicate_names_are_rejected(tmp_path, data):
    d, inputs, manifest = data
    c = Cluster.for_job(tmp_path, inputs, "cookie")
    try:
        intruder = c.start_worker("intruder", cookie="ffffffffffffffffffffffffffffffff", give_up=3)
        intruder.wait(timeout=60)
        assert intruder.returncode == 1
        assert "unreachable" in c.log("intruder")
        assert not (tmp_path / "out-cookie" / "_job" / "journal" / "map-00000.json").exists()
        # A connection that never says anything does not keep a worker out.
        idle = socket.create_connection(("127.0.0.1", c.port))
        c.start_worker("w1")
        wait_for(lambda: "joined" in c.log("w1"), timeout=30)
        # A second worker of the same name is refused (exit 2) and the job goes on.
        twin = subprocess.run(
            [str(WORKER), "--join", f"127.0.0.1:{c.port}", "--name", "w1", "--memory", "256MiB",
             "--scratch", str(tmp_path / "twin")],
            env=env(), capture_output=True, text=True, timeout=60,
        )
        assert twin.returncode == 2 and "already connected" in twin.stderr, twin.stderr[-2000:]
        stdout = c.finish()
        idle.close()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0
    assert c.workers["w1"].returncode == 0
    same_output(tmp_path / "out-cookie", manifest)
    # The coordinator refused the connection before its node saw a byte, and logged it.
    assert re.search(r"refused a connection: a different cookie", stdout), stdout[-3000:]
    assert "holds a different cookie" in c.log("intruder")


def test_mutual_tls_admits_only_certified_workers(tmp_path, data):
    d, inputs, manifest = data
    certs = make_certs(tmp_path / "certs", workers=2)
    other = make_certs(tmp_path / "other-ca", workers=1)
    c = Cluster.for_job(tmp_path, inputs, "tls", tls=certs, handshake_timeout=2)
    out = c.out
    try:
        # Silent TCP connections, held open throughout.
        idle = [socket.create_connection(("127.0.0.1", c.port)) for _ in range(3)]
        # A plain-TCP worker, a worker whose certificate another CA signed, and a worker
        # that does not trust the coordinator's name: none gets in.
        strangers = {
            "plain": c.start_worker("plain", give_up=3),
            "foreign": c.start_worker("foreign", give_up=3, extra=tls_flags(other, "worker-1", ca=certs)),
            "misnamed": c.start_worker("misnamed", give_up=3,
                                       extra=[*tls_flags(certs, "worker-1"), "--tls-server-name", "elsewhere"]),
        }
        # A TLS client without a certificate is refused by the coordinator.
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        with socket.create_connection(("127.0.0.1", c.port)) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
                    tls.recv(1)
        for name, proc in strangers.items():
            proc.wait(timeout=60)
            assert proc.returncode == 1, (name, c.log(name)[-2000:])
            assert "joined" not in c.log(name)
        assert "requires TLS" in c.log("plain") and "refused this worker's certificate" in c.log("foreign")
        assert "certificate not valid for name" in c.log("misnamed"), c.log("misnamed")[-2000:]
        assert not (out / "_job" / "journal" / "map-00000.json").exists()
        # Certified workers join while the silent connections are still open.
        c.start_worker("w1", extra=tls_flags(certs, "worker-1"))
        c.start_worker("w2", extra=tls_flags(certs, "worker-2"))
        wait_for(lambda: "joined" in c.log("w1") and "joined" in c.log("w2"), timeout=30)
        stdout = c.finish()
        for s in idle:
            s.close()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    assert c.workers["w1"].returncode == 0 and c.workers["w2"].returncode == 0
    same_output(out, manifest)
    refused = [line for line in stdout.splitlines() if "TLS handshake failed" in line]
    assert any("peer sent no certificates" in line for line in refused), stdout[-4000:]
    assert any("does not speak TLS" in line for line in refused), stdout[-4000:]
    assert any("UnknownIssuer" in line for line in refused), stdout[-4000:]
    assert "TLS handshake timed out after 2s" in stdout, stdout[-4000:]
    # No stranger's node ever reached the cookie handshake.
    assert not re.search(r"(plain|foreign|misnamed)~", stdout), stdout[-4000:]


def test_tls_settings_are_checked(tmp_path, data):
    d, inputs, _ = data
    certs = make_certs(tmp_path / "certs", workers=1)
    spec = job(tmp_path, "badtls", inputs, "cluster", free_port(), tls=certs)
    spec.write_text(spec.read_text().replace("coordinator.key", "missing.key"))
    proc = subprocess.run([str(COORDINATOR), "run", str(spec)], env=env(), capture_output=True, text=True)
    assert proc.returncode == 2 and "missing.key" in proc.stderr, proc.stderr
    assert not (tmp_path / "out-badtls").exists()
    spec.write_text(spec.read_text().replace("missing.key", "worker-1.key"))
    proc = subprocess.run([str(COORDINATOR), "run", str(spec)], env=env(), capture_output=True, text=True)
    assert proc.returncode == 2 and "does the key belong to the certificate" in proc.stderr, proc.stderr
    base = [str(WORKER), "--join", "127.0.0.1:1", "--give-up-after", "1"]
    w = subprocess.run([*base, "--tls-cert", str(certs / "worker-1.pem")], env=env(), capture_output=True, text=True)
    assert w.returncode == 2 and "--tls-key" in w.stderr, w.stderr
    flags = tls_flags(certs, "worker-1")
    flags[flags.index("--tls-ca") + 1] = str(certs / "ca.key")
    w = subprocess.run([*base, *flags], env=env(), capture_output=True, text=True)
    assert w.returncode == 2 and "ca.key" in w.stderr and "no certificate" in w.stderr, w.stderr


def test_cluster_settings_are_checked(tmp_path, data):
    d, inputs, _ = data
    spec = job(tmp_path, "nocookie", inputs, "cluster", free_port())
    e = env()
    e.pop("PROBEFLOW_COOKIE")
    proc = subprocess.run([str(COORDINATOR), "run", str(spec)], env=e, capture_output=True, text=True)
    assert proc.returncode == 2 and "PROBEFLOW_COOKIE" in proc.stderr
    short = subprocess.run([str(COORDINATOR), "run", str(spec)], env=env("short"), capture_output=True, text=True)
    assert short.returncode == 2 and "at least 32 characters" in short.stderr
    bad = job(tmp_path, "badlisten", inputs, "cluster", 1)
    bad.write_text(bad.read_text().replace('listen = "127.0.0.1:1"', 'listen = "nowhere"'))
    proc = subprocess.run([str(COORDINATOR), "run", str(bad)], env=env(), capture_output=True, text=True)
    assert proc.returncode == 2 and "listen" in proc.stderr
    w = subprocess.run([str(WORKER), "--join", "127.0.0.1:1", "--memory", "lots"], env=env(),
                       capture_output=True, text=True)
    assert w.returncode == 2 and "--memory" in w.stderr
    w = subprocess.run([str(WORKER), "--join", "127.0.0.1:1"], env=dict(env(), PROBEFLOW_FAULT="crash"),
                       capture_output=True, text=True)
    assert w.returncode == 2 and "PROBEFLOW_FAULT" in w.stderr
    w = subprocess.run([str(WORKER), "--help"], capture_output=True, text=True)
    assert w.returncode == 0 and "--join" in w.stdout and "--tls-cert" in w.stdout


def test_coordinator_killed_and_restarted_workers_reconnect(tmp_path, data):
    d, inputs, manifest = data
    c = Cluster.for_job(tmp_path, inputs, "restart")
    out = c.out
    journal = out / "_job" / "journal"
    try:
        c.start_worker("w1")
        c.start_worker("w2")
        wait_for(lambda: len(list(journal.glob("map-*.json"))) >= 1)
        c.coordinator.send_signal(signal.SIGKILL)
        c.coordinator.wait()
        done_before = len(list(journal.glob("*-*.json")))
        planned = planned_tasks(out)
        assert 0 < done_before < planned
        time.sleep(1)  # the workers notice and start reconnecting
        c.coordinator = c.start_coordinator()
        stdout = c.finish()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    assert all(w.returncode == 0 for w in c.workers.values()), [c.log(n)[-2000:] for n in c.workers]
    same_output(out, manifest)
    # Attempts in flight when the coordinator died are adopted, or run again (a task
    # leased again before its first attempt is offered counts as run, too).
    adopted = stdout.count("a predecessor's attempt adopted")
    assert planned - done_before - adopted <= tasks_run(stdout) <= planned - done_before, stdout[-2000:]
    assert f"{done_before} resumed from the journal" in stdout, stdout[-2000:]
    for n in c.workers:
        log = c.log(n)
        assert "lost the coordinator; reconnecting" in log and log.count("joined") == 2, log[-2000:]


def test_a_restarted_coordinator_adopts_the_attempts_in_flight(tmp_path, data):
    """A worker finishes the task it holds when the coordinator dies and offers the
    result to the restarted coordinator, which takes it instead of running the task
    again (a restart used to throw away every attempt in flight)."""
    d, inputs, manifest = data
    c = Cluster.for_job(tmp_path, inputs, "adopt", lease=120)
    out = c.out
    journal = out / "_job" / "journal"
    try:
        # Each result is reported 3 s after the task's outputs are written: the
        # coordinator dies in that window.
        c.start_worker("slow", fault="slow-report:3000")
        wait_for(lambda: "fault injection: slow report" in c.log("slow"), timeout=60)
        c.coordinator.send_signal(signal.SIGKILL)
        c.coordinator.wait()
        done_before = len(list(journal.glob("*-*.json")))
        planned = planned_tasks(out)
        c.coordinator = c.start_coordinator()
        stdout = c.finish()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    assert c.workers["slow"].returncode == 0, c.log("slow")[-3000:]
    same_output(out, manifest)
    adopted = [line for line in stdout.splitlines() if "a predecessor's attempt adopted" in line]
    # The task it was reporting, and the one committing behind it, if any.
    assert 1 <= len(adopted) <= 2 and all("worker=slow" in a for a in adopted), stdout[-3000:]
    assert "offered an attempt a previous coordinator did not take" in c.log("slow")
    # One worker: nothing is leased again before its attempts are offered.
    assert f"{planned - done_before - len(adopted)} tasks run, {done_before} resumed from the journal" in stdout, stdout[-2000:]
    # The adopted attempts are the predecessor's (epoch 1): numbers below 1000.
    assert all(int(re.search(r"attempt=(\d+)", a).group(1)) < 1000 for a in adopted)
    assert sorted(p.name for p in (journal / "epochs").iterdir()) == ["00001.json", "00002.json"]


def test_heartbeats_follow_the_lease_in_cluster_mode(tmp_path, data):
    """lease_seconds = 1 with tasks of 2.5 s: heartbeats every quarter lease keep every
    lease (a fixed 2 s heartbeat lost each one, and the job failed)."""
    d, inputs, manifest = data
    c = Cluster.for_job(tmp_path, inputs, "shortlease", lease=1)
    try:
        c.start_worker("slow", fault="slow-report:2500", extra=["--threads", "4"])
        stdout = c.finish()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(c.out, manifest)
    assert "lease expired" not in stdout
    assert tasks_run(stdout) == planned_tasks(c.out)
    assert "heartbeat_ms=250" in c.log("slow")


def joined(c: Cluster, name: str) -> None:
    wait_for(lambda: "joined" in c.log(name), timeout=60)


def with_a_bad_worker(tmp_path: Path, inputs: Path, job_name: str, name: str, fault: str):
    """Runs job `job_name` with a slow honest worker and, once it has joined, worker
    `name` with `fault`; returns the cluster, the bad worker and the coordinator's log."""
    c = Cluster.for_job(tmp_path, inputs, job_name)
    try:
        c.start_worker("honest", fault="slow-report:300")
        joined(c, "honest")
        bad = c.start_worker(name, fault=fault)
        stdout = c.finish()
    finally:
        c.kill_all()
    return c, bad, stdout


def test_forged_results_are_refused_and_their_worker_excluded(tmp_path, data):
    """A peer with the cookie reports a result for a lease it does not hold, and results
    for its own leases naming paths it was not given (manifest.json, ../..): every one
    is refused, the peer is excluded, and the output is local mode's, manifest intact."""
    d, inputs, manifest = data
    c, forger, stdout = with_a_bad_worker(tmp_path, inputs, "forged", "forger", "forge-results")
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(c.out, manifest)
    assert "result refused" in stdout and "manifest.json" in stdout, stdout[-3000:]
    assert "no lease held with this attempt and token" in stdout
    assert re.search(r"worker excluded for the rest of the job.*forger|forger.*worker excluded", stdout), stdout[-3000:]
    assert forger.returncode == 2 and "excluded" in c.log("forger")
    assert not list(c.out.glob("elsewhere*")) and not (c.out / "../../elsewhere.array_record").exists()
    status = run(["status", str(c.out)]).stdout
    assert "worker forger excluded" in status, status


def test_a_worker_with_a_full_scratch_is_excluded_and_the_job_finishes(tmp_path, data):
    """One worker's scratch disk is full (every task fails with ENOSPC): failed attempts
    wait a backoff and go to the other worker; the full one is excluded."""
    d, inputs, manifest = data
    c, full, stdout = with_a_bad_worker(tmp_path, inputs, "fulldisk", "full", "scratch-full")
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(c.out, manifest)
    assert "No space left on device" in stdout, stdout[-3000:]
    assert re.search(r"worker excluded for the rest of the job.*full", stdout), stdout[-3000:]
    assert full.returncode == 2 and "excluded" in c.log("full")
    status = run(["status", str(c.out)]).stdout
    assert "worker full excluded" in status and "No space left" in status, status


def closed_by_peer(s: socket.socket, timeout: float) -> bool:
    """Whether the other end closes `s` within `timeout` seconds (what it sends first,
    its cookie challenge, is read and dropped)."""
    deadline = time.time() + timeout
    try:
        while True:
            s.settimeout(max(0.01, deadline - time.time()))
            if s.recv(4096) == b"":
                return True
    except ConnectionResetError:
        return True
    except (socket.timeout, TimeoutError):
        return False


def test_an_idle_connection_flood_on_the_plaintext_listener_is_capped_and_timed_out(tmp_path, data):
    """300 silent TCP connections to a plaintext coordinator: those past the caps (64 in
    all, 16 from one address) are closed at once, the rest once they have not authenticated within 5 s; a worker
    joins meanwhile and the job finishes with local mode's bytes."""
    d, inputs, manifest = data
    c = Cluster.for_job(tmp_path, inputs, "flood")
    try:
        idle = []
        for _ in range(300):
            idle.append(socket.create_connection(("127.0.0.1", c.port)))
        # A slow worker: the job outlasts the check below.
        c.start_worker("w1", fault="slow-report:3000")
        wait_for(lambda: "joined" in c.log("w1"), timeout=30)
        started = time.time()
        closed = [closed_by_peer(s, max(0.1, started + 10 - time.time())) for s in idle]
        assert c.coordinator.poll() is None, "the job ended before the check"
        assert all(closed), f"{closed.count(False)} idle connections still open after 10 s"
        stdout = c.finish()
        for s in idle:
            s.close()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(c.out, manifest)
    assert "not authenticated within 5s" in stdout, stdout[-3000:]
    assert re.search(r"unauthenticated connections (from its address )?already open", stdout), stdout[-3000:]


def test_plaintext_on_a_non_loopback_address_needs_allow_plaintext(tmp_path, data):
    d, inputs, manifest = data
    port = free_port()
    spec = job(tmp_path, "open", inputs, "cluster", port)
    spec.write_text(spec.read_text().replace(f'listen = "127.0.0.1:{port}"', f'listen = "0.0.0.0:{port}"'))
    refused = subprocess.run([str(COORDINATOR), "run", str(spec)], env=env(), capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "allow_plaintext" in refused.stderr and "[run.tls]" in refused.stderr, refused.stderr
    assert not (tmp_path / "out-open").exists(), "refused before touching the output"
    spec.write_text(spec.read_text().replace("[run]\n", "[run]\nallow_plaintext = true\n"))
    c = Cluster(tmp_path, spec, port)
    c.out = tmp_path / "out-open"
    try:
        c.start_worker("w1")
        stdout = c.finish()
    finally:
        c.kill_all()
    assert c.coordinator.returncode == 0, stdout[-3000:]
    same_output(c.out, manifest)
    assert "plaintext" in stdout
