"""A chaos run on the bed: the preprocessing job in cluster mode, with a random fault
every few seconds until it finishes, each one logged with how the job recovered.

The faults (each undone before the next; each kind once in every cycle of the kinds
chosen, in a random order):

* ``kill-worker``: a worker's process is SIGKILLed; a new worker process (a new name)
  joins from the same host a second later;
* ``pause-worker``: a worker is SIGSTOPped past its lease, then SIGCONTed (its late
  result must be fenced);
* ``cut-worker``: a worker's link is down past its lease, then up again;
* ``kill-coordinator``: the coordinator is SIGKILLed and started again on its host;
  it takes over once its old lock expires, resumes from the journal (adopting the
  attempts its predecessor's workers finish), and the workers reconnect by themselves.

Overlapping ones (``Chaos(overlapping=True)``, besides the four above):

* ``cut-worker-while-coordinator-restarts``: a worker's link is down while the
  coordinator is killed and restarted, then up again;
* ``kill-two-workers``: two workers SIGKILLed at once, each replaced a second later;
* ``cut-coordinator-from-store``: the coordinator cannot reach the store (its journal
  writes, the output lock's renewal fail) but still reaches its workers, past its lease
  and its lock, then can again: it must stop or wait without losing anything, and the
  job resume;
* ``pause-worker`` and the others run while the store proxy is slow and throttling
  (every request delayed, SlowDown on some), as they always do here.

Besides, every store request goes through the fault proxy (SlowDown, 500s and resets
on a small fraction). Used by ``test_bed.py`` (a short run) and by
``tests/bench/cluster_bed_chaos.py`` (minutes long).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

FAULTS = ("kill-worker", "pause-worker", "cut-worker", "kill-coordinator")
#: How a coordinator that stops on its own environment says so (its last line).
STOPS = ("could not renew the output lock", "lost the output lock", "cannot write the journal entry")
OVERLAPPING = ("cut-worker-while-coordinator-restarts", "kill-two-workers", "cut-coordinator-from-store")


@dataclass
class Chaos:
    bed: object
    inputs: Path
    start_job: object
    start_worker: object
    lease: int = 3
    lock: int = 4
    every: float = 3.0
    seed: int = 1
    #: The job's rows_per_map_task.
    map_rows: int = 50_000
    store_faults: dict = field(default_factory=lambda: dict(slowdown=0.02, error=0.01, reset=0.01))
    #: Also the overlapping faults.
    overlapping: bool = False
    log: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    def note(self, what: str) -> None:
        line = f"{time.time() - self.t0:7.1f} s  {what}"
        self.log.append(line)
        print(line, flush=True)

    def run(self, timeout: float = 900) -> float:
        """Runs the job to its end under faults; returns its wall time. Raises if it does
        not finish with exit 0 within `timeout`."""
        rng = random.Random(self.seed)
        bed = self.bed
        self.t0 = time.time()
        self.env = bed.start_proxy(seed=self.seed, **self.store_faults)
        self.coord_runs = 1
        self.coordinator = self.start_job(bed, self.inputs, lease=self.lease, env=self.env, lock=self.lock,
                                          log="coordinator-1", map_rows=self.map_rows)
        workers = [h for h in bed.hosts if re.fullmatch(r"w\d+", h)]
        self.workers: dict[str, tuple[subprocess.Popen, str]] = {}
        self.generation = {w: 0 for w in workers}
        for w in workers:
            self.join(w)
        # Every kind once per cycle of len(FAULTS) faults, in a random order.
        cycle: list[str] = []
        while True:
            deadline = time.time() + self.every * (0.5 + rng.random())
            while time.time() < deadline:
                if self.coordinator.poll() is not None:
                    if self.coordinator.returncode != 0 and self.stopped_to_be_restarted():
                        # It stopped on its own environment some time after a store
                        # cut (a renewal or a journal write that failed late): as
                        # Kubernetes would, start it again.
                        self.note(f"  the coordinator stopped (exit {self.coordinator.returncode})")
                        self.restart_coordinator(time.time())
                        continue
                    return self.finished(timeout)
                time.sleep(0.05)
            if time.time() - self.t0 > timeout:
                raise AssertionError("the chaos run did not finish:\n" + "\n".join(self.log[-20:]))
            if not cycle:
                kinds = FAULTS + (OVERLAPPING if self.overlapping else ())
                cycle = rng.sample(kinds, len(kinds))
            fault = cycle.pop()
            self.counts[fault] = self.counts.get(fault, 0) + 1
            getattr(self, fault.replace("-", "_"))(rng.choice(workers))

    def stopped_to_be_restarted(self) -> bool:
        """Whether the coordinator that exited stopped on a fault of its own environment
        (its lock not renewed, a journal entry not written), after which a restarted
        one resumes the job; any other exit ends the chaos run as a failure."""
        last = self.bed.log("coord", f"coordinator-{self.coord_runs}").strip().splitlines()[-1:]
        return bool(last) and any(why in last[0] for why in STOPS)

    def finished(self, timeout: float) -> float:
        rc = self.coordinator.returncode
        if rc != 0:
            raise AssertionError(f"the coordinator exited {rc}:\n"
                                 + self.bed.log("coord", f"coordinator-{self.coord_runs}")[-3000:])
        took = time.time() - self.t0
        self.note(f"job finished (coordinator run {self.coord_runs}); {sum(self.counts.values())} faults: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())))
        return took

    def join(self, host: str) -> None:
        self.generation[host] += 1
        name = f"{host}-{self.generation[host]}"
        proc = self.start_worker(self.bed, host, give_up=600, env=self.env,
                                 log=f"worker-{self.generation[host]}", name=name)
        self.workers[host] = (proc, name)

    def kill_worker(self, host: str) -> None:
        proc, name = self.workers[host]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        self.note(f"kill-worker {name}")
        time.sleep(1)
        self.join(host)
        self.note(f"  {self.workers[host][1]} joined from {host}")

    def pause_worker(self, host: str) -> None:
        proc, name = self.workers[host]
        if proc.poll() is not None:
            self.join(host)
            return
        os.killpg(proc.pid, signal.SIGSTOP)
        self.note(f"pause-worker {name} for {self.lease + 1} s")
        time.sleep(self.lease + 1)
        os.killpg(proc.pid, signal.SIGCONT)
        self.note(f"  {name} continued")

    def cut_worker(self, host: str) -> None:
        self.bed.cut(host)
        self.note(f"cut-worker {host} for {self.lease + 1} s")
        time.sleep(self.lease + 1)
        self.bed.heal(host)
        self.note(f"  {host} healed")

    def cut_worker_while_coordinator_restarts(self, host: str) -> None:
        self.bed.cut(host)
        self.note(f"cut-worker {host} while the coordinator restarts")
        self.kill_coordinator(host)
        self.bed.heal(host)
        self.note(f"  {host} healed")

    def kill_two_workers(self, host: str) -> None:
        others = [h for h in self.workers if h != host]
        pair = [host, random.Random(host + str(self.coord_runs)).choice(others)] if others else [host]
        for h in pair:
            proc, _ = self.workers[h]
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        for h in pair:
            self.workers[h][0].wait(timeout=30)
        self.note(f"kill-two-workers {', '.join(self.workers[h][1] for h in pair)}")
        time.sleep(1)
        for h in pair:
            self.join(h)
            self.note(f"  {self.workers[h][1]} joined from {h}")

    def cut_coordinator_from_store(self, _host: str) -> None:
        if self.coordinator.poll() is not None:
            return
        self.bed.cut_store("coord")
        self.note(f"cut-coordinator-from-store for {self.lock + 2} s")
        time.sleep(self.lock + 2)
        self.bed.heal_store("coord")
        self.note("  coordinator reaches the store again")
        # A coordinator that lost its lock or could not journal stops (exit 1 or 2),
        # keeping the journal; it is started again like a killed one. One whose store
        # requests waited the cut out goes on (exit 0 is the job's end).
        try:
            rc = self.coordinator.wait(timeout=self.lock)
        except subprocess.TimeoutExpired:
            self.note("  the coordinator waited it out")
            return
        if rc == 0:
            return
        if not self.stopped_to_be_restarted():
            raise AssertionError(f"the coordinator exited {rc} after a store cut:\n"
                                 + self.bed.log("coord", f"coordinator-{self.coord_runs}")[-3000:])
        self.note(f"  the coordinator stopped (exit {rc})")
        self.restart_coordinator(time.time())

    def kill_coordinator(self, _host: str) -> None:
        if self.coordinator.poll() is not None:
            return
        os.killpg(self.coordinator.pid, signal.SIGKILL)
        self.coordinator.wait(timeout=30)
        killed = time.time()
        self.note("kill-coordinator")
        self.restart_coordinator(killed)

    def restart_coordinator(self, killed: float) -> None:
        # A new coordinator on the same host is refused (exit 2) until the old lock expires.
        while True:
            self.coord_runs += 1
            log = f"coordinator-{self.coord_runs}"
            self.coordinator = self.start_job(self.bed, self.inputs, lease=self.lease, env=self.env,
                                              lock=self.lock, upload=False, log=log, map_rows=self.map_rows)
            try:
                rc = self.coordinator.wait(timeout=2)
            except subprocess.TimeoutExpired:
                break
            if rc == 0:
                break
            if rc != 2 or time.time() - killed > 10 * self.lock:
                raise AssertionError(f"the restarted coordinator exited {rc}:\n" + self.bed.log("coord", log)[-3000:])
            time.sleep(1)
        self.note(f"  coordinator run {self.coord_runs} took over {time.time() - killed:.1f} s after the kill")
