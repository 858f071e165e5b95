"""Lane pods with the build runner and the sandbox, as the ``remote`` builder and Instance AI need them.

Objects are validated against the Kubernetes OpenAPI schemas (kubernetes-validate, strict, 1.27 /
1.30 / 1.33) and created by the real backend against the loopback fake API server
(tests/support/k8s_fake_api.py). Whether a real kubelet and runtime run the sandbox's securityContext —
user namespaces for the pod, the unmasked /proc, the unconfined seccomp/AppArmor profiles — needs a
real cluster (docs/cluster.md, "The sandbox container's privileges").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest
from support.k8s_fake_api import FakeApiServer

from orchestrator.builders.claude.remote import ENDPOINT
from orchestrator.lanes.kubernetes import objects as k8s
from orchestrator.lanes.kubernetes.backend import KubernetesBackend
from orchestrator.lanes.model import LaneSpec
from orchestrator.ledger import Ledger

NS = "evals"
RUN_ID = "20261203-runner"
SECRET_VALUE = "sk-ant-api03-runner-objects-0123456789abcdef"
IN_CLUSTER_ENV = {"POD_NAME": "orchestrator-7d9f", "POD_NAMESPACE": NS, "POD_UID": "11111111-2222-4333-8444-555555555555"}
VERSIONS = ["1.27", "1.30", "1.33"]


def lane_spec() -> LaneSpec:
    return LaneSpec(n8n_version="2.41.1", env={"E2E_TESTS": "true"}, secret_env={"ANTHROPIC_API_KEY": SECRET_VALUE},
                    image="registry.invalid/n8n-eval-lane:2.41.1")


def both(**sandbox: object) -> k8s.LanePod:
    return k8s.LanePod.model_validate({"buildRunner": {"enabled": True}, "sandbox": {"enabled": True, **sandbox}})


@pytest.mark.parametrize("version", VERSIONS)
def test_sandbox_container_gets_what_bwrap_needs_and_nothing_more(version: str) -> None:
    pod = k8s.pod_object(RUN_ID, 0, NS, lane_spec(), secret="lane-keys", pod=both(), sidecar_image="reg.invalid/o:1")
    kubernetes_validate.validate(pod, version, strict=True)
    spec = pod["spec"]
    n8n, runner, sandbox = spec["containers"]
    # the pod gets its own user namespace: the sandbox's unmasked /proc is allowed only there
    assert spec["hostUsers"] is False
    ctx = sandbox["securityContext"]
    assert ctx["procMount"] == "Unmasked" and ctx["seccompProfile"] == {"type": "Unconfined"}
    assert pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/sandbox"] == "unconfined"
    # still: non-root, no capability, no privilege escalation, read-only root
    assert ctx["runAsNonRoot"] is True and ctx["privileged"] is False and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["readOnlyRootFilesystem"] is True
    # only the sandbox is loosened: n8n and the runner keep the restricted profile
    for c in (n8n, runner):
        assert c["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "procMount" not in c["securityContext"]
    assert not [k for k in pod["metadata"]["annotations"] if "apparmor" in k and not k.endswith("/sandbox")]


@pytest.mark.parametrize("version", VERSIONS)
def test_sandbox_with_a_localhost_seccomp_profile_and_without_a_user_namespace(version: str) -> None:
    tight = both(seccompProfile={"type": "Localhost", "localhostProfile": "profiles/bwrap.json"}, userNamespace=False)
    pod = k8s.pod_object(RUN_ID, 0, NS, lane_spec(), secret="s", pod=tight)
    kubernetes_validate.validate(pod, version, strict=True)
    sandbox = pod["spec"]["containers"][2]
    assert sandbox["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": "profiles/bwrap.json"}
    assert "procMount" not in sandbox["securityContext"] and "hostUsers" not in pod["spec"]
    with pytest.raises(ValueError, match="localhostProfile"):
        both(seccompProfile={"type": "Localhost"})
    with pytest.raises(ValueError, match="seccompProfile.type"):
        both(seccompProfile={"type": "Privileged"})
    plain = k8s.pod_object(RUN_ID, 0, NS, lane_spec(), secret="s")
    assert "hostUsers" not in plain["spec"] and not [k for k in plain["metadata"]["annotations"] if "apparmor" in k]


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        yield srv


def backend(server: FakeApiServer, tmp_path: Path, **options: object) -> KubernetesBackend:
    return KubernetesBackend(RUN_ID, Ledger.for_run(RUN_ID, tmp_path), tmp_path, api_client=server.api_client(),
                             environ=IN_CLUSTER_ENV, namespace=NS, existing_secret="lane-keys", **options)


async def test_remote_builder_lanes_carry_a_reachable_runner(server: FakeApiServer, tmp_path: Path) -> None:
    """``--builder remote`` passes ``build_runner=True``: each pod runs the runner, the run's Service
    and ingress policy expose 8790, and the lane knows the runner's URL."""
    b = backend(server, tmp_path, build_runner=True)
    try:
        lane = await b.start_lane(0, lane_spec())
        again = await b.start_lane(1, lane_spec())
        lease, policy, service, pod, _ = server.bodies()
        for body in (lease, policy, pod, service):
            for version in VERSIONS:
                kubernetes_validate.validate(body, version, strict=True)
        assert [c["name"] for c in pod["spec"]["containers"]] == ["n8n", "build-runner"]
        assert {"name": "build-runner", "port": 8790, "targetPort": "build-runner", "protocol": "TCP"} \
            in service["spec"]["ports"]
        assert {"protocol": "TCP", "port": 8790} in policy["spec"]["ingress"][0]["ports"]
        assert policy["spec"]["ingress"][0]["from"] == [
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "n8n-eval-orchestrator"}}}]
        name = pod["metadata"]["name"]
        svc = service["metadata"]["name"]
        assert lane.base_url == f"http://{name}.{svc}.{NS}.svc.cluster.local.:5678"
        assert lane.endpoints == {ENDPOINT: f"http://{name}.{svc}.{NS}.svc.cluster.local.:8790"}
        assert again.endpoints[ENDPOINT].endswith(".svc.cluster.local.:8790") and again.endpoints != lane.endpoints
        # the runner's keys come from the lane Secret by reference; no value in any body
        runner = pod["spec"]["containers"][1]
        assert {e["name"] for e in runner["env"] if "valueFrom" in e} == {"ANTHROPIC_API_KEY", "N8N_EVAL_RUNNER_TOKEN"}
        assert all(SECRET_VALUE not in json.dumps(b) for b in server.bodies())
        assert server.names("pods") == {name, again.handle}
        await b.teardown(lane)
        await b.teardown(again)
    finally:
        await b.close()
    assert server.state.objects == {}


async def test_without_the_remote_builder_no_runner_and_port_forward_urls(server: FakeApiServer, tmp_path: Path) -> None:
    b = backend(server, tmp_path, url_template="http://127.0.0.1:{local_port}")
    try:
        lane = await b.start_lane(0, lane_spec())
        _, _, service, pod = server.bodies()
        assert [c["name"] for c in pod["spec"]["containers"]] == ["n8n"] and len(service["spec"]["ports"]) == 1
        assert lane.endpoints == {}
        await b.teardown(lane)
    finally:
        await b.close()
    # from a workstation: the runner of lane i is port-forwarded to the lane's local port + 100
    forwarded = backend(server, tmp_path, url_template="http://127.0.0.1:{local_port}", build_runner=True)
    try:
        lane = await forwarded.start_lane(2, lane_spec())
        assert (lane.base_url, lane.endpoints[ENDPOINT]) == ("http://127.0.0.1:5702", "http://127.0.0.1:5802")
        await forwarded.teardown(lane)
    finally:
        await forwarded.close()


async def test_instance_ai_lanes_build_in_their_own_sandbox_container(server: FakeApiServer, tmp_path: Path) -> None:
    """``--builder instance-ai`` passes ``sandbox=True``: each pod runs the sandbox container and n8n
    is pointed at it on 127.0.0.1 (one network namespace per pod); ``sandbox_url`` points every lane
    at an external service instead and adds no container."""
    b = backend(server, tmp_path, sandbox=True)
    try:
        lane = await b.start_lane(0, lane_spec())
        pod = next(body for body in server.bodies() if body.get("kind") == "Pod")
        for version in VERSIONS:
            kubernetes_validate.validate(pod, version, strict=True)
        assert [c["name"] for c in pod["spec"]["containers"]] == ["n8n", "sandbox"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["N8N_SANDBOX_SERVICE_URL"] == f"http://127.0.0.1:{k8s.SANDBOX_PORT}"
        assert env["N8N_INSTANCE_AI_SANDBOX_ENABLED"] == "true"
        assert env["N8N_INSTANCE_AI_SANDBOX_PROVIDER"] == "n8n-sandbox"
        assert env["E2E_TESTS"] == "true"  # the profile's env is kept
        await b.teardown(lane)
    finally:
        await b.close()
    assert server.state.objects == {}

    external = backend(server, tmp_path, sandbox=True, sandbox_url="http://sandbox.evals.svc:8080/")
    try:
        lane = await external.start_lane(0, lane_spec())
        pod = [body for body in server.bodies() if body.get("kind") == "Pod"][-1]
        assert [c["name"] for c in pod["spec"]["containers"]] == ["n8n"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["N8N_SANDBOX_SERVICE_URL"] == "http://sandbox.evals.svc:8080"
        await external.teardown(lane)
    finally:
        await external.close()
