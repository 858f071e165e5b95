"""The fake API server's harsher behaviours (tests/support/k8s_fake_api.py), through the real ``kubernetes``
client: what the backend and janitor tests rely on must itself be right.

The behaviours follow the Kubernetes API conventions (watch ``ERROR`` 410 after compaction,
``BOOKMARK`` events, graceful deletion with ``deletionTimestamp``, ``DeleteOptions.preconditions``,
Pod Security "restricted", ResourceQuota), not an n8n file: this is infrastructure, not a case rule.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from support.k8s_fake_api import UNSCHEDULABLE_MESSAGE, FakeApiServer
from support.polling import eventually

from orchestrator.lanes.kubernetes import objects
from orchestrator.lanes.model import LaneSpec

NS = "evals"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        yield srv


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


def test_watch_from_a_compacted_version_is_410_and_bookmarks_carry_the_version(server) -> None:
    core: Any = client.CoreV1Api(server.api_client())  # dict bodies, as the backend sends them
    core.create_namespaced_pod(NS, pod("a"))
    version = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod("b"))
    server.compact()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=version, timeout_seconds=1))
    assert err.value.status == 410
    server.state.bookmark_s = 0.2
    now = core.list_namespaced_pod(NS).metadata.resource_version
    events = list(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=now, timeout_seconds=1,
                                       allow_watch_bookmarks=True))
    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    assert events[-1]["raw_object"]["metadata"]["resourceVersion"] == now


def test_injected_5xx_and_latency(server) -> None:
    core: Any = client.CoreV1Api(server.api_client())  # dict bodies, as the backend sends them
    server.fail_next(2, 503)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.list_namespaced_pod(NS)
        assert err.value.status == 503
    core.list_namespaced_pod(NS)
    server.state.latency_s = (0.2, 0.2)
    t0 = time.monotonic()
    core.list_namespaced_pod(NS)
    assert time.monotonic() - t0 >= 0.2
    assert server.state.errors_sent == 2


def test_graceful_deletion_terminating_then_gone_and_uid_preconditions(server) -> None:
    core: Any = client.CoreV1Api(server.api_client())  # dict bodies, as the backend sends them
    server.state.termination_s = 0.5
    uid = core.create_namespaced_pod(NS, pod("a")).metadata.uid
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod("a", NS, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other")))
    assert err.value.status == 409 and "Precondition failed" in str(err.value.body)
    core.delete_namespaced_pod("a", NS, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)))
    assert core.read_namespaced_pod("a", NS).metadata.deletion_timestamp is not None  # Terminating
    eventually(lambda: "a" not in server.names("pods"), what="the Terminating pod gone after its grace")


def test_pod_security_restricted_and_quota(server) -> None:
    core: Any = client.CoreV1Api(server.api_client())  # dict bodies, as the backend sends them
    server.state.pod_security = "restricted"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, pod("loose"))
    assert err.value.status == 403 and 'violates PodSecurity "restricted:latest"' in json.loads(str(err.value.body))["message"]
    spec = LaneSpec(n8n_version="2.41.1", image="registry.invalid/lane:1")
    lane = objects.pod_object("r1", 0, NS, spec, secret="keys")
    core.create_namespaced_pod(NS, lane)  # the backend's own pods are admitted
    server.state.quota_pods = 1
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, objects.pod_object("r1", 1, NS, spec, secret="keys"))
    assert err.value.status == 403 and "exceeded quota" in str(err.value.body)


def test_lease_replace_is_optimistic_and_unschedulable_outcome(server) -> None:
    coord: Any = client.CoordinationV1Api(server.api_client())
    lease = coord.create_namespaced_lease(NS, {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})
    lease.spec.holder_identity = "b"
    coord.replace_namespaced_lease("l", NS, lease)
    lease.spec.holder_identity = "c"  # stale resourceVersion
    with pytest.raises(ApiException) as err:
        coord.replace_namespaced_lease("l", NS, lease)
    assert err.value.status == 409
    coord.patch_namespaced_lease("l", NS, {"spec": {"leaseDurationSeconds": 7}})
    got = coord.read_namespaced_lease("l", NS)
    assert (got.spec.holder_identity, got.spec.lease_duration_seconds) == ("b", 7)
    core: Any = client.CoreV1Api(server.api_client())  # dict bodies, as the backend sends them
    server.state.pod_plan = ((0.01, "Unschedulable"),)
    core.create_namespaced_pod(NS, pod("p"))
    def unscheduled() -> Any:
        conditions = core.read_namespaced_pod("p", NS).status.conditions or []
        return conditions and conditions[0].reason == "Unschedulable" and conditions[0]

    cond = eventually(unscheduled, what="p's scheduling condition turned Unschedulable")
    assert (cond.type, cond.status, cond.reason, cond.message) == ("PodScheduled", "False", "Unschedulable",
                                                                   UNSCHEDULABLE_MESSAGE)
