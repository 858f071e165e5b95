"""The chart's RBAC covers every path the code takes: the Roles and RoleBindings of a real Helm render
are enforced by the fake API server (tests/support/k8s_fake_rbac.py), and the real backend and janitor, each
with its own ServiceAccount's token and the chart's env, run a normal run, a takeover of a killed
orchestrator's run (``--resume-existing``), Lease renewals and a janitor pass: not one request may be
refused, and no lane object may be left. A call without a rule fails here (the last test shows it).
Kubernetes RBAC semantics, the chart's own Roles; not an n8n rule.
"""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from repo.test_helm_chart import AB_VALUES, RELEASE, container, cron, one, render
from support.k8s_fake_api import FakeApiServer
from support.k8s_fake_rbac import authorizer
from support.polling import eventually_async

from orchestrator.lanes.backend import LaneError
from orchestrator.lanes.kubernetes import objects as k8s
from orchestrator.lanes.kubernetes.backend import KubernetesBackend
from orchestrator.lanes.kubernetes.janitor import Janitor
from orchestrator.ledger import Ledger
from unit.lanes.kubernetes.test_k8s_contract import NS, lane_spec

ORCHESTRATOR_TOKEN, JANITOR_TOKEN = "token-orchestrator", "token-janitor"
TOKENS = {ORCHESTRATOR_TOKEN: f"{NS}/{RELEASE}", JANITOR_TOKEN: f"{NS}/{RELEASE}-janitor"}
JOB = {"JOB_NAME": "n8n-eval-orchestrator-ab-1", "JOB_UID": "dddddddd-0000-4000-8000-00000000000d"}


def chart_env(template: dict[str, Any], pod: str, uid: str) -> dict[str, str]:
    """The orchestrator container's env as the chart sets it, the downward API filled in."""
    env = {e["name"]: e["value"] for e in container(template)["env"] if "value" in e}
    return {**env, "POD_NAME": pod, "POD_NAMESPACE": NS, "POD_UID": uid, **JOB}


def lane_objects(server: FakeApiServer) -> set[str]:
    with server.state.cond:
        return {f"{r}/{n}" for (r, _, n), o in server.state.objects.items()
                if (o["metadata"].get("labels") or {}).get(k8s.LABEL_NAME) == k8s.LANE_APP}


def backend(server: FakeApiServer, tmp_path: Path, env: dict[str, str], run_id: str, **options: Any) -> KubernetesBackend:
    return KubernetesBackend(run_id, Ledger.for_run(run_id, tmp_path), tmp_path,
                             api_client=server.api_client(ORCHESTRATOR_TOKEN), environ=env,
                             url_template=server.url + "/lanes/{pod}", **options)


def owners(server: FakeApiServer, *pods: tuple[str, str]) -> None:
    server.add("jobs", NS, {"metadata": {"name": JOB["JOB_NAME"], "uid": JOB["JOB_UID"]}, "status": {}})
    for name, uid in pods:
        server.add("pods", NS, {"metadata": {"name": name, "uid": uid, "labels": {k8s.LABEL_NAME: k8s.ORCHESTRATOR_APP}},
                                "status": {"phase": "Running"}})


async def killed_then_taken_over(server: FakeApiServer, tmp_path: Path, template: dict[str, Any]) -> None:
    """A run of two lanes whose orchestrator is killed mid-run; a replacement orchestrator (same run
    id, same state, ``takeover``) removes what it left, runs its own lanes, renews the Lease, reads a
    lane's log and tears down."""
    old = chart_env(template, "orch-old", "aaaaaaaa-0000-4000-8000-00000000000a")
    new = chart_env(template, "orch-new", "bbbbbbbb-0000-4000-8000-00000000000b")
    first = backend(server, tmp_path, old, "nightly-7", lease_ttl_s=1)
    for lane in [await first.start_lane(i, lane_spec(secret=False)) for i in range(2)]:
        await first.wait_ready(lane, 10)
    await first.close()  # SIGKILL: no teardown, its Lease stops being renewed
    second = backend(server, tmp_path, new, "nightly-7", lease_ttl_s=1, takeover=True)
    try:
        lanes = [await second.start_lane(i, lane_spec(secret=False)) for i in range(2)]
        for lane in lanes:
            await second.wait_ready(lane, 10)
            assert await second.health(lane)
        assert second.keeper is not None
        keeper, renewed_at = second.keeper, second.keeper.renewed_at
        # a renewal: read, patch, Service and policy read
        await eventually_async(lambda: keeper.renewed_at != renewed_at, timeout=30, what="the Lease renewed")
        assert "Editor is now accessible" in await second.logs(lanes[0])
        for lane in lanes:
            await second.teardown(lane)
    finally:
        await second.close()


async def a_hung_run_the_janitor_removes(server: FakeApiServer, tmp_path: Path, template: dict[str, Any]) -> None:
    hung = backend(server, tmp_path, chart_env(template, "orch-new", "bbbbbbbb-0000-4000-8000-00000000000b"),
                   "nightly-hung", lease_ttl_s=1)
    await hung.start_lane(0, lane_spec(secret=False))
    await hung.close()  # its owner still runs; its Lease runs out
    janitor = Janitor(server.api_client(JANITOR_TOKEN), NS, release=RELEASE, lease_grace_s=1, delete_secrets=False)
    deadline = time.monotonic() + 30
    while lane_objects(server):
        assert time.monotonic() < deadline, lane_objects(server)
        report = await asyncio.to_thread(janitor.run)
        assert report.failures == []


@pytest.mark.parametrize("which", ["nightly", "ab"])
async def test_every_path_runs_under_the_charts_roles(which: str, tmp_path: Path) -> None:
    docs = render(AB_VALUES if which == "ab" else None)
    template = (one(docs, "Job")["spec"]["template"] if which == "ab"
                else cron(docs)["spec"]["jobTemplate"]["spec"]["template"])
    with FakeApiServer() as server:
        server.state.authorizer = authorizer(docs, TOKENS)
        owners(server, ("orch-old", "aaaaaaaa-0000-4000-8000-00000000000a"),
               ("orch-new", "bbbbbbbb-0000-4000-8000-00000000000b"))
        await killed_then_taken_over(server, tmp_path, template)
        await a_hung_run_the_janitor_removes(server, tmp_path, template)
        server.settle()
        assert server.state.denied == []
        assert lane_objects(server) == set()
        assert len(server.api_calls()) > 20
        # the enforcement is real: a request without a token is refused, worded as the API server does
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(server.api_client()).list_namespaced_pod(NS)
        assert refused.value.status == 403
        assert 'User "system:anonymous" cannot list resource "pods"' in server.state.denied[-1][1]


async def test_a_role_without_the_takeovers_list_fails_the_takeover(tmp_path: Path) -> None:
    """The Role before #35 had no ``list`` on services: a replaced orchestrator's takeover was refused."""
    docs = copy.deepcopy(render())
    role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == RELEASE)
    for rule in role["rules"]:
        if rule["resources"] == ["services"]:
            rule["verbs"].remove("list")
    template = cron(docs)["spec"]["jobTemplate"]["spec"]["template"]
    with FakeApiServer() as server:
        server.state.authorizer = authorizer(docs, TOKENS)
        owners(server, ("orch-old", "aaaaaaaa-0000-4000-8000-00000000000a"),
               ("orch-new", "bbbbbbbb-0000-4000-8000-00000000000b"))
        with pytest.raises(LaneError, match=r"list services in evals .* HTTP 403"):
            await killed_then_taken_over(server, tmp_path, template)
        assert [why for _, why in server.state.denied] == [
            f'services is forbidden: User "system:serviceaccount:{NS}:{RELEASE}" cannot list resource "services" '
            f'in API group "" in the namespace "{NS}"']
