"""The janitor on the loopback fake API server: dead runs' lanes go, live runs' lanes never do.

Two in-cluster runs share a namespace, each owned by its orchestrator Pod (as the Helm chart sets
it up). The real backend starts their lanes; then the fake kubelet kills one orchestrator (phase
Failed, OOMKilled) and the janitor — the real :class:`Janitor` through the real ``kubernetes`` client
— must delete exactly that run's objects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.k8s_fake_api import FakeApiServer
from support.polling import eventually_async
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.lanes.kubernetes import objects as k8s
from orchestrator.lanes.kubernetes.janitor import Janitor
from unit.lanes.kubernetes.test_k8s_contract import NS, lane_spec, make_backend

DEAD = {"POD_NAME": "orch-dead", "POD_NAMESPACE": NS, "POD_UID": "aaaaaaaa-0000-4000-8000-000000000001"}
LIVE = {"POD_NAME": "orch-live", "POD_NAMESPACE": NS, "POD_UID": "bbbbbbbb-0000-4000-8000-000000000002"}
#: Well after the fake kubelet's finishedAt (2026-12-02T00:00:10Z), within the runs' Leases (renewed at
#: the real time, TTL 60 s).
NOW = time.time() + 30


class Clock:
    """The janitor's clock: ``sleep`` moves it on at once (a pass's watch of a Lease takes no real time)."""

    def __init__(self, start: float) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        yield srv


def orchestrator_pod(server: FakeApiServer, env: dict[str, str]) -> None:
    server.add("pods", NS, {"metadata": {"name": env["POD_NAME"], "uid": env["POD_UID"],
                                         "labels": {"app.kubernetes.io/name": "n8n-eval-orchestrator"}},
                            "status": {"phase": "Running"}})


async def two_runs(server: FakeApiServer, tmp_path: Path, lanes: int = 2) -> None:
    for run_id, env in (("run-dead", DEAD), ("run-live", LIVE)):
        orchestrator_pod(server, env)
        backend = make_backend(server, tmp_path, environ=env, run_id=run_id)
        for i in range(lanes):
            await backend.start_lane(i, lane_spec())
        await backend.close()  # the process "dies" without teardown


def run_objects(server: FakeApiServer, run: str) -> set[str]:
    with server.state.cond:
        return {f"{r}/{name}" for (r, _, name), o in server.state.objects.items()
                if (o["metadata"].get("labels") or {}).get(k8s.LABEL_RUN_ID) == run}


async def test_oom_killed_orchestrator_its_lanes_go_a_live_runs_stay(server, tmp_path) -> None:
    await two_runs(server, tmp_path)
    live_before = run_objects(server, "run-live")
    assert len(live_before) == 2 + 4  # 2 pods + the run's Service, policy, secret, lease
    server.set_pod("orch-dead", "OOMKilled")  # phase Failed; the pod object stays (restartPolicy Never)
    # the cluster's GC does nothing for an ended owner
    assert len(run_objects(server, "run-dead")) == 6

    report = Janitor(server.api_client(), NS, grace_s=300, now=lambda: NOW).run()
    verdicts = {v.run: v for v in report.verdicts}
    assert not verdicts["run-dead"].alive and "OOMKilled" in verdicts["run-dead"].why
    assert verdicts["run-live"].alive and "alive" in verdicts["run-live"].why
    assert run_objects(server, "run-dead") == set()
    assert run_objects(server, "run-live") == live_before
    assert sorted(report.removed) == sorted([
        f"pod/{NS}/n8n-lane-run-dead-0-0", f"pod/{NS}/n8n-lane-run-dead-1-0",
        f"service/{NS}/n8n-lanes-run-dead",
        f"networkpolicy/{NS}/n8n-lanes-run-dead", f"lease/{NS}/n8n-lanes-run-dead", f"secret/{NS}/n8n-lanes-run-dead-env"])
    assert report.failures == []
    # the orchestrator pods themselves are not the janitor's business
    assert {"orch-dead", "orch-live"} <= server.names("pods")


async def test_within_the_grace_period_nothing_goes(server, tmp_path) -> None:
    await two_runs(server, tmp_path, lanes=1)
    server.set_pod("orch-dead", "Evicted")
    finished = 1796169610.0  # 2026-12-02T00:00:10Z
    report = Janitor(server.api_client(), NS, grace_s=600, now=lambda: finished + 60).run()
    assert report.dead_runs == [] and report.removed == []
    assert "grace 600 s" in {v.run: v for v in report.verdicts}["run-dead"].why
    report = Janitor(server.api_client(), NS, grace_s=600, now=lambda: finished + 601).run()
    assert report.dead_runs == ["run-dead"]


async def test_owner_gone_or_replaced_is_dead_ownerless_runs_are_left_alone(server, tmp_path) -> None:
    await two_runs(server, tmp_path, lanes=1)
    # replaced: a new pod under the same name (another uid)
    server.state.objects.pop(("pods", NS, "orch-dead"))
    orchestrator_pod(server, {**DEAD, "POD_UID": "cccccccc-0000-4000-8000-000000000003"})
    laptop = make_backend(server, tmp_path, environ={}, run_id="run-laptop")  # no owner in the cluster
    await laptop.start_lane(0, lane_spec())
    await laptop.close()
    report = Janitor(server.api_client(), NS, now=lambda: NOW).run()
    verdicts = {v.run: v for v in report.verdicts}
    assert "replaced" in verdicts["run-dead"].why and not verdicts["run-dead"].alive
    assert verdicts["run-laptop"].alive and "no owner" in verdicts["run-laptop"].why
    assert run_objects(server, "run-laptop") and run_objects(server, "run-live") and not run_objects(server, "run-dead")
    # asked for by id, an ownerless run goes once its Lease ran out (a workstation run still renewing
    # it is alive); a run whose owner is alive never does, even when named
    report = Janitor(server.api_client(), NS, now=lambda: NOW).run("run-laptop", force=True)
    assert report.verdicts[0].alive and "lease held" in report.verdicts[0].why and run_objects(server, "run-laptop")
    clock = Clock(time.time() + 120)  # past the laptop's Lease (TTL 60 s, renewed just now): a minute watched on the janitor's clock
    Janitor(server.api_client(), NS, now=clock.now, sleep=clock.sleep).run("run-laptop", force=True)
    assert not run_objects(server, "run-laptop")
    report = Janitor(server.api_client(), NS, now=lambda: NOW).run("run-live", force=True)
    assert report.verdicts[0].alive and run_objects(server, "run-live")


async def test_job_owner_and_dry_run_and_429s(server, tmp_path) -> None:
    job = {"JOB_NAME": "nightly-1", "JOB_UID": "dddddddd-0000-4000-8000-000000000004", "POD_NAMESPACE": NS}
    server.add("jobs", NS, {"metadata": {"name": "nightly-1", "uid": job["JOB_UID"]},
                            "status": {"conditions": [{"type": "Failed", "status": "True",
                                                       "lastTransitionTime": "2026-12-02T00:00:10Z"}]}})
    backend = make_backend(server, tmp_path, environ=job, run_id="run-job", owner_kind="job")
    await backend.start_lane(0, lane_spec())
    await backend.close()
    before = run_objects(server, "run-job")
    report = Janitor(server.api_client(), NS, now=lambda: NOW).run(dry_run=True)
    assert report.dead_runs == ["run-job"] and "condition Failed" in report.verdicts[0].why
    assert run_objects(server, "run-job") == before  # dry run
    server.throttle(4, retry_after="0")
    Janitor(server.api_client(), NS, now=lambda: NOW).run()
    assert server.state.throttled == 4 and not run_objects(server, "run-job")


def test_cleanup_cli_kubernetes_runs_the_janitor_and_plain_cleanup_never_touches_kubernetes(
        server, tmp_path, monkeypatch) -> None:
    asyncio.run(two_runs(server, tmp_path, lanes=1))
    server.set_pod("orch-dead", "OOMKilled")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server.url}'}}}}]\n"
        f"contexts: [{{name: fake, context: {{cluster: fake, user: u, namespace: {NS}}}}}]\n"
        "users: [{name: u, user: {token: not-a-real-token}}]\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    # the client reads KUBECONFIG once, at import
    monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    runner = CliRunner()
    state = tmp_path / "state"
    server.settle()  # the closed backends' watches have sent their last request
    before = len(server.api_calls())
    plain = runner.invoke(app, ["cleanup", "--state-dir", str(state)])
    assert plain.exit_code == 0, plain.output
    assert len(server.api_calls()) == before  # not one request to the cluster
    result = runner.invoke(app, ["cleanup", "--kubernetes", "--state-dir", str(state), "--grace-seconds", "0"])
    assert result.exit_code == 0, result.output
    assert "run-dead: dead" in result.output and "run-live: alive" in result.output
    assert not run_objects(server, "run-dead") and run_objects(server, "run-live")


async def test_one_forbidden_owner_read_does_not_stop_the_pass(server, tmp_path) -> None:
    """A 403 on one run's owner (a Job the janitor may not read) is one failure, counted in the metric;
    the pass goes on and removes the other dead run's lanes. That run has no Lease (an orchestrator
    from before leases), so its owner alone decides, and an unreadable owner leaves it alone."""
    job = {"JOB_NAME": "nightly-1", "JOB_UID": "dddddddd-0000-4000-8000-000000000004", "POD_NAMESPACE": NS}
    server.add("jobs", NS, {"metadata": {"name": "nightly-1", "uid": job["JOB_UID"]}, "status": {}})
    backend = make_backend(server, tmp_path, environ=job, run_id="run-job", owner_kind="job")
    await backend.start_lane(0, lane_spec())
    await backend.close()
    server.delete("leases", NS, "n8n-lanes-run-job")
    await two_runs(server, tmp_path, lanes=1)
    server.set_pod("orch-dead", "OOMKilled")
    server.state.failures[("GET", "jobs")] = 403
    janitor = Janitor(server.api_client(), NS, now=lambda: NOW)
    report = janitor.run()
    assert [f for f in report.failures if "run run-job" in f and "HTTP 403" in f] == report.failures
    assert len(report.failures) == 1
    assert janitor.registry.get_sample_value("n8n_eval_janitor_errors_total", {"step": "owner"}) == 1
    assert not run_objects(server, "run-dead")  # the pass went on past the 403
    assert run_objects(server, "run-job") and run_objects(server, "run-live")


async def test_an_expired_lease_removes_a_live_looking_runs_lanes(server, tmp_path) -> None:
    """A hung orchestrator: its Pod is Running (the owner looks alive) but it stopped renewing its
    Lease. While it renews, its lanes stay; once the janitor saw the Lease expired and unrenewed for
    its lease grace (at least the TTL), they go."""
    orchestrator_pod(server, LIVE)
    backend = make_backend(server, tmp_path, environ=LIVE, run_id="run-hung", lease_ttl_s=2)
    await backend.start_lane(0, lane_spec())
    lease = server.get("leases", NS, "n8n-lanes-run-hung")
    assert lease is not None and lease["spec"]["leaseDurationSeconds"] == 2
    renewed = lease["spec"]["renewTime"]
    await eventually_async(lambda: server.get("leases", NS, "n8n-lanes-run-hung")["spec"]["renewTime"] != renewed,
                           timeout=30, interval=0.1, what="the Lease renewed (every TTL/3)")
    janitor = Janitor(server.api_client(), NS, lease_grace_s=1)
    assert (await asyncio.to_thread(janitor.run)).dead_runs == []
    await backend.close()  # the loop "hangs": no more renewals; the Pod still runs

    async def pass_finding_a_dead_run() -> Any:
        report = await asyncio.to_thread(janitor.run)
        return report if report.dead_runs else None

    report = await eventually_async(pass_finding_a_dead_run, timeout=60, interval=0.2, what="a janitor pass finds run-hung dead")
    verdict = report.verdicts[0]
    assert not verdict.alive and verdict.why.startswith("lease expired") and "not renewed while watched" in verdict.why
    assert not run_objects(server, "run-hung")
    assert "orch-live" in server.names("pods")


async def test_the_pass_survives_5xx_and_a_failed_delete(server, tmp_path) -> None:
    """5xx answers are retried; a delete that keeps failing is one failure and the rest still goes."""
    await two_runs(server, tmp_path, lanes=2)
    server.set_pod("orch-dead", "OOMKilled")
    server.state.failures[("DELETE", "services")] = 403
    server.fail_next(3, 503)
    janitor = Janitor(server.api_client(), NS, now=lambda: NOW, retry_budget_s=10)
    report = janitor.run()
    retries = janitor.registry.get_sample_value("n8n_eval_janitor_retries_total")
    assert server.state.errors_sent == 3 and retries is not None and retries >= 3
    assert {f.split(":")[0] for f in report.failures} == {f"delete service {NS}/n8n-lanes-run-dead"}
    assert run_objects(server, "run-dead") == {"services/n8n-lanes-run-dead"}


async def test_an_ownerless_run_without_a_lease_goes_after_the_grace(server, tmp_path) -> None:
    """No owner in the cluster and no Lease (every orchestrator creates its Lease first and deletes it
    last: its orchestrator is gone): left alone within ``grace_s`` of its newest object, removed after."""
    laptop = make_backend(server, tmp_path, environ={}, run_id="run-orphan")
    await laptop.start_lane(0, lane_spec())
    await laptop.close()
    server.delete("leases", NS, "n8n-lanes-run-orphan")
    now = time.time()
    report = Janitor(server.api_client(), NS, grace_s=300, now=lambda: now + 60).run()
    assert report.dead_runs == [] and "no Lease" in report.verdicts[0].why and run_objects(server, "run-orphan")
    report = Janitor(server.api_client(), NS, grace_s=300, now=lambda: now + 301).run()
    assert report.dead_runs == ["run-orphan"] and "no owner and no Lease" in report.verdicts[0].why
    assert not run_objects(server, "run-orphan")


@pytest.mark.parametrize("kind", ["leases", "pods"])
async def test_a_pass_that_cannot_list_every_kind_removes_nothing(server, tmp_path, kind: str) -> None:
    """Without the Leases no run's liveness is known; without the pods a dead run would be half
    removed, its pods left with no Lease and an owner that may look alive: nothing goes on a partial view."""
    await two_runs(server, tmp_path, lanes=1)
    server.set_pod("orch-dead", "OOMKilled")
    server.state.failures[("GET", kind)] = 403
    report = Janitor(server.api_client(), NS, now=lambda: NOW).run()
    assert report.verdicts == [] and report.removed == [] and any(f"list {kind}" in f for f in report.failures)
    assert len(run_objects(server, "run-dead")) == 5
    del server.state.failures[("GET", kind)]
    assert Janitor(server.api_client(), NS, now=lambda: NOW).run().dead_runs == ["run-dead"]
    assert not run_objects(server, "run-dead")
