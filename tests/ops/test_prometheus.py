"""The shipped alerting rules against a real Prometheus server, in the outages they are for.

A Prometheus server (Debian's ``prometheus``) scrapes a real ``rsched-scheduler`` and
``rsched-worker`` every second, with ``docs/prometheus/rsched-rules.yml`` loaded unchanged and
evaluated every second; the test then causes each outage and waits for the alerts it must
raise (pending is enough where a rule has a ``for``: the expression holds), and checks that
``RschedLeaderFlapping`` never becomes active on the way. promtool's unit tests of the same
rules run in ``make check-rules``.

Without the ``prometheus`` binary the test is skipped, unless RSCHED_REQUIRE_PROMETHEUS=1 (set
by .ci/run), which makes the skip a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import rsched
from rsched._devtools.embedded import free_port
from tests.support.paths import DOCS
from tests.support.processes import Proc
from tests.support.servers import Server, env_kinds
from tests.support.worker_app import fast_env

RULES = DOCS / "prometheus" / "rsched-rules.yml"
PROMETHEUS = shutil.which("prometheus")
if PROMETHEUS is None:
    if os.environ.get("RSCHED_REQUIRE_PROMETHEUS") == "1":
        raise RuntimeError("the prometheus binary is required (RSCHED_REQUIRE_PROMETHEUS=1)")
    pytest.skip(
        "prometheus is not installed (Debian: apt install prometheus)", allow_module_level=True
    )

pytestmark = pytest.mark.slow

#: A bound for each outage to show, generous for a loaded 2-core machine: a scrape and an
#: evaluation each second, the processes' gauges every half second.
ALERT_WITHIN_S = 90.0


@dataclass
class Prometheus:
    """A private Prometheus server on a free loopback port."""

    url: str
    proc: subprocess.Popen[bytes]

    def alerts(self) -> dict[str, str]:
        """Active alerts: name -> state (pending or firing)."""
        reply = httpx.get(f"{self.url}/api/v1/alerts", timeout=5).json()
        return {a["labels"]["alertname"]: a["state"] for a in reply["data"]["alerts"]}

    def value(self, query: str) -> float | None:
        reply = httpx.get(f"{self.url}/api/v1/query", params={"query": query}, timeout=5).json()
        result = reply["data"]["result"]
        return float(result[0]["value"][1]) if result else None


@pytest.fixture
def prometheus() -> Iterator[Callable[[int, int], Prometheus]]:
    started: list[tuple[Prometheus, Path]] = []

    def start(scheduler_port: int, worker_port: int) -> Prometheus:
        home = Path(tempfile.mkdtemp(prefix="rsched-prometheus-"))
        config = home / "prometheus.yml"
        # The job names are the ones docs/monitoring.md gives (RschedTargetDown reads them).
        config.write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
            f"rule_files: [{RULES}]\n"
            "scrape_configs:\n"
            "  - job_name: rsched-scheduler\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{scheduler_port}']}}]\n"
            "  - job_name: rsched-worker\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{worker_port}']}}]\n"
        )
        port = free_port()
        log = (home / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={home / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        prom = Prometheus(f"http://127.0.0.1:{port}", proc)
        started.append((prom, home))
        wait_for(lambda: _ready(prom), "Prometheus ready", home / "prometheus.log")
        return prom

    yield start
    for prom, home in started:
        prom.proc.terminate()
        try:
            prom.proc.wait(10)
        except subprocess.TimeoutExpired:
            prom.proc.kill()
            prom.proc.wait(5)
        shutil.rmtree(home, ignore_errors=True)


def _ready(prom: Prometheus) -> bool:
    try:
        return httpx.get(f"{prom.url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(
    check: Callable[[], Any],
    what: str,
    log: Path | None = None,
    every: Callable[[], None] = lambda: None,
) -> Any:
    deadline = time.monotonic() + ALERT_WITHIN_S
    while True:
        every()
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(f"{what}: not seen within {ALERT_WITHIN_S:g} s\n{tail}")
        time.sleep(0.25)


def test_the_rules_in_real_outages(
    prometheus: Callable[[int, int], Prometheus], spawn: Callable[..., Proc]
) -> None:
    server = Server(env_kinds()[0]).start()
    try:
        _outages(server, prometheus, spawn)
    finally:
        server.close()


def _outages(
    server: Server, prometheus: Callable[[int, int], Prometheus], spawn: Callable[..., Proc]
) -> None:
    settings = rsched.Settings(redis_url=server.url, prefix="prom")
    env = fast_env(
        settings,
        RSCHED_METRICS_INTERVAL_S="0.5",
        RSCHED_METRICS_LATE_AFTER_S="2",
        RSCHED_SCHEDULER__LEASE_TTL_MS="2000",
        RSCHED_SCHEDULER__LEASE_RENEW_MS="400",
        RSCHED_LOG_LEVEL="warning",
    )
    sched_port, worker_port = free_port(), free_port()

    def scheduler() -> Proc:
        return spawn("rsched._cli.scheduler_process", "--metrics-port", str(sched_port), env=env)

    sched = scheduler()
    worker = spawn(
        "rsched._cli.worker_process",
        "tests.support.worker_app:worker",
        "--metrics-port",
        str(worker_port),
        env=env,
    )
    with rsched.SyncClient(server.url, "prom") as client:
        # Due every second; a late run stands for what it missed (run_once, the default).
        client.add(rsched.Schedule(id="tick", task="app.noop", every=1, misfire_grace_s=1))
    prom = prometheus(sched_port, worker_port)

    def never_flapping() -> None:
        assert "RschedLeaderFlapping" not in prom.alerts(), prom.alerts()

    def active(*names: str, state: str | None = None) -> bool:
        alerts = prom.alerts()
        return all(n in alerts and (state is None or alerts[n] == state) for n in names)

    # Healthy: a leader, Redis reachable from both processes, no alert of an outage.
    wait_for(lambda: prom.value("sum(rsched_is_leader)") == 1, "a leader")
    wait_for(lambda: prom.value("min(rsched_redis_up)") == 1, "Redis up in both processes")
    wait_for(lambda: prom.value("sum(rsched_jobs_total{outcome='completed'})"), "jobs run")
    outage = {"RschedNoLeader", "RschedSchedulesLate", "RschedNoWorkers", "RschedTargetDown"}
    wait_for(lambda: not set(prom.alerts()) & outage, "no alert of an outage")

    # The scheduler dies: no leader, the schedules fall late (seen through the worker's
    # gauges), its target is down; the leader's death alone is no flapping.
    sched.proc.kill()
    sched.wait()
    wait_for(
        lambda: active("RschedNoLeader", "RschedSchedulesLate", "RschedTargetDown"),
        "RschedNoLeader, RschedSchedulesLate and RschedTargetDown after the scheduler's death",
        every=never_flapping,
    )

    # It comes back: the occurrences it missed are counted, one by one.
    sched = scheduler()
    wait_for(
        lambda: active("RschedMissedRuns", state="firing"),
        "RschedMissedRuns once the scheduler is back",
        every=never_flapping,
    )
    missed = prom.value("sum(rsched_misfires_total)")  # per occurrence, not per schedule
    assert missed is not None
    assert missed > 1
    wait_for(lambda: not active("RschedNoLeader"), "RschedNoLeader resolved", every=never_flapping)

    # Every worker stops while jobs wait: nothing reads the queue.
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    wait_for(lambda: active("RschedNoWorkers"), "RschedNoWorkers", every=never_flapping)

    # Redis stops: the processes that remain say they cannot reach it.
    server.stop()
    wait_for(lambda: active("RschedRedisUnreachable"), "RschedRedisUnreachable")
