"""Cluster mode in the tests: a coordinator and worker processes on loopback, with or without mutual TLS."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from support.probe_rows import SHARDS, write_job
from support.run import COOKIE, COORDINATOR, WORKER, free_port, run


def job(tmp: Path, name: str, input_dir: Path, mode: str, port: int = 0, lease: int = 60,
        tls: Path | None = None, handshake_timeout: int = 10, output_lock: int | None = None) -> Path:
    """The cluster tests' probe-rows job `tmp/<name>.toml` on `input_dir`'s Parquet
    files: in `mode`, listening on `port`, with `lease`, and mutual TLS with the
    certificates in `tls` (from :func:`make_certs`) when given."""
    tls_table = None if tls is None else {
        "cert": tls / "coordinator.pem",
        "key": tls / "coordinator.key",
        "ca": tls / "ca.pem",
        "handshake_timeout_seconds": handshake_timeout,
    }
    return write_job(
        tmp / f"{name}.toml",
        {
            "input": {"url": f"{input_dir}/*.parquet", "rows_per_map_task": 20000},
            "output": {"url": tmp / ("out-" + name), "shards": SHARDS, "max_row_bytes": 65536},
            "split": {"test_fraction": 0.25, "seed": 17},
            "run": {"mode": mode, "workers": 2, "listen": f"127.0.0.1:{port}",
                    "memory_per_worker": "256MiB", "scratch": tmp / ("scratch-" + name),
                    "lease_seconds": lease, "output_lock_seconds": output_lock},
            "run.tls": tls_table,
        },
    )


MAKE_CERTS = Path(__file__).resolve().parents[2] / "infra" / "make-certs"


def make_certs(where: Path, workers: int) -> Path:
    """A CA, a coordinator certificate for 127.0.0.1 and worker-1..N, by infra/make-certs."""
    subprocess.run([str(MAKE_CERTS), str(where), "--host", "127.0.0.1", "--host", "localhost",
                    "--workers", str(workers)], check=True, capture_output=True)
    return where


def tls_flags(certs: Path, leaf: str, ca: Path | None = None) -> list[str]:
    return ["--tls-cert", str(certs / f"{leaf}.pem"), "--tls-key", str(certs / f"{leaf}.key"),
            "--tls-ca", str((ca or certs) / "ca.pem")]


def env(cookie: str = COOKIE) -> dict:
    e = dict(os.environ, PROBEFLOW_COOKIE=cookie, NO_COLOR="1",
             RUST_LOG="info,probeflow=debug,worker=debug,ractor_cluster=info")
    e.pop("PROBEFLOW_COOKIE_FILE", None)
    return e


class Cluster:
    """A coordinator and its workers as child processes, with their logs."""

    def __init__(self, tmp: Path, spec: Path, port: int, coordinator_args: list[str] = ()):
        self.tmp, self.spec, self.port = tmp, spec, port
        self.coordinator_args = list(coordinator_args)
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self.workers: dict[str, subprocess.Popen] = {}
        self.coordinator = self.start_coordinator()

    @classmethod
    def for_job(cls, tmp: Path, inputs: Path, name: str, coordinator_args: list[str] = (),
                **job_options) -> "Cluster":
        """A cluster-mode job `name` on a free port (output: `tmp/out-<name>`), its
        coordinator started with `coordinator_args` after `run JOB`."""
        port = free_port()
        c = cls(tmp, job(tmp, name, inputs, "cluster", port, **job_options), port, coordinator_args)
        c.out = tmp / f"out-{name}"
        return c

    def start_coordinator(self) -> subprocess.Popen:
        n = len(list(self.logs.glob("coordinator-*.log")))
        out = open(self.logs / f"coordinator-{n}.log", "w")
        proc = subprocess.Popen([str(COORDINATOR), "run", str(self.spec), *self.coordinator_args],
                                env=env(), stdout=out, stderr=out)
        self.wait_listening()
        return proc

    def wait_listening(self, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError("the coordinator never listened")

    def start_worker(self, name: str, cookie: str = COOKIE, give_up: int = 60,
                     extra: list[str] = (), fault: str | None = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "w")
        e = env(cookie)
        if fault:
            e["PROBEFLOW_FAULT"] = fault
        proc = subprocess.Popen(
            [str(WORKER), "--join", f"127.0.0.1:{self.port}", "--name", name, "--memory", "256MiB",
             "--scratch", str(self.tmp / "worker-scratch"), "--give-up-after", str(give_up), *extra],
            env=e, stdout=log, stderr=log,
        )
        self.workers[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def finish(self, timeout: float = 180) -> str:
        self.coordinator.wait(timeout=timeout)
        for w in self.workers.values():
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
        n = len(list(self.logs.glob("coordinator-*.log"))) - 1
        return (self.logs / f"coordinator-{n}.log").read_text()

    def restart_coordinator_once_journaled(self, out: Path, pattern: str, timeout: float = 240) -> str:
        """Kills the coordinator (SIGKILL) once a task result matching `pattern` is in the
        journal of output `out` and the job is not finished, starts it again and lets the
        job finish: the new coordinator's log."""
        journal = out / "_job" / "journal"
        deadline = time.time() + timeout
        while not any(journal.glob(pattern)):
            assert time.time() < deadline, f"no {pattern} in {journal}"
            time.sleep(0.005)
        self.coordinator.send_signal(signal.SIGKILL)
        self.coordinator.wait()
        assert not (out / "_SUCCESS").exists(), "the job finished before the coordinator was killed"
        time.sleep(1)
        self.coordinator = self.start_coordinator()
        return self.finish()

    def kill_all(self) -> None:
        for p in [self.coordinator, *self.workers.values()]:
            if p.poll() is None:
                p.kill()


def wait_for(predicate, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


def stopped_in(c: Cluster, name: str, running: str, **worker) -> subprocess.Popen:
    """Starts worker `name` alone and SIGSTOPs it once its log matches `running` (a task
    it runs)."""
    proc = c.start_worker(name, **worker)
    wait_for(lambda: re.search(running, c.log(name)) is not None)
    proc.send_signal(signal.SIGSTOP)
    return proc


def finish_without(c: Cluster, stop) -> subprocess.Popen:
    """`stop()` starts a worker and stops it mid-task; a worker w1 then runs the job to
    its end (the coordinator exits) without it; the stopped one is woken and must exit
    long before its --give-up-after. Returns it (exited)."""
    try:
        away = stop()
        c.start_worker("w1")
        c.coordinator.wait(timeout=180)  # the job ends, and the coordinator exits, without it
        away.send_signal(signal.SIGCONT)
        away.wait(timeout=30)  # far less than --give-up-after
    finally:
        c.kill_all()
    return away


def cluster_input(d: Path) -> tuple[Path, Path, dict]:
    """Input of several files under `d` (so there are several map tasks) and local
    mode's output of it: (d, the input directory, local mode's manifest with `_local`,
    its output directory)."""
    inputs = d / "input"
    inputs.mkdir()
    for seed in (1, 2, 3):
        g = d / f"gen-{seed}"
        run(["generate", "--rows", "60000", "--out", str(g), "--seed", str(seed)])
        for f in sorted(g.glob("*.parquet")):
            f.rename(inputs / f"{seed}-{f.name}")
    local = job(d, "local", inputs, "local")
    run(["run", str(local)])
    manifest = json.loads((d / "out-local" / "manifest.json").read_text())
    manifest["_local"] = str(d / "out-local")
    return d, inputs, manifest


def same_output(out: Path, manifest: dict) -> None:
    """`out` holds the shards, manifest entries and totals of local mode's output."""
    got = json.loads((out / "manifest.json").read_text())
    assert [(s["path"], s["blake3"]) for s in got["shards"]] == [(s["path"], s["blake3"]) for s in manifest["shards"]]
    local = Path(manifest["_local"])
    for s in manifest["shards"]:
        assert (out / s["path"]).read_bytes() == (local / s["path"]).read_bytes()
    assert got["totals"] == manifest["totals"]
