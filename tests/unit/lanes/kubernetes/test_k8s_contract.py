"""Contract test of the ``kubernetes`` lane backend: the exact API calls it makes, in order.

No real Kubernetes API server can run on this machine, so the real backend drives the real
``kubernetes`` Python client against :class:`k8s_fake_api.FakeApiServer` (tests/support/k8s_fake_api.py),
a loopback stand-in that records every request and models watches, a kubelet's pod phases,
owner-reference garbage collection and 429s. The tests assert the call sequence and the bodies;
every body is also validated against the Kubernetes OpenAPI schema (kubernetes-validate, strict).
What the fake does *not* model — admission, scheduling, RBAC and NetworkPolicy enforcement — needs a
cluster (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest
from kubernetes import client
from pydantic import ValidationError
from support.k8s_fake_api import FakeApiServer, Request, rbac_of
from support.polling import eventually_async

from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import LaneError, get_backend
from orchestrator.lanes.kubernetes import objects as k8s
from orchestrator.lanes.kubernetes.backend import KubernetesBackend
from orchestrator.lanes.model import LaneSpec
from orchestrator.ledger import Ledger

RecordingApiServer = FakeApiServer  # the name other test modules import
__all__ = ["FakeApiServer", "RecordingApiServer", "Request", "rbac_of", "run_full_lifecycle"]

K8S_VERSION = "1.30"
NS = "evals"
RUN_ID = "20261202-contract"
SECRET_VALUE = "sk-ant-api03-contract-secret-0123456789abcdef"
IN_CLUSTER_ENV = {"POD_NAME": "orchestrator-7d9f", "POD_NAMESPACE": NS, "POD_UID": "11111111-2222-4333-8444-555555555555"}


def lane_spec(secret: bool = True) -> LaneSpec:
    return LaneSpec(
        n8n_version="2.41.1",
        env={"E2E_TESTS": "true", "N8N_ENABLED_MODULES": "instance-ai,agents"},
        secret_env={"ANTHROPIC_API_KEY": SECRET_VALUE} if secret else {},
        image="registry.invalid/n8n-eval-lane:2.41.1",
    )


def make_backend(server: RecordingApiServer, tmp_path: Path, *, environ: dict[str, str] | None = None,
                 run_id: str = RUN_ID, **options: object) -> KubernetesBackend:
    ledger = Ledger.for_run(run_id, tmp_path)
    options.setdefault("namespace", NS)
    options.setdefault("url_template", server.url + "/lanes/{pod}")
    return KubernetesBackend(run_id, ledger, tmp_path, api_client=server.api_client(),
                             environ=IN_CLUSTER_ENV if environ is None else environ, **options)


@pytest.fixture
def server() -> Iterator[RecordingApiServer]:
    with RecordingApiServer() as srv:
        yield srv


POD = "n8n-lane-20261202-contract-0-0"
BASE = f"/api/v1/namespaces/{NS}"
NETPOL = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
SWEEP_SELECTOR = ("app.kubernetes.io/name=n8n-eval-lane,app.kubernetes.io/managed-by=n8n-eval-orchestrator,"
                  "n8n-eval/run-id=20261202-contract")


WATCH_SELECTOR = "app.kubernetes.io/name=n8n-eval-lane,n8n-eval/run-id=20261202-contract"


def is_run_watch(call: tuple[str, str, dict[str, str]], selector: str = WATCH_SELECTOR) -> bool:
    """A call of the run's one pod watch (its list, or a watch request)."""
    return call[0] == "GET" and call[1] == f"{BASE}/pods" and call[2].get("labelSelector") == selector


async def run_full_lifecycle(server: RecordingApiServer, tmp_path: Path) -> KubernetesBackend:
    """start → wait_ready → health ×2 → logs → teardown → sweep, with a per-run Secret."""
    backend = make_backend(server, tmp_path)
    try:
        lane = await backend.start_lane(0, lane_spec())
        await backend.wait_ready(lane, 10)
        assert await backend.health(lane) is True
        assert await backend.health(lane) is True
        assert "Editor is now accessible" in await backend.logs(lane, 5)
        await backend.teardown(lane)
        await backend.sweep(RUN_ID)
    finally:
        await backend.close()
    return backend


async def test_lifecycle_calls_in_order(server: RecordingApiServer, tmp_path: Path) -> None:
    await run_full_lifecycle(server, tmp_path)
    calls = server.calls()
    assert [c for c in calls if not is_run_watch(c)] == [
        # the run's liveness Lease first: a run-id collision stops here, before anything else is created
        ("POST", LEASES, {}),
        ("POST", f"{BASE}/secrets", {}),
        ("POST", NETPOL, {}),
        # one headless Service per run (its lanes are <pod>.<service>): no Service per lane
        ("POST", f"{BASE}/services", {}),
        ("POST", f"{BASE}/pods", {}),
        # readiness: the pod's state comes from the run's watch (below), then the lane's own endpoint
        ("GET", f"/lanes/{POD}/healthz/readiness", {}),
        # later health checks: the watch's view of the pod (no API call) and readiness again
        ("GET", f"/lanes/{POD}/healthz/readiness", {}),
        ("GET", f"/lanes/{POD}/healthz/readiness", {}),
        ("GET", f"{BASE}/pods/{POD}/log", {"container": "n8n", "tailLines": "5"}),
        # every delete names the uid it created (DeleteOptions.preconditions): never someone else's object
        ("DELETE", f"{BASE}/pods/{POD}", {}),
        # the last lane went: the run's Service, NetworkPolicy, Secret and (last) its Lease go too
        ("DELETE", f"{BASE}/services/n8n-lanes-20261202-contract", {}),
        ("DELETE", f"{NETPOL}/n8n-lanes-20261202-contract", {}),
        ("DELETE", f"{BASE}/secrets/n8n-lanes-20261202-contract-env", {}),
        ("DELETE", f"{LEASES}/n8n-lanes-20261202-contract", {}),
        # sweep by label: list + delete, and deletecollection for secrets (never read a Secret)
        ("GET", f"{BASE}/pods", {"labelSelector": SWEEP_SELECTOR}),
        ("GET", f"{BASE}/services", {"labelSelector": SWEEP_SELECTOR}),
        ("GET", NETPOL, {"labelSelector": SWEEP_SELECTOR}),
        ("GET", LEASES, {"labelSelector": SWEEP_SELECTOR}),
        ("DELETE", f"{BASE}/secrets", {"labelSelector": SWEEP_SELECTOR}),
    ]
    deletes = [r for r in server.state.requests if r.method == "DELETE" and r.path.count("/") > 5]
    assert all((r.body or {}).get("preconditions", {}).get("uid") for r in deletes), deletes
    assert [r.body.get("gracePeriodSeconds") for r in deletes][:1] == [5]
    # the run's one watch: a list, then long-poll watches resuming from the list's resourceVersion
    watch_calls = [c for c in calls if is_run_watch(c)]
    assert watch_calls[0] == ("GET", f"{BASE}/pods", {"labelSelector": WATCH_SELECTOR})
    first = watch_calls[1][2]
    assert first["watch"] == "true" and first["timeoutSeconds"] == "60" and int(first["resourceVersion"]) >= 1
    assert first["allowWatchBookmarks"] == "true"
    assert server.state.objects == {}


async def test_bodies_are_valid_objects_with_labels_owner_and_no_secret_value(server, tmp_path) -> None:
    await run_full_lifecycle(server, tmp_path)
    lease, secret, policy, service, pod = server.bodies()
    assert [b["kind"] for b in (lease, secret, policy, service, pod)] == [
        "Lease", "Secret", "NetworkPolicy", "Service", "Pod"]
    assert lease["spec"]["leaseDurationSeconds"] == 60 and lease["spec"]["holderIdentity"].startswith("orchestrator-7d9f-")
    for body in (lease, secret, policy, pod, service):
        assert body["metadata"]["annotations"]["n8n-eval/creator"] == lease["spec"]["holderIdentity"]
        kubernetes_validate.validate(body, K8S_VERSION, strict=True)
        assert body["metadata"]["namespace"] == NS
        assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "n8n-eval-orchestrator"
        assert body["metadata"]["labels"]["n8n-eval/run-id"] == RUN_ID
        assert body["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": "orchestrator-7d9f", "uid": IN_CLUSTER_ENV["POD_UID"],
             "controller": False}
        ]
    assert secret["stringData"] == {"ANTHROPIC_API_KEY": SECRET_VALUE}
    for body in (policy, pod, service):
        assert SECRET_VALUE not in json.dumps(body)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "n8n-lanes-20261202-contract-env"
    assert pod["metadata"]["labels"]["n8n-eval/lane-index"] == "0"
    assert policy["spec"]["podSelector"]["matchLabels"]["n8n-eval/run-id"] == RUN_ID
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (POD, service["metadata"]["name"])


async def test_ledger_records_before_create_and_closes_everything(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path)
    lane = await backend.start_lane(0, lane_spec())
    kinds = {(e.kind, e.id) for e in backend.ledger.open_entries()}
    assert kinds == {("secret", "n8n-lanes-20261202-contract-env"), ("networkpolicy", "n8n-lanes-20261202-contract"),
                     ("lease", "n8n-lanes-20261202-contract"), ("lane", POD),
                     ("service", "n8n-lanes-20261202-contract")}
    (entry,) = backend.ledger.open_entries("lane")
    assert entry.meta["pod"] == POD and entry.meta["namespace"] == NS and entry.meta["base_url"] == lane.base_url
    assert SECRET_VALUE not in backend.ledger.path.read_text()
    await backend.teardown(lane)
    assert backend.ledger.open_entries() == []
    await backend.close()


async def test_out_of_cluster_no_owner_and_existing_secret(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path, environ={}, existing_secret="team-model-keys")
    lane = await backend.start_lane(0, lane_spec())
    await backend.teardown(lane)
    await backend.sweep(RUN_ID)
    await backend.close()
    # no Secret created, deleted or swept: the lanes reference the one named in the options (and
    # the Helm chart then grants no RBAC on secrets at all)
    assert [c[:2] for c in server.calls() if not is_run_watch(c)] == [
        ("POST", LEASES), ("POST", NETPOL), ("POST", f"{BASE}/services"), ("POST", f"{BASE}/pods"),
        ("DELETE", f"{BASE}/pods/{POD}"), ("DELETE", f"{BASE}/services/n8n-lanes-20261202-contract"),
        ("DELETE", f"{NETPOL}/n8n-lanes-20261202-contract"), ("DELETE", f"{LEASES}/n8n-lanes-20261202-contract"),
        ("GET", f"{BASE}/pods"), ("GET", f"{BASE}/services"), ("GET", NETPOL), ("GET", LEASES),
    ]
    lease, policy, service, pod = server.bodies()
    for body in (lease, policy, service, pod):
        assert "ownerReferences" not in body["metadata"]
    ref = pod["spec"]["containers"][0]["env"][-1]
    assert ref == {"name": "ANTHROPIC_API_KEY",
                   "valueFrom": {"secretKeyRef": {"name": "team-model-keys", "key": "ANTHROPIC_API_KEY", "optional": False}}}


async def test_run_objects_go_with_the_last_lane_only(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path)
    lanes = [await backend.start_lane(i, lane_spec()) for i in range(2)]
    assert [c[:2] for c in server.calls()].count(("POST", NETPOL)) == 1  # one policy per run
    await backend.teardown(lanes[0])
    assert ("networkpolicies", NS, "n8n-lanes-20261202-contract") in server.state.objects
    await backend.teardown(lanes[1])
    assert server.state.objects == {}
    # a replacement after the pool went empty gets a new name and brings the run objects back
    again = await backend.start_lane(0, lane_spec())
    assert again.lane_id == "n8n-lane-20261202-contract-0-1"
    assert ("networkpolicies", NS, "n8n-lanes-20261202-contract") in server.state.objects
    await backend.teardown(again)
    await backend.close()


async def test_image_pull_errors_are_retried_until_the_pod_runs(server, tmp_path) -> None:
    """ErrImagePull / ImagePullBackOff (a slow registry, a pull secret being fixed) are not terminal."""
    server.state.pod_plan = ((0.05, "ErrImagePull"), (0.6, "ImagePullBackOff"), (1.0, "ready"))
    backend = make_backend(server, tmp_path, pod={"readyTimeoutSeconds": 20})
    lane = await backend.start_lane(0, lane_spec())

    async def pull_failing() -> bool:
        return bool(re.search("ErrImagePull|ImagePullBackOff", await backend.logs(lane)))

    await eventually_async(pull_failing, what="the pull error in the lane's logs")
    assert await backend.health(lane) is False
    assert await backend.is_gone(lane) is False
    await backend.wait_ready(lane, 1)  # the backend's own ready timeout (20 s here) wins over 1 s
    assert await backend.health(lane) is True
    await backend.teardown(lane)
    await backend.close()


async def test_a_pull_that_never_succeeds_times_out_naming_the_reason(server, tmp_path) -> None:
    server.state.pod_plan = ((0.05, "ImagePullBackOff"),)
    backend = make_backend(server, tmp_path, pod={"readyTimeoutSeconds": 1})
    lane = await backend.start_lane(0, lane_spec())
    with pytest.raises(LaneError, match=r"not ready after 1 s .*ImagePullBackOff"):
        await backend.wait_ready(lane, 0.5)
    await backend.teardown(lane)
    await backend.close()


@pytest.mark.parametrize("outcome", ["OOMKilled", "Evicted"])
async def test_an_ended_pod_is_gone_at_once_and_logs_say_why(server, tmp_path, outcome: str) -> None:
    server.state.pod_plan = ((0.05, "ready"), (1.0, outcome))
    backend = make_backend(server, tmp_path)
    lane = await backend.start_lane(0, lane_spec())
    await backend.wait_ready(lane, 5)
    await eventually_async(lambda: backend.is_gone(lane), timeout=5, what=f"the {outcome} pod gone")
    assert await backend.health(lane) is False
    assert outcome in await backend.logs(lane)
    with pytest.raises(LaneError, match=outcome):
        await backend.wait_ready(lane, 3)
    await backend.teardown(lane)
    await backend.close()


async def test_one_watch_for_the_run_not_per_lane_polling(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path)
    lanes = [await backend.start_lane(i, lane_spec()) for i in range(6)]
    await asyncio.gather(*(backend.wait_ready(lane, 10) for lane in lanes))
    for _ in range(5):  # the pool's health loop
        assert all(await asyncio.gather(*(backend.health(lane) for lane in lanes)))
        assert not any(await asyncio.gather(*(backend.is_gone(lane) for lane in lanes)))
    pod_reads = [c for c in server.calls() if c[0] == "GET" and c[1].startswith(f"{BASE}/pods")]
    assert all(is_run_watch(c) for c in pod_reads), pod_reads  # no GET of a single pod, no per-lane watch
    assert sum(1 for c in pod_reads if "watch" not in c[2]) == 1  # one list
    for lane in lanes:
        await backend.teardown(lane)
    await backend.close()


async def test_429_answers_are_retried_with_backoff(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path)
    server.throttle(3, retry_after="0")  # the Lease create answers 429 three times
    lane = await backend.start_lane(0, lane_spec())
    server.throttle(2, retry_after=None)  # no Retry-After: exponential backoff
    await backend.wait_ready(lane, 10)
    await backend.teardown(lane)
    await backend.close()
    assert server.state.throttled == 5
    assert server.state.objects == {}
    posts = [c[1] for c in server.calls() if c[0] == "POST"]
    assert posts.count(LEASES) == 4 and posts.count(f"{BASE}/secrets") == 1  # 3× 429, then created


async def test_429_beyond_the_budget_surfaces_as_an_error(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path, retry_budget_s=0.2)
    server.throttle(50, retry_after="1")
    with pytest.raises(LaneError, match="HTTP 429"):
        await backend.start_lane(0, lane_spec())
    server.throttle(0)
    await backend.close()


async def test_owner_gc_deletes_lanes_only_when_the_owner_is_deleted(server, tmp_path) -> None:
    """As in a cluster: an owner that merely *ended* keeps its children (hence the janitor)."""
    server.add("pods", NS, {"metadata": {"name": "orchestrator-7d9f", "uid": IN_CLUSTER_ENV["POD_UID"]},
                            "status": {"phase": "Running"}})
    backend = make_backend(server, tmp_path)
    await backend.start_lane(0, lane_spec())
    await backend.close()
    server.set_pod("orchestrator-7d9f", "OOMKilled")
    assert POD in server.names("pods") and server.names("networkpolicies")
    server.delete("pods", NS, "orchestrator-7d9f")
    assert server.state.objects == {}


async def test_unreachable_api_is_unhealthy_not_a_crash(tmp_path) -> None:
    with RecordingApiServer() as srv:
        # resets and timeouts are retried: give up soon here (the options are frozen once parsed)
        backend = make_backend(srv, tmp_path, request_timeout_s=2, retry_budget_s=1)
        lane = await backend.start_lane(0, lane_spec())
    # the server is gone now: connection refused on 127.0.0.1
    assert await backend.health(lane) is False
    assert await backend.is_gone(lane) is False
    with pytest.raises(LaneError, match=r"API server http://127\.0\.0\.1:\d+ unreachable"):
        await backend.teardown(lane)
    assert {e.kind for e in backend.ledger.open_entries()} >= {"lane", "service"}  # left for cleanup
    await backend.close()


async def test_teardown_of_a_gone_lane_is_fine(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path)
    lane = await backend.start_lane(0, lane_spec())
    server.state.objects.clear()  # someone deleted everything already
    await backend.teardown(lane)  # 404s = gone = fine
    assert backend.ledger.open_entries() == []
    await backend.close()


async def test_forbidden_pod_create_names_the_object_and_cleans_up(server, tmp_path) -> None:
    server.state.failures[("POST", "pods")] = 403
    backend = make_backend(server, tmp_path)
    with pytest.raises(LaneError, match=f"create Pod {NS}/{POD} failed: HTTP 403 pods is forbidden"):
        await backend.start_lane(0, lane_spec())
    assert backend.ledger.open_entries() == []
    assert server.state.objects == {}
    await backend.close()


async def test_sweep_of_every_run_touches_nothing_and_one_known_run_is_swept(server, tmp_path) -> None:
    crashed = make_backend(server, tmp_path, run_id="crashed-run")
    await crashed.start_lane(0, lane_spec())
    await crashed.start_lane(1, lane_spec())
    await crashed.close()
    server.settle()
    before = len(server.api_calls())
    # plain `orchestrator cleanup` sweeps every run: another run in the namespace may be alive
    sweeper = make_backend(server, tmp_path, run_id="cleanup")
    assert await sweeper.sweep(None) == []
    assert await sweeper.sweep("someone-elses-run") == []  # not a kubernetes run this machine knows
    assert len(server.api_calls()) == before
    # a run whose ledger is here (a crash on this machine) is swept by its id
    removed = await sweeper.sweep("crashed-run")
    assert sorted(removed) == sorted([
        f"pod/{NS}/n8n-lane-crashed-run-0-0", f"pod/{NS}/n8n-lane-crashed-run-1-0",
        f"service/{NS}/n8n-lanes-crashed-run",
        f"networkpolicy/{NS}/n8n-lanes-crashed-run", f"lease/{NS}/n8n-lanes-crashed-run",
        f"secret/{NS}/n8n-lanes-crashed-run-env",
    ])
    assert server.state.objects == {}
    # the crashed run's ledger is closed by the sweep
    assert Ledger.for_run("crashed-run", tmp_path).open_entries() == []
    await sweeper.close()


def test_registered_by_name_and_bad_options_are_named() -> None:
    assert get_backend("kubernetes") is KubernetesBackend
    ledger_dir = Path("/nonexistent-never-written")
    with pytest.raises(ConfigError, match="option 'image_pull_policy'"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(),
                          image_pull_policy="Sometimes")
    with pytest.raises(ConfigError, match="ORCHESTRATOR_K8S_URL_TEMPLATE"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(),
                          url_template="http://{nope}")
    with pytest.raises(ConfigError, match="option 'run_as_user'"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(), run_as_user=0)
    with pytest.raises(ConfigError, match="ORCHESTRATOR_K8S_OWNER_KIND"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(),
                          environ={"ORCHESTRATOR_K8S_OWNER_KIND": "deployment"})
    # the run gives a backend only the options its flags ask for (run/stack.py): an unknown one is a
    # typo, refused by name; a None is an option not given
    with pytest.raises(ConfigError, match=r"^kubernetes backend: unknown option 'namespce' \(its options: .*namespace"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(), namespce="evals")
    with pytest.raises(ConfigError, match="option 'pod' \\(env ORCHESTRATOR_K8S_LANE_POD\\): .*not JSON"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(),
                          environ={"ORCHESTRATOR_K8S_LANE_POD": "{nope"})
    backend = KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(), namespace=None)
    assert backend.opts.namespace is None
    with pytest.raises(ValidationError):  # frozen: what the run was started with stays so
        backend.opts.namespace = "other"
    # env fallbacks: the Helm chart configures the in-cluster orchestrator this way
    backend = KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(), environ={
        "ORCHESTRATOR_K8S_NAMESPACE": "evals", "ORCHESTRATOR_LANE_IMAGE": "reg.invalid/lane:1",
        "ORCHESTRATOR_K8S_RUN_AS_USER": "1001", "ORCHESTRATOR_K8S_LANE_SECRET": "keys"})
    assert (backend.namespace, backend.opts.image, backend.opts.run_as_user, backend.secret_ref) == (
        "evals", "reg.invalid/lane:1", 1001, "keys")


def snapshot(server: RecordingApiServer) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(resource, ns, name) -> (uid, resourceVersion): any change to any object shows."""
    with server.state.cond:
        return {k: (o["metadata"]["uid"], o["metadata"]["resourceVersion"]) for k, o in server.state.objects.items()}


@pytest.mark.parametrize("pre_lease", [False, True])
async def test_a_run_id_collision_is_one_line_and_touches_nothing_of_the_other_run(server, tmp_path,
                                                                                  pre_lease: bool) -> None:
    """Two orchestrators with one run id in one namespace: the second stops with one ConfigError line,
    and every object of the first keeps its uid and version (nothing deleted, replaced or modified).
    ``pre_lease``: the first run has no Lease (an older orchestrator): the collision shows at its
    Secret instead, and the second takes back only the Lease it had created."""
    first = make_backend(server, tmp_path / "a")
    lanes = [await first.start_lane(i, lane_spec()) for i in range(2)]
    for lane in lanes:
        await first.wait_ready(lane, 10)
    await first.close()  # stop its renewals: the snapshot must not move on its own
    if pre_lease:
        server.delete("leases", NS, "n8n-lanes-20261202-contract")
    before = snapshot(server)
    second = make_backend(server, tmp_path / "b",
                          environ={**IN_CLUSTER_ENV, "POD_NAME": "orchestrator-other", "POD_UID": "9" * 8 + "-0000-4000-8000-000000000009"})
    for index in (0, 1):
        with pytest.raises(ConfigError) as err:
            await second.start_lane(index, lane_spec())
        message = str(err.value)
        # a Secret is never read, so its creator is not known
        holder = "unknown" if pre_lease else "orchestrator-7d9f-"
        assert "\n" not in message and f"--run-id {RUN_ID}: another orchestrator ({holder}" in message
        assert ("Secret" if pre_lease else "Lease") in message
    await second.sweep(None)
    await second.close()
    assert snapshot(server) == before
    deletes = [r for r in server.api_calls() if r.method == "DELETE"]
    assert len(deletes) == (1 if pre_lease else 0)  # its own Lease (pre_lease), by uid: nothing else
    assert all(r.path.endswith("/leases/n8n-lanes-20261202-contract") for r in deletes)
    assert {e.kind for e in second.ledger.open_entries()} <= {"lease"} or second.ledger.open_entries() == []
    assert lanes[0].lane_id in server.names("pods")


async def test_a_pod_that_is_not_ours_is_never_deleted(server, tmp_path) -> None:
    """A lane pod name taken by another process's pod (run-id collision below the run objects): the
    lane fails with one line, teardown deletes nothing of that pod (no uid of ours to delete by)."""
    backend = make_backend(server, tmp_path)
    server.add("pods", NS, {"metadata": {"name": POD, "labels": {"n8n-eval/run-id": RUN_ID},
                                         "annotations": {"n8n-eval/creator": "someone-else"}}})
    theirs = snapshot(server)[("pods", NS, POD)]
    with pytest.raises(ConfigError, match=f"Pod {POD} exists"):
        await backend.start_lane(0, lane_spec())
    await backend.close()
    assert snapshot(server).get(("pods", NS, POD)) == theirs
    assert not [r for r in server.api_calls() if r.method == "DELETE" and POD in r.path]


async def test_an_image_pull_error_ends_the_lane_naming_the_image_after_its_grace(server, tmp_path) -> None:
    """A typo'd tag: the bring-up path (``lanes.bringup``) fails the lane once its pull kept failing
    ``pullGraceSeconds`` (the chart's 120 s, 3 s here), naming the image and the reason."""
    from orchestrator.lanes.bringup import PoolEvents, bring_up_one, make_owner

    server.state.pod_plan = ((0.05, "ErrImagePull"), (1.0, "ImagePullBackOff"), (1.0, "ErrImagePull"))
    backend = make_backend(server, tmp_path, pod={"pullGraceSeconds": 3})
    assert k8s.LanePod.model_validate({}).pull_grace_seconds == 120  # the default, sized for 500 pulls at once
    t0 = time.monotonic()
    with pytest.raises(LaneError) as err:
        await bring_up_one(backend, 0, lane_spec(), make_owner(RUN_ID), 0, [], PoolEvents())
    assert time.monotonic() - t0 >= 3  # not before its grace
    assert "image registry.invalid/n8n-eval-lane:2.41.1 of container n8n cannot be pulled (ErrImagePull" in str(err.value)
    assert "gave up after 3" in str(err.value) and "(grace 3 s)" in str(err.value)
    assert POD not in server.names("pods")  # torn down
    await backend.close()


async def test_an_unschedulable_lane_fails_with_the_schedulers_message_after_its_grace(server, tmp_path) -> None:
    from support.k8s_fake_api import UNSCHEDULABLE_MESSAGE

    server.state.pod_plan = ((0.05, "Unschedulable"),)
    backend = make_backend(server, tmp_path, pod={"unschedulableGraceSeconds": 1})
    lane = await backend.start_lane(0, lane_spec())
    await eventually_async(lambda: backend._watch().stuck_for(lane.handle), what="the pod seen Unschedulable")
    assert await backend.is_gone(lane) is False  # within the grace: a node may be on its way
    # given up after the grace (1 s), not after wait_ready's 60 s
    with pytest.raises(LaneError, match=f"unschedulable: {re.escape(UNSCHEDULABLE_MESSAGE)}; gave up after 1 s"):
        await backend.wait_ready(lane, 60)
    assert await backend.is_gone(lane) is True
    await backend.teardown(lane)
    await backend.close()


async def test_a_pull_that_heals_within_the_grace_is_not_a_failure(server, tmp_path) -> None:
    """A registry blip: pulls fail for 1 s then succeed, grace 2 s: the lane becomes ready."""
    server.state.pod_plan = ((0.05, "ErrImagePull"), (1.0, "ready"))
    backend = make_backend(server, tmp_path, pod={"pullGraceSeconds": 2})
    lane = await backend.start_lane(0, lane_spec())
    await backend.wait_ready(lane, 10)
    assert await backend.health(lane) is True
    await backend.teardown(lane)
    await backend.close()


async def test_creates_are_bounded(server, tmp_path) -> None:
    """12 lanes started at once with max_concurrent_creates=3 and slow answers: never more than 3 pod
    creates in flight."""
    server.state.latency_s = (0.1, 0.1)
    backend = make_backend(server, tmp_path, max_concurrent_creates=3, qps=1000, burst=1000)
    lanes = await asyncio.gather(*(backend.start_lane(i, lane_spec()) for i in range(12)))
    assert server.state.peak_inflight[("POST", "pods")] == 3
    for lane in lanes:
        await backend.teardown(lane)
    await backend.close()


async def test_every_api_attempt_is_rate_limited(server, tmp_path) -> None:
    """qps 20 / burst 5: 12 lanes (18 requests, two of them retries of a 503) take at least
    (18 - 5) / 20 s; the retries took tokens too."""
    backend = make_backend(server, tmp_path, qps=20, burst=5)
    server.fail_next(2, 503)  # the Lease create: retried twice
    t0 = time.monotonic()
    lanes = await asyncio.gather(*(backend.start_lane(i, lane_spec()) for i in range(12)))
    elapsed = time.monotonic() - t0
    api = [r for r in server.api_calls() if not r.is_watch and "labelSelector" not in r.query]
    assert len(api) == 3 + 1 + 1 + 1 + 12  # Lease ×3, Secret, NetworkPolicy, the run's Service, 12 Pods
    assert elapsed >= (len(api) - 5) / 20 * 0.95 and backend.limiter.waited_s > 0
    for lane in lanes:
        await backend.teardown(lane)
    await backend.close()


async def test_the_run_watch_survives_compaction_bookmarks_and_5xx(server, tmp_path) -> None:
    """The run's one watch on a harsher API: a watch resuming from a compacted version gets 410 and
    lists again (a 5xx on that list retried); with bookmarks the resumed version stays fresh, so a
    compaction costs no list; the cache still sees every change."""
    backend = make_backend(server, tmp_path, watch_timeout_s=1)
    lanes = [await backend.start_lane(i, lane_spec()) for i in range(2)]
    await asyncio.gather(*(backend.wait_ready(lane, 10) for lane in lanes))
    watch = backend._watch()
    lists = watch.lists
    server.add("services", NS, {"metadata": {"name": "unrelated"}})  # history moves on past the watch's version
    server.compact()
    server.fail_next(1, 503)
    # the current watch ends (1 s); the next one, from the old version, gets 410: a list, then a watch again
    await eventually_async(lambda: watch.lists > lists, what="a list after the 410")
    listed_at = watch.watches
    await eventually_async(lambda: watch.watches > listed_at, what="a watch after that list")
    assert watch.lists == lists + 1
    server.state.bookmark_s = 0.2
    asked = watch.watches
    await eventually_async(lambda: watch.watches > asked, what="a watch asking for bookmarks")
    server.add("services", NS, {"metadata": {"name": "unrelated-2"}})
    version = server.state.version
    # a bookmark carries the new version (two of them: the watch has read the first)
    await eventually_async(lambda: len([v for v in server.state.bookmarks_sent if v >= version]) >= 2,
                           what="bookmarks at the new version")
    server.compact()
    compacted_at = watch.watches
    # the watch open at the compaction ends, the next resumes: from a compacted version it would list first
    await eventually_async(lambda: watch.watches >= compacted_at + 2, what="two watches after the compaction")
    assert watch.lists == lists + 1  # resumed from a bookmark's version: no 410, no list
    server.set_pod(lanes[0].handle, "OOMKilled")
    await eventually_async(lambda: backend.is_gone(lanes[0]), timeout=5, what="the OOMKilled pod gone")
    assert await backend.health(lanes[1]) is True
    for lane in lanes:
        await backend.teardown(lane)
    await backend.close()
