"""Liveness an API outage cannot fake (issue #35), on the loopback fake API server with the real
backend, its Lease keeper and the real janitor running pass after pass in a thread:

* every API call fails for twice the Lease TTL, then recovers: the live run keeps every object and
  finishes; the dead run's lanes go with the first pass that can see the API, a run killed after the
  outage with the first pass that starts after its Lease ran out (TTL + lease grace + one period);
* the orchestrator notices a lost Service / NetworkPolicy / Lease and re-creates it, and stops the run
  loudly when its Lease is another's, or was removed after it could not renew it for a TTL.

Our own liveness rules (orchestrator/lanes/kubernetes/lease.py), Kubernetes Lease semantics; not an n8n file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.k8s_fake_api import FakeApiServer
from support.polling import eventually_async

from orchestrator.lanes.backend import BackendEvents, LaneError
from orchestrator.lanes.kubernetes import objects as k8s
from orchestrator.lanes.kubernetes.api import parse_time
from orchestrator.lanes.kubernetes.janitor import Janitor
from unit.lanes.kubernetes.test_k8s_contract import NS, lane_spec, make_backend

TTL = 2
GRACE = 2.0
PERIOD = 0.5
LIVE = {"POD_NAME": "orch-live", "POD_NAMESPACE": NS, "POD_UID": "bbbbbbbb-0000-4000-8000-000000000002"}
DEAD = {"POD_NAME": "orch-dead", "POD_NAMESPACE": NS, "POD_UID": "aaaaaaaa-0000-4000-8000-000000000001"}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        for env in (LIVE, DEAD):  # both owners Running: only the Leases tell the dead from the live
            srv.add("pods", NS, {"metadata": {"name": env["POD_NAME"], "uid": env["POD_UID"],
                                              "labels": {k8s.LABEL_NAME: k8s.ORCHESTRATOR_APP}},
                                 "status": {"phase": "Running"}})
        yield srv


def run_objects(server: FakeApiServer, run: str) -> set[str]:
    with server.state.cond:
        return {f"{r}/{n}" for (r, _, n), o in server.state.objects.items()
                if (o["metadata"].get("labels") or {}).get(k8s.LABEL_RUN_ID) == run}


@dataclass
class Pass:
    started: float  # time.time(), the janitor's clock
    saw_api: bool
    removed: set[str]
    alive: set[str]


@dataclass
class JanitorLoop:
    """The janitor CronJob, every ``PERIOD`` s: one pass after another until stopped."""

    server: FakeApiServer
    passes: list[Pass] = field(default_factory=list)
    crashed: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            started = time.time()
            janitor = Janitor(self.server.api_client(), NS, lease_grace_s=GRACE, retry_budget_s=0.3)
            try:
                report = janitor.run()
            except BaseException as exc:  # a pass never raises: the test says so rather than waiting
                self.crashed.append(exc)
                return
            self.passes.append(Pass(started, not report.failures, {r for r in report.dead_runs},
                                    {v.run for v in report.verdicts if v.alive}))
            self.stop.wait(PERIOD)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def lease_expiry(server: FakeApiServer, run: str) -> float:
    lease = server.get("leases", NS, k8s.lease_name(run))
    assert lease is not None
    renewed = parse_time(lease["spec"]["renewTime"].replace(".000000", ""))
    assert renewed is not None
    return renewed + TTL


async def until(predicate, what: str, timeout_s: float = 60.0) -> None:
    await eventually_async(predicate, timeout=timeout_s, what=what)


async def test_an_outage_of_twice_the_ttl_never_kills_the_live_run_and_the_dead_run_still_goes(
        server: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    live = make_backend(server, tmp_path, environ=LIVE, run_id="run-live", lease_ttl_s=TTL)
    lanes = [await live.start_lane(i, lane_spec()) for i in range(2)]
    for lane in lanes:
        await live.wait_ready(lane, 10)
    dead = make_backend(server, tmp_path, environ=DEAD, run_id="run-dead", lease_ttl_s=TTL)
    await dead.start_lane(0, lane_spec())
    await dead.close()  # really gone (SIGKILL): its Lease is no longer renewed
    live_objects = run_objects(server, "run-live")
    assert len(live_objects) == 2 + 4
    janitor = JanitorLoop(server)
    try:
        server.outage(2 * TTL)  # every API call fails for twice the Lease TTL
        recovered = time.time() + 2 * TTL
        await until(lambda: not run_objects(server, "run-dead"), "the dead run removed")
        # the live run kept every object, its Lease renewed again by its own holder
        assert run_objects(server, "run-live") == live_objects
        await until(lambda: (live.keeper is not None and live.keeper.failing_since is None
                             and lease_expiry(server, "run-live") > recovered), "the live Lease renewed")
        # a run whose orchestrator dies now goes with the first pass that starts after its Lease ran out
        late = make_backend(server, tmp_path, environ=DEAD, run_id="run-late", lease_ttl_s=TTL)
        await late.start_lane(0, lane_spec())
        await late.close()
        late_expiry = lease_expiry(server, "run-late")
        await until(lambda: not run_objects(server, "run-late"), "the late run removed")
    finally:
        janitor.close()
    assert janitor.crashed == [] and server.state.outage_answers > 0
    passes = janitor.passes
    assert any(not p.saw_api for p in passes), "no pass ran during the outage"
    # the dead run went with the first pass that could see the API, and nothing of the live run ever did
    first_seeing = next(p for p in passes if p.saw_api and p.started >= recovered - 1)
    assert "run-dead" in first_seeing.removed and "run-live" in first_seeing.alive
    assert not any("run-live" in p.removed for p in passes)
    # the pass that removed it began at the latest with the first pass after its Lease ran out (the one
    # under way then may see it expired too): TTL + lease grace + one period after its holder died
    removing = next(p for p in passes if "run-late" in p.removed)
    later = [p.started for p in passes if p.started >= late_expiry]
    assert not later or removing.started <= later[0]
    # the live run finishes: healthy lanes, then its own teardown leaves nothing
    for lane in lanes:
        await until(lambda lane=lane: server.get("pods", NS, lane.handle) is not None, "lane kept")
        assert await live.health(lane)
        await live.teardown(lane)
    await live.close()
    assert run_objects(server, "run-live") == set() and live.ledger.open_entries() == []
    assert live.keeper is not None and live.keeper.lost is None
    # its renewal warnings are one line each: the API's message, never the response headers
    renewals = [r.getMessage() for r in caplog.records if "renew Lease" in r.getMessage()]
    assert renewals and all("HTTP 503" in m and "headers" not in m.lower() and "\n" not in m for m in renewals)


class Events(BackendEvents):
    def __init__(self) -> None:
        self.restored_kinds: list[str] = []
        self.fatal_errors: list[LaneError] = []

    def restored(self, kind: str, name: str) -> None:
        self.restored_kinds.append(kind)

    def fatal(self, error: LaneError) -> None:
        self.fatal_errors.append(error)


async def test_a_lost_service_policy_or_lease_is_re_created(server: FakeApiServer, tmp_path: Path) -> None:
    backend = make_backend(server, tmp_path, environ=LIVE, run_id="run-live", lease_ttl_s=TTL)
    backend.events = events = Events()
    lane = await backend.start_lane(0, lane_spec())
    before = run_objects(server, "run-live")
    server.delete("services", NS, k8s.run_service_name("run-live"))  # e.g. a too eager clean-up by hand
    server.delete("networkpolicies", NS, k8s.network_policy_name("run-live"))
    await until(lambda: run_objects(server, "run-live") == before, "Service and NetworkPolicy back")
    server.delete("leases", NS, k8s.lease_name("run-live"))
    await until(lambda: server.get("leases", NS, k8s.lease_name("run-live")) is not None, "Lease back")
    lease = server.get("leases", NS, k8s.lease_name("run-live"))
    assert lease is not None and lease["spec"]["holderIdentity"] == backend.holder
    assert sorted(events.restored_kinds) == ["Lease", "NetworkPolicy", "Service"] and events.fatal_errors == []
    await backend.teardown(lane)  # the re-created objects are this process's own: they go with the run
    await backend.close()
    assert run_objects(server, "run-live") == set()


async def test_a_lease_another_process_holds_stops_the_run_and_touches_nothing(server: FakeApiServer,
                                                                              tmp_path: Path) -> None:
    backend = make_backend(server, tmp_path, environ=LIVE, run_id="run-live", lease_ttl_s=TTL)
    backend.events = events = Events()
    await backend.start_lane(0, lane_spec())
    server.update("leases", NS, k8s.lease_name("run-live"), {"spec": {"holderIdentity": "orch-new-1234"}}, merge=True)
    before = run_objects(server, "run-live")
    await until(lambda: bool(events.fatal_errors), "the run stopped")
    (error,) = events.fatal_errors
    assert "is now held by orch-new-1234: another orchestrator took the run over" in str(error)
    assert run_objects(server, "run-live") == before  # nothing re-created, nothing deleted
    await backend.close()


async def test_a_lease_removed_after_the_holder_could_not_renew_for_a_ttl_stops_the_run(
        server: FakeApiServer, tmp_path: Path) -> None:
    """Removed while this process could not renew it (an outage only it saw): another may have judged
    the run dead and be taking it over, so the run stops instead of re-creating anything."""
    backend = make_backend(server, tmp_path, environ=LIVE, run_id="run-live", lease_ttl_s=TTL)
    backend.events = events = Events()
    await backend.start_lane(0, lane_spec())
    server.outage(1.5 * TTL)
    with server.state.cond:  # meanwhile, inside the cluster: the Lease goes
        server.state.objects.pop(("leases", NS, k8s.lease_name("run-live")))
    await until(lambda: bool(events.fatal_errors), "the run stopped")
    assert "could not renew it for" in str(events.fatal_errors[0]) and events.restored_kinds == []
    assert server.get("leases", NS, k8s.lease_name("run-live")) is None
    await backend.close()


async def test_the_run_stops_loudly_on_a_fatal_backend_event(tmp_path: Path) -> None:
    """The pipeline's side: an ``error:`` line (exit 1), the metric, the stop reason."""
    from orchestrator.run.config import RunConfig
    from orchestrator.run.pipeline import Run, _BackendEvents
    from orchestrator.run.resolve import resolve

    run = Run(resolve(RunConfig(state_dir=tmp_path / "state")))
    events = _BackendEvents(run)
    events.restored("Service", "n8n-lanes-x")
    events.fatal(LaneError("kubernetes: run x: its Lease is now held by y"))
    assert run.errors == ["kubernetes: run x: its Lease is now held by y"]
    assert run.stop_reason == "lane backend: kubernetes: run x: its Lease is now held by y"
    sample = run.metrics.registry.get_sample_value
    assert sample("n8n_eval_run_stopped_total", {"reason": "lane_backend"}) == 1
    assert sample("n8n_eval_lane_objects_restored_total", {"kind": "Service"}) == 1


async def test_every_lane_pod_gets_what_is_left_of_the_runs_deadline(server: FakeApiServer, tmp_path: Path) -> None:
    """The kubelet's own backstop: ``activeDeadlineSeconds`` = the run's deadline left + the margin."""
    backend = make_backend(server, tmp_path, environ=LIVE, run_id="run-live", deadline_s=3600)
    lane = await backend.start_lane(0, lane_spec())
    pod = server.get("pods", NS, lane.handle)
    assert pod is not None
    assert 3600 + k8s.LANE_DEADLINE_MARGIN_S - 60 <= pod["spec"]["activeDeadlineSeconds"] <= 3600 + k8s.LANE_DEADLINE_MARGIN_S
    await backend.teardown(lane)
    await backend.close()
