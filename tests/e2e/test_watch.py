"""Watching a job: a real Prometheus server (Debian's package) scrapes a cluster job's
coordinator and workers every second through their `--http` listeners, while one
worker's attempts fail by injection and another worker is SIGKILLed holding a lease;
`promtool` checks both endpoints' exposition; the probes answer as Kubernetes expects.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from support.cluster import Cluster, wait_for
from support.probe_rows import job_file
from support.run import COORDINATOR, free_port, run
from support.s3 import BUCKET, s3  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="needs Debian's prometheus package (tests/run installs it as root)",
)


def answers(url: str, status: int = 200) -> bool:
    """Whether `url` answers with `status` now (False while nothing listens)."""
    try:
        return get(url)[0] == status
    except OSError:
        return False


def get(url: str, accept: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("watch-input")
    for seed in (1, 2, 3):
        g = d / f"gen-{seed}"
        run(["generate", "--rows", "60000", "--out", str(g), "--seed", str(seed)])
        for f in sorted(g.glob("*.parquet")):
            f.rename(d / f"{seed}-{f.name}")
    return d


def lint_metrics(name: str, port: int) -> None:
    """`promtool check metrics` says nothing of the endpoint's exposition."""
    status, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and "process_cpu_seconds_total" in text, (name, text[:500])
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(), (name, lint.stdout + lint.stderr)


class Prometheus:
    """A Prometheus server on loopback scraping `targets` (job name → addresses) every second."""

    def __init__(self, tmp: Path, targets: dict[str, list[str]]):
        self.port = free_port()
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": addrs}]}
                                     for job, addrs in targets.items()]}
        (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=self.log)
        wait_for(lambda: answers(f"http://127.0.0.1:{self.port}/-/ready"), timeout=60)

    def query(self, expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = get(url)
        assert status == 200, body
        return json.loads(body)["data"]["result"]

    def value(self, expr: str) -> float | None:
        r = self.query(expr)
        return float(r[0]["value"][1]) if r else None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def test_prometheus_scrapes_a_cluster_job_through_a_failure_and_a_kill(tmp_path, inputs):
    http = {name: free_port() for name in ("coordinator", "w1", "w2", "w3")}
    c = Cluster.for_job(tmp_path, inputs, "watched",
                        coordinator_args=["--http", str(http["coordinator"]), "--linger", "6"])
    prom = None
    try:
        prom = Prometheus(tmp_path, {
            "probeflow-coordinator": [f"127.0.0.1:{http['coordinator']}"],
            "probeflow-worker": [f"127.0.0.1:{http[w]}" for w in ("w1", "w2", "w3")],
        })
        base = f"http://127.0.0.1:{http['coordinator']}"
        # w2 is honest and slow enough for the job to last; w3 holds each lease 4 s and
        # is killed; w1 fails every attempt (a full scratch disk) until it is excluded
        # (and exits), so it starts once the others are scraped.
        c.start_worker("w2", fault="slow-report:700", extra=["--http", str(http["w2"])])
        w3 = c.start_worker("w3", fault="slow-report:4000", extra=["--http", str(http["w3"])])
        wait_for(lambda: answers(f"{base}/readyz"), timeout=60)
        steady = 'up{instance!="127.0.0.1:%d"}' % http["w1"]
        wait_for(lambda: prom.value(f"min({steady})") == 1.0 and prom.value(f"count({steady})") == 3.0,
                 timeout=60)
        # The workers' exposition, while they run, is clean by Prometheus' own linter.
        for name in ("w2", "w3"):
            lint_metrics(name, http[name])
        c.start_worker("w1", fault="scratch-full", extra=["--http", str(http["w1"])])
        lint_metrics("coordinator", http["coordinator"])
        status, text = get(f"{base}/metrics", accept="application/openmetrics-text;version=1.0.0")
        assert status == 200 and text.endswith("# EOF\n")
        # The kill lands while w3 holds a lease (its slow report has begun).
        wait_for(lambda: "fault injection: slow report" in c.log("w3"), timeout=60)
        w3.send_signal(signal.SIGKILL)
        w3.wait()
        # Inside the coordinator's linger, Prometheus' last scrapes see how the job ended.
        wait_for(lambda: (c.out / "_SUCCESS").exists(), timeout=180)
        last = lambda expr: prom.value(f"last_over_time({expr}[5m])")
        wait_for(lambda: last('probeflow_job_state{state="succeeded"}') == 1, timeout=30)
        manifest = json.loads((c.out / "manifest.json").read_text())
        assert last('probeflow_work_units_done_total{stage="map"}') == manifest["totals"]["input_rows"]
        assert prom.value('sum(last_over_time(probeflow_task_attempts_total{outcome="failed"}[5m]))') >= 1
        assert prom.value('sum(last_over_time(probeflow_task_attempts_total{outcome="lost"}[5m]))') >= 1
        assert last("probeflow_workers_excluded") == 1
        # w2's tasks used CPU: some, and no more than its cores could in their wall time.
        w2 = 'instance="127.0.0.1:%d"' % http["w2"]
        cpu = prom.value(f"sum(last_over_time(probeflow_worker_task_cpu_seconds_total{{{w2}}}[5m]))")
        wall = prom.value(f"sum(last_over_time(probeflow_worker_task_seconds_total{{{w2}}}[5m]))")
        assert 0 < cpu <= wall * os.cpu_count() + 0.1, (cpu, wall)
        assert prom.value(f"last_over_time(probeflow_worker_spilled_bytes_total{{{w2}}}[5m])") == 0
        # Until the kill every target was up: w3 went down with it, the others stayed.
        assert prom.value('max_over_time(up{instance="127.0.0.1:%d"}[5m])' % http["w3"]) == 1
        assert prom.value('up{instance="127.0.0.1:%d"}' % http["w3"]) == 0
        assert prom.value('min_over_time(up{instance="127.0.0.1:%d"}[5m])' % http["coordinator"]) == 1
        stdout = c.finish()
        assert c.coordinator.returncode == 0, stdout[-3000:]
    finally:
        c.kill_all()
        if prom:
            prom.stop()


def test_livez_and_readyz_follow_the_actor_and_the_restart(tmp_path, inputs):
    """/readyz is 503 while a restarted coordinator waits for its predecessor's lock and
    200 once it holds it and has replayed the journal; /livez stays 200 through a task
    far longer than the probe's limit and fails while the coordinator is SIGSTOPped."""
    port = free_port()
    c = Cluster.for_job(tmp_path, inputs, "probed", coordinator_args=["--http", str(port), "--linger", "0"])
    base = f"http://127.0.0.1:{port}"
    try:
        c.start_worker("w1", fault="slow-report:5000")
        wait_for(lambda: answers(f"{base}/readyz"), timeout=60)
        status, text = get(f"{base}/readyz?verbose")
        assert "[+]journal ok" in text and "[+]output_lock ok" in text and "[+]workers_port ok" in text, text
        # A task of 5 s: liveness does not depend on the job's progress.
        wait_for(lambda: "fault injection: slow report" in c.log("w1"), timeout=60)
        for _ in range(6):
            assert get(f"{base}/livez")[0] == 200
            time.sleep(0.5)
        # Stopped, the coordinator answers nothing: the probe fails (a timeout).
        c.coordinator.send_signal(signal.SIGSTOP)
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{base}/livez", timeout=2)
        c.coordinator.send_signal(signal.SIGCONT)
        # Woken, it is live again once its actor steps.
        wait_for(lambda: answers(f"{base}/livez"), timeout=10)
        # A restart: the new coordinator serves its probes before it takes the output
        # lock, and is not ready (503) until it holds it, has replayed the journal and
        # listens for workers; then 200.
        c.coordinator.send_signal(signal.SIGKILL)
        c.coordinator.wait()
        seen: list[int] = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                try:
                    seen.append(get(f"{base}/readyz")[0])
                except OSError:
                    time.sleep(0.002)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            c.coordinator = c.start_coordinator()
            wait_for(lambda: seen and seen[-1] == 200, timeout=120)
        finally:
            done.set()
            poller.join()
        assert 503 in seen and seen[-1] == 200, seen
        assert seen.index(200) > seen.index(503), seen
        stdout = c.finish()
        assert c.coordinator.returncode == 0, stdout[-3000:]
    finally:
        c.kill_all()


def test_the_status_api_and_page_show_stages_workers_and_attempts(tmp_path, inputs):
    port = free_port()
    c = Cluster.for_job(tmp_path, inputs, "paged", coordinator_args=["--http", str(port), "--linger", "30"])
    base = f"http://127.0.0.1:{port}"
    try:
        c.start_worker("w1")
        wait_for(lambda: answers(f"{base}/api/v1/status")
                 and json.loads(get(f"{base}/api/v1/status")[1])["state"] == "succeeded", timeout=120)
        status, body = get(f"{base}/api/v1/status")
        assert status == 200, body
        s = json.loads(body)
        assert s["version"] == 1 and s["state"] == "succeeded" and s["kind"] == "probe_rows"
        stages = {st["name"]: st for st in s["stages"]}
        assert stages["map"]["done"] == stages["map"]["tasks"] == 9
        assert stages["map"]["units_done"] == stages["map"]["units_planned"] == 180_000
        assert stages["reduce"]["done"] == 4
        assert [w["name"] for w in s["workers"]] == ["w1"]
        assert len(s["timeline"]) == 13, "one bar per attempt"
        status, page = get(f"{base}/")
        assert status == 200 and page.count('class="attempt"') == 13 and page.count('class="stage"') == 2
        assert "cookie" not in body.lower() and "PROBEFLOW_COOKIE" not in page
    finally:
        c.kill_all()


INFRA_PROMETHEUS = Path(__file__).resolve().parents[2] / "infra" / "prometheus"


def test_the_alert_rules_and_the_scrape_config_pass_promtool():
    """infra/prometheus: the alerts fire when their unit tests say (no work for 10
    minutes, a straggler, an excluded worker, a throttling store, a failed job) and the
    config loads."""
    rules = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=INFRA_PROMETHEUS,
                           capture_output=True, text=True)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS" in rules.stdout
    config = subprocess.run(["promtool", "check", "config", "prometheus.yml"], cwd=INFRA_PROMETHEUS,
                            capture_output=True, text=True)
    assert config.returncode == 0, config.stdout + config.stderr


CHROMIUM = shutil.which("chromium")


def rendered(url: str, tmp: Path) -> str:
    """The DOM of `url` as headless Chromium renders it (Debian's package)."""
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp / 'chromium-profile'}", "--window-size=1100,1000",
         f"--screenshot={tmp / 'page.png'}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (tests/run installs it as root)")
def test_chromium_renders_the_live_page_with_a_straggler_and_one_bar_per_attempt(tmp_path, inputs):
    """A worker whose every report is held 8 s runs beside a fast one: mid-run the page
    shows the stages, both workers and the slow worker's attempt as a straggler; after
    the job (inside the linger) one timeline bar per attempt the model holds."""
    port = free_port()
    c = Cluster.for_job(tmp_path, inputs, "rendered", coordinator_args=["--http", str(port), "--linger", "30"])
    base = f"http://127.0.0.1:{port}"
    try:
        c.start_worker("fast")
        c.start_worker("slow", fault="slow-report:8000")

        def straggling() -> bool:
            if not answers(f"{base}/api/v1/status"):
                return False
            return any(s["worker"] == "slow" for s in json.loads(get(f"{base}/api/v1/status")[1])["stragglers"])

        wait_for(straggling, timeout=60)
        dom = rendered(f"{base}/", tmp_path)
        assert dom.count('class="stage"') >= 1 and 'data-stage="map"' in dom, dom[:3000]
        assert 'data-worker="fast"' in dom and 'data-worker="slow"' in dom, dom[:3000]
        stragglers = dom[dom.index('id="stragglers"'):dom.index("<h2>Workers")]
        assert 'class="straggler"' in stragglers and "slow" in stragglers, stragglers
        assert (tmp_path / "page.png").stat().st_size > 10_000
        wait_for(lambda: json.loads(get(f"{base}/api/v1/status")[1])["state"] == "succeeded", timeout=180)
        model = json.loads(get(f"{base}/api/v1/status")[1])
        dom = rendered(f"{base}/", tmp_path)
        assert dom.count('class="attempt"') == len(model["timeline"]) + len(model["running"]) >= 13
        assert 'id="job-state">succeeded' in dom
    finally:
        c.kill_all()


def logged_events(out: Path) -> list[dict]:
    """Every line of the output's event log (`_job/events/`), read here with nothing but
    `json`: the batches in name order, each header checked, then its events."""
    events = []
    for batch in sorted((out / "_job" / "events").glob("*.jsonl")):
        header, *lines = batch.read_text().splitlines()
        epoch, number = (int(p) for p in batch.stem.split("-"))
        assert json.loads(header) | {"release": None, "dropped": 0} == {
            "version": 1, "epoch": epoch, "batch": number, "release": None, "dropped": 0}, header
        events += [json.loads(line) | {"epoch_of_batch": epoch} for line in lines]
    return events


def logged_attempts(events: list[dict]) -> set[tuple[str, int, int]]:
    """The distinct attempts (stage, index, attempt) the log started or ended."""
    return {(e["task"]["stage"], e["task"]["index"], e["attempt"]) for e in events
            if e["event"] in ("attempt_started", "attempt_ended")}


def status_of(out: Path, *flags: str) -> dict:
    proc = run(["status", "--json", *flags, str(out)])
    return json.loads(proc.stdout)


def test_status_renders_a_restarted_cluster_job_from_its_event_log(tmp_path, inputs):
    """A cluster job whose coordinator is SIGKILLed once the event log holds a finished
    attempt, then restarted: after the job `coordinator status --json` replays the
    output's event log into the model the coordinator served (both epochs, one timeline
    bar per attempt the log holds, the map stage's work equal to the manifest's input
    rows), `--html` renders it as the live page is rendered (Chromium), and an output
    without an event log (an earlier release's) renders what its journal holds and says
    what is missing."""
    c = Cluster.for_job(tmp_path, inputs, "replayed")
    try:
        # 13 tasks of 2 s: the job outlasts the log's first batches (every 10 s).
        c.start_worker("w1", fault="slow-report:2000", give_up=120)
        events = tmp_path / "out-replayed" / "_job" / "events"
        wait_for(lambda: any('"attempt_ended"' in b.read_text() for b in events.glob("*.jsonl")), timeout=90)
        c.coordinator.send_signal(signal.SIGKILL)
        c.coordinator.wait()
        assert not (tmp_path / "out-replayed" / "_SUCCESS").exists(), "the job ended before the kill"
        c.coordinator = c.start_coordinator()
        stdout = c.finish()
        assert c.coordinator.returncode == 0, stdout[-3000:]
    finally:
        c.kill_all()
    out = c.out
    log = logged_events(out)
    assert {e["epoch_of_batch"] for e in log} == {1, 2}
    assert [e["epoch"] for e in log if e["event"] == "epoch"] == [1, 2]
    model = status_of(out)
    assert model["version"] == 1 and model["source"] == "event_log" and model["missing"] == []
    assert (model["kind"], model["state"], model["epoch"]) == ("probe_rows", "succeeded", 2)
    stages = {s["name"]: s for s in model["stages"]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert stages["map"]["done"] == stages["map"]["tasks"] == 9
    assert stages["map"]["units_done"] == stages["map"]["units_planned"] == manifest["totals"]["input_rows"]
    assert stages["reduce"]["done"] == stages["reduce"]["tasks"] == 4
    attempts = logged_attempts(log)
    bars = {(*t["task"].split("-"), t["attempt"]) for t in model["timeline"]}
    assert len(model["timeline"]) == len(attempts) == len(bars) and not model["running"]
    assert {(s, int(i), a) for s, i, a in bars} == attempts
    whats = [e["what"] for e in model["events"]]
    assert whats.index("job succeeded") < whats.index("coordinator epoch 2") < whats.index("coordinator epoch 1")
    assert [w["name"] for w in model["workers"]] == ["w1"]

    if CHROMIUM is not None:
        page = tmp_path / "after.html"
        run(["status", "--html", str(page), str(out)])
        dom = rendered(page.as_uri(), tmp_path)
        assert dom.count('class="attempt"') == len(attempts)
        assert dom.count('class="restart"') == 2, "both epochs marked on the timeline"
        assert 'data-stage="map"' in dom and 'data-stage="reduce"' in dom and 'data-worker="w1"' in dom
        assert 'id="job-state">succeeded' in dom and "read from the output's event log" in dom
        assert '<meta http-equiv="refresh"' not in dom, "a report does not refresh itself"

    # An earlier release's output: the same job, without an event log.
    earlier = tmp_path / "earlier"
    shutil.copytree(out, earlier)
    shutil.rmtree(earlier / "_job" / "events")
    model = status_of(earlier)
    assert (model["source"], model["state"], model["epoch"]) == ("journal", "succeeded", 2)
    assert len(model["missing"]) == 1 and "no event log" in model["missing"][0], model["missing"]
    assert [(s["name"], s["tasks"], s["done"], s["unit"]) for s in model["stages"]] == [
        ("map", 9, 9, "tasks"), ("reduce", 4, 4, "tasks")]
    assert model["timeline"] == [] and model["workers"] == []
    # The text status and verify are unchanged by the log (it is job state, not output).
    assert "finished" in run(["status", str(out)]).stdout
    run(["verify", str(out)])
    nothing = run(["status", "--json", str(tmp_path / "nothing")], check=False)
    assert nothing.returncode == 2 and "no job has started here" in nothing.stderr


FAULT_PROXY = Path(__file__).resolve().parents[1] / "cluster_bed" / "fault_proxy.py"


def samples(text: str, name: str) -> dict[str, float]:
    """The samples of metric `name` in exposition `text`: labels → value."""
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}(\{{[^}}]*\}})? (\S+)", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def test_store_requests_and_retries_are_counted_through_a_faulty_proxy(tmp_path, inputs, s3):
    """A local-mode job whose output is on the S3 server through fault_proxy.py, which
    answers every 7th request 503 SlowDown, 500 or resets it, in turn: the coordinator's
    /metrics counts exactly the faults the proxy injected, as throttled, server-error
    and transport-error answers and as retries by reason; every request by operation;
    promtool finds the exposition clean."""
    client, env = s3
    upstream = urllib.parse.urlsplit(env["AWS_ENDPOINT_URL"])
    proxy_port, http_port = free_port(), free_port()
    proxy_log = tmp_path / "proxy.log"
    with open(proxy_log, "w") as log:
        proxy = subprocess.Popen(
            [sys.executable, "-u", str(FAULT_PROXY), "127.0.0.1", str(proxy_port), upstream.hostname,
             str(upstream.port), "--every", "7"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "listening" in proxy_log.read_text(), timeout=30)
        name = f"stored-{uuid()}"
        spec = job_file(tmp_path, name, f"{inputs}/*.parquet", f"s3://{BUCKET}/{name}")
        job_env = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy_port}")
        out = open(tmp_path / "coordinator.log", "w")
        coordinator = subprocess.Popen([str(COORDINATOR), "run", str(spec), "--http", str(http_port),
                                        "--linger", "30"], env=job_env, stdout=out, stderr=out)
        base = f"http://127.0.0.1:{http_port}"
        try:
            wait_for(lambda: answers(f"{base}/api/v1/status")
                     and json.loads(get(f"{base}/api/v1/status")[1])["state"] in ("succeeded", "failed"),
                     timeout=240)
            assert json.loads(get(f"{base}/api/v1/status")[1])["state"] == "succeeded", \
                (tmp_path / "coordinator.log").read_text()[-3000:]
            time.sleep(2)  # the event log's last batch and the lock's release
            text = get(f"{base}/metrics")[1]
            lint_metrics("coordinator", http_port)
        finally:
            coordinator.kill()
            coordinator.wait()
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=10)
    faults = {kind: 0 for kind in ("slowdown", "error", "reset")}
    for line in proxy_log.read_text().splitlines():
        if line.startswith("fault "):
            faults[line.split()[1]] += 1
    assert faults["slowdown"] and faults["error"] and faults["reset"], faults
    requests = samples(text, "probeflow_store_requests_total")
    by_outcome: dict[str, float] = {}
    for labels, n in requests.items():
        outcome = re.search(r'outcome="([a-z_]+)"', labels).group(1)
        by_outcome[outcome] = by_outcome.get(outcome, 0) + n
    assert by_outcome.get("throttled") == faults["slowdown"], (by_outcome, faults)
    assert by_outcome.get("server_error") == faults["error"], (by_outcome, faults)
    assert by_outcome.get("transport_error") == faults["reset"], (by_outcome, faults)
    retries = samples(text, "probeflow_store_retries_total")
    assert retries == {'{reason="slow_down"}': faults["slowdown"], '{reason="server_error"}': faults["error"],
                       '{reason="reset"}': faults["reset"]}, retries
    ops = {re.search(r'op="([a-z_]+)"', labels).group(1) for labels in requests}
    assert {"put", "put_if_absent", "put_if_match", "get", "list", "delete"} <= ops, ops
    # Every request the proxy saw (its count at exit), counted once.
    seen = sum(requests.values())
    counts = dict(kv.split("=") for kv in proxy_log.read_text().splitlines()[-1].split()[1:])
    assert seen == int(counts["requests"]), (seen, counts)
    durations = samples(text, "probeflow_store_request_duration_seconds_count")
    assert sum(durations.values()) == seen
    # Every byte the output holds was sent (and some more: retried and removed objects).
    stored = sum(o["Size"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=name)
                 for o in page.get("Contents", []))
    written = samples(text, "probeflow_store_written_bytes_total")[""]
    assert stored > 0 and written >= stored, (written, stored)
    assert samples(text, "probeflow_store_read_bytes_total")[""] > 0


def uuid() -> str:
    return os.urandom(4).hex()
