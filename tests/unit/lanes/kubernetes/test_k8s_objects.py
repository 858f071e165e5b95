"""The kubernetes lane objects, checked against the real Kubernetes OpenAPI schema (offline).

``kubernetes-validate`` ships the upstream JSON schemas; strict mode also refuses unknown fields.
No API server runs here, so schema validation is the check that the cluster would accept them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes_validate
import pytest

from orchestrator.lanes.kubernetes import objects as k8s
from orchestrator.lanes.model import LaneSpec, Resources

#: The Kubernetes version every object is validated against (kubernetes-validate's schema set).
K8S_VERSION = "1.30"

SECRET_VALUE = "sk-ant-api03-objects-test-secret-value-0123456789"
MODEL_KEY = "model-key-objects-test-9876543210"
IN_CLUSTER_ENV = {"POD_NAME": "orch-abc12", "POD_NAMESPACE": "evals", "POD_UID": "0f3b6a2e-7e0c-4f5e-9a55-1b1c2d3e4f50",
                  "JOB_NAME": "nightly-1", "JOB_UID": "9a8b7c6d-0000-4000-8000-000000000001"}


def validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def spec(**kw: Any) -> LaneSpec:
    base: dict[str, Any] = dict(
        n8n_version="2.41.1",
        env={"E2E_TESTS": "true", "N8N_ENABLED_MODULES": "instance-ai,agents", "N8N_AI_ASSISTANT_BASE_URL": "",
             "N8N_PORT": "9999", "ANTHROPIC_API_KEY": "should-be-dropped"},
        secret_env={"ANTHROPIC_API_KEY": SECRET_VALUE, "N8N_INSTANCE_AI_MODEL_API_KEY": MODEL_KEY},
        image="registry.invalid/n8n-eval-lane:2.41.1",
        resources=Resources(cpu_request="250m", cpu_limit="1500m", memory_request="768Mi", memory_limit="2Gi"),
    )
    base.update(kw)
    return LaneSpec(**base)


def all_objects(owner: k8s.OwnerRef | None = None, run_id: str = "20261202-nightly") -> list[dict[str, Any]]:
    s = spec()
    return [
        k8s.secret_object(run_id, "evals", s.secret_env, owner),
        k8s.network_policy_object(run_id, "evals", owner),
        k8s.pod_object(run_id, 0, "evals", s, secret=k8s.secret_name(run_id), owner=owner),
        k8s.pod_object(run_id, 3, "evals", s, secret=k8s.secret_name(run_id), attempt=2, owner=owner),
        k8s.service_object(run_id, "evals", owner=owner),
    ]


@pytest.mark.parametrize("owned", [False, True], ids=["out-of-cluster", "in-cluster"])
def test_every_object_passes_strict_schema(owned: bool) -> None:
    owner = k8s.owner_from_env(IN_CLUSTER_ENV) if owned else None
    for obj in all_objects(owner):
        validate(obj)  # raises on the first error


def test_pod_without_secret_env_passes_and_has_no_secret_refs() -> None:
    pod = k8s.pod_object("r1", 0, "evals", spec(secret_env={}), secret="unused")
    validate(pod)
    assert "secretKeyRef" not in json.dumps(pod)


@pytest.mark.parametrize(
    "break_it, where",
    [
        (lambda p: p["spec"]["containers"][0]["ports"][0].__setitem__("containerPort", "5678"), "containerPort"),
        (lambda p: p["spec"]["containers"][0]["securityContext"].__setitem__("runAsRoot", False), "runAsRoot"),
        (lambda p: p["spec"].__setitem__("restartPolicy", 7), "restartPolicy"),
        (lambda p: p["spec"]["containers"][0].pop("name"), "name"),
    ],
    ids=["port-as-string", "unknown-field", "wrong-type", "missing-required"],
)
def test_a_wrong_pod_fails_validation(break_it, where: str) -> None:
    pod = copy.deepcopy(k8s.pod_object("r1", 0, "evals", spec(), secret="s"))
    break_it(pod)
    with pytest.raises(kubernetes_validate.ValidationError) as info:
        validate(pod)
    assert where in (info.value.message + " ".join(map(str, info.value.path)))


def test_a_wrong_network_policy_fails_validation() -> None:
    policy = k8s.network_policy_object("r1", "evals")
    policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"] = ["not", "a", "map"]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(policy)


def test_labels_on_every_object() -> None:
    run_id = "20261202-nightly"
    for obj in all_objects():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "n8n-eval-lane"
        assert labels["app.kubernetes.io/managed-by"] == "n8n-eval-orchestrator"
        assert labels["app.kubernetes.io/instance"] == run_id
        assert labels["n8n-eval/run-id"] == run_id
        assert obj["metadata"]["annotations"]["n8n-eval/run-id"] == run_id
        assert all(k8s.check_label_value(v) for v in labels.values())
    pod = all_objects()[3]
    assert pod["metadata"]["labels"]["n8n-eval/lane-index"] == "3"
    assert pod["metadata"]["name"] == "n8n-lane-20261202-nightly-3-2"


def test_sweep_selector_matches_every_object_of_the_run_only() -> None:
    def matches(selector: str, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in (p.split("=", 1) for p in selector.split(",")))

    for obj in all_objects(run_id="run-a"):
        assert matches(k8s.sweep_selector("run-a"), obj["metadata"]["labels"])
        assert matches(k8s.sweep_selector(None), obj["metadata"]["labels"])
        assert not matches(k8s.sweep_selector("run-b"), obj["metadata"]["labels"])


def test_owner_references_only_in_cluster_and_same_namespace() -> None:
    pod_owner = k8s.owner_from_env(IN_CLUSTER_ENV)
    assert pod_owner is not None
    for obj in all_objects(pod_owner):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref == {"apiVersion": "v1", "kind": "Pod", "name": "orch-abc12", "uid": IN_CLUSTER_ENV["POD_UID"],
                       "controller": False}
    for obj in all_objects(None):
        assert "ownerReferences" not in obj["metadata"]
    assert k8s.owner_from_env({}) is None
    assert k8s.owner_from_env({"POD_NAMESPACE": "evals", "POD_NAME": "x"}) is None  # no uid: no owner
    # A namespaced owner in another namespace would make the GC delete the lane at once: not set.
    other = k8s.pod_object("r1", 0, "elsewhere", spec(), secret="s", owner=pod_owner)
    assert "ownerReferences" not in other["metadata"]


def test_job_owner_from_downward_api_labels() -> None:
    job = k8s.owner_from_env(IN_CLUSTER_ENV, "job")
    assert job is not None and (job.kind, job.api_version, job.name) == ("Job", "batch/v1", "nightly-1")
    assert k8s.owner_from_env(IN_CLUSTER_ENV, "none") is None
    validate(k8s.service_object("r1", "evals", owner=job))


def test_no_secret_value_anywhere_in_the_pod() -> None:
    pod = k8s.pod_object("r1", 0, "evals", spec(), secret="n8n-lanes-r1-env")
    text = json.dumps(pod)
    assert SECRET_VALUE not in text and MODEL_KEY not in text and "should-be-dropped" not in text
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    for key in ("ANTHROPIC_API_KEY", "N8N_INSTANCE_AI_MODEL_API_KEY"):
        assert "value" not in env[key]
        assert env[key]["valueFrom"] == {"secretKeyRef": {"name": "n8n-lanes-r1-env", "key": key, "optional": False}}
    # the per-run Secret is where the values live
    secret = k8s.secret_object("r1", "evals", spec().secret_env)
    assert secret["stringData"] == {"ANTHROPIC_API_KEY": SECRET_VALUE, "N8N_INSTANCE_AI_MODEL_API_KEY": MODEL_KEY}


def test_pod_env_forces_in_pod_listen_address_and_port() -> None:
    pod = k8s.pod_object("r1", 0, "evals", spec(), secret="s")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["N8N_LISTEN_ADDRESS"] == "0.0.0.0"
    assert env["N8N_PORT"] == "5678"  # the profile's 9999 does not win in a pod
    assert env["E2E_TESTS"] == "true" and env["N8N_AI_ASSISTANT_BASE_URL"] == ""
    assert env["N8N_USER_FOLDER"] == k8s.USER_FOLDER


def test_pod_security_probes_and_resources() -> None:
    pod = k8s.pod_object("r1", 0, "evals", spec(), secret="s", run_as_user=1001)
    pspec = pod["spec"]
    (c,) = pspec["containers"]
    assert pspec["securityContext"]["runAsNonRoot"] is True
    assert pspec["securityContext"]["runAsUser"] == 1001
    assert pspec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pspec["automountServiceAccountToken"] is False
    assert pspec["enableServiceLinks"] is False
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz/readiness", "port": "http", "scheme": "HTTP"}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # memory request = limit (the LaneSpec asked 768Mi/2Gi): a lane is never the first to be OOM-killed
    assert c["resources"] == {"requests": {"cpu": "250m", "memory": "2Gi", "ephemeral-storage": "2Gi"},
                              "limits": {"cpu": "1500m", "memory": "2Gi", "ephemeral-storage": "2Gi"}}
    assert c["image"] == "registry.invalid/n8n-eval-lane:2.41.1"
    assert k8s.pod_object("r1", 0, "evals", spec(), secret="s", image="other:1")["spec"]["containers"][0]["image"] == "other:1"


def test_network_policy_selects_run_lanes_and_admits_only_the_orchestrator() -> None:
    policy = k8s.network_policy_object("run-a", "evals")
    pod_labels = k8s.pod_object("run-a", 1, "evals", spec(), secret="s")["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "n8n-eval-lane", "n8n-eval/run-id": "run-a"}
    assert selector.items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "n8n-eval-orchestrator"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 5678}]


def test_one_headless_service_names_every_lane_of_its_run() -> None:
    """One Service per run (not per lane): headless, selecting every lane pod of the run (a
    replacement too) and nothing of another run; each pod is addressed by hostname.subdomain."""
    pod = k8s.pod_object("run-a", 2, "evals", spec(), secret="s", attempt=1)
    replacement = k8s.pod_object("run-a", 2, "evals", spec(), secret="s", attempt=2)
    other_run = k8s.pod_object("run-b", 2, "evals", spec(), secret="s", attempt=1)
    svc = k8s.service_object("run-a", "evals")
    sel = svc["spec"]["selector"]
    assert svc["metadata"]["name"] == "n8n-lanes-run-a" == pod["spec"]["subdomain"] == replacement["spec"]["subdomain"]
    assert pod["spec"]["hostname"] == pod["metadata"]["name"]
    assert sel.items() <= pod["metadata"]["labels"].items()
    assert sel.items() <= replacement["metadata"]["labels"].items()
    assert not sel.items() <= other_run["metadata"]["labels"].items()
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["ports"] == [{"name": "http", "port": 5678, "targetPort": "http", "protocol": "TCP"}]
    assert set(k8s.sweep_selector("run-a").split(",")) <= {f"{k}={v}" for k, v in svc["metadata"]["labels"].items()}


@pytest.mark.parametrize("run_id", ["Run_2026/12/02 nightly", "x" * 120, "UPPER", "a--b-", "20261202t0930-3f2a"])
def test_run_label_is_a_valid_label_and_dns_fragment(run_id: str) -> None:
    label = k8s.run_label(run_id)
    assert k8s.check_label_value(label) and len(label) <= 40
    assert label == k8s.run_label(run_id)
    name = k8s.pod_name(run_id, 12, 3)
    assert len(name) <= 63
    pod = k8s.pod_object(run_id, 12, "evals", spec(), secret="s", attempt=3)
    validate(pod)  # hostname and subdomain are DNS labels
    validate(k8s.service_object(run_id, "evals"))  # Service names are the strictest (DNS-1035)


def test_run_labels_of_distinct_ids_differ() -> None:
    assert k8s.run_label("Run-A") != k8s.run_label("run-a")
    assert k8s.run_label("x" * 100 + "1") != k8s.run_label("x" * 100 + "2")


def test_lane_url_templates() -> None:
    kw: dict[str, Any] = dict(pod="n8n-lane-r-0-0", service="n8n-lanes-r", namespace="evals", index=2, base_port=5700)
    assert k8s.lane_url(k8s.DEFAULT_URL_TEMPLATE, **kw) == (
        "http://n8n-lane-r-0-0.n8n-lanes-r.evals.svc.cluster.local.:5678")  # the pod's name under the run's Service
    assert k8s.lane_url(k8s.DEFAULT_URL_TEMPLATE, cluster_domain="corp.k8s", **kw) == (
        "http://n8n-lane-r-0-0.n8n-lanes-r.evals.svc.corp.k8s.:5678")  # fully qualified: no search-domain fan-out
    assert k8s.lane_url("http://127.0.0.1:{local_port}/", **kw) == "http://127.0.0.1:5702"
    with pytest.raises(ValueError, match="url_template"):
        k8s.lane_url("http://{nope}:1", **kw)


def test_secret_keys_must_be_env_names() -> None:
    with pytest.raises(ValueError, match="bad key"):
        k8s.secret_object("r1", "evals", {"bad key": "v"})


# ---- egress ---------------------------------------------------------------------------------------

def test_default_egress_allows_dns_and_443_out_only() -> None:
    policy = k8s.network_policy_object("run-a", "evals")
    validate(policy)
    rules = policy["spec"]["egress"]
    dns, out = rules
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                          "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},
                         {"ipBlock": {"cidr": "169.254.20.10/32"}}]
    assert k8s.egress_allows(rules, "160.79.104.10", 443)  # a model provider's public address (not contacted)
    assert not k8s.egress_allows(rules, "160.79.104.10", 80)
    assert not k8s.egress_allows(rules, "169.254.169.254", 443)  # cloud metadata
    assert not k8s.egress_allows(rules, "169.254.169.254", 80)
    for in_cluster in ("10.96.0.1", "10.244.3.7", "172.20.0.10", "192.168.1.5", "100.64.0.10"):
        assert not k8s.egress_allows(rules, in_cluster, 443), in_cluster


def test_egress_is_configurable_and_excepts_stay_inside_their_block() -> None:
    egress = k8s.LaneEgress.model_validate({
        "allowCidrs": ["160.79.104.0/23", "0.0.0.0/0", "::/0"], "ports": [443, 8443],
        "clusterCidrs": ["10.100.0.0/16"], "denyCidrs": ["169.254.169.254/32", "fd00:ec2::254/128"]})
    policy = k8s.network_policy_object("run-a", "evals", egress=egress)
    validate(policy)
    rules = policy["spec"]["egress"]
    blocks = {b["ipBlock"]["cidr"]: b["ipBlock"].get("except", []) for b in rules[1]["to"]}
    assert blocks == {"160.79.104.0/23": [], "0.0.0.0/0": ["10.100.0.0/16", "169.254.169.254/32"],
                      "::/0": ["fd00:ec2::254/128"]}
    assert k8s.egress_allows(rules, "10.96.0.1", 8443)  # outside the declared cluster range now
    assert not k8s.egress_allows(rules, "10.100.3.4", 443)
    assert not k8s.egress_allows(rules, "fd00:ec2::254", 443)
    off = k8s.network_policy_object("run-a", "evals", egress=k8s.LaneEgress.model_validate({"enabled": False}))
    assert off["spec"]["policyTypes"] == ["Ingress"] and "egress" not in off["spec"]
    with pytest.raises(ValueError, match="10.0.0.1/8"):
        k8s.LaneEgress.model_validate({"allowCidrs": ["10.0.0.1/8"]})


# ---- lanes.pod ------------------------------------------------------------------------------------

POD_VALUES: dict[str, Any] = {
    "imagePullSecrets": ["regcred", {"name": "other"}],
    "nodeSelector": {"n8n-eval/lanes": "true"},
    "tolerations": [{"key": "n8n-eval", "operator": "Equal", "value": "lanes", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                   "whenUnsatisfiable": "ScheduleAnyway",
                                   "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "n8n-eval-lane"}}}],
    "priorityClassName": "n8n-eval-lanes",
    "resources": {"requests": {"cpu": "1", "memory": "3Gi"}, "limits": {"cpu": "2", "memory": "3Gi"}},
    "terminationGracePeriodSeconds": 20,
    "readyTimeoutSeconds": 1200,
}


@pytest.mark.parametrize("version", ["1.27", "1.30", "1.33"])
def test_lane_pod_values_reach_the_pod_and_validate(version: str) -> None:
    pod_opts = k8s.LanePod.model_validate(POD_VALUES)
    pod = k8s.pod_object("r1", 0, "evals", spec(), secret="s", pod=pod_opts)
    kubernetes_validate.validate(pod, version, strict=True)
    pspec = pod["spec"]
    assert pspec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}]
    assert pspec["nodeSelector"] == POD_VALUES["nodeSelector"]
    assert pspec["tolerations"] == POD_VALUES["tolerations"]
    assert pspec["affinity"] == POD_VALUES["affinity"]
    assert pspec["topologySpreadConstraints"] == POD_VALUES["topologySpreadConstraints"]
    assert pspec["priorityClassName"] == "n8n-eval-lanes"
    assert pspec["terminationGracePeriodSeconds"] == 20
    (c,) = pspec["containers"]
    assert c["resources"] == {"requests": {**POD_VALUES["resources"]["requests"], "ephemeral-storage": "2Gi"},
                              "limits": {**POD_VALUES["resources"]["limits"], "ephemeral-storage": "2Gi"}}
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 1200
    bare = k8s.pod_object("r1", 0, "evals", spec(), secret="s")["spec"]
    assert not {"imagePullSecrets", "nodeSelector", "tolerations", "affinity", "priorityClassName"} & set(bare)


def test_lane_pod_memory_request_must_equal_limit() -> None:
    with pytest.raises(ValueError, match="memory requests"):
        k8s.LanePod.model_validate({"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}})
    with pytest.raises(ValueError):
        k8s.LanePod.model_validate({"nodeSelectr": {}})  # a typo is refused, not ignored
    assert k8s.LanePod.model_validate({}).ready_timeout_seconds >= 600


# ---- build runner and sandbox next to n8n -----------------------------------------------------------

def test_the_build_runners_claude_calls_the_lanes_model_route() -> None:
    """Issue 37: every model call of the run goes through the gateway. A lane's model route (the
    gateway's ``/lane/<index>``) is its build runner's ``ANTHROPIC_BASE_URL`` too, so the ``remote``
    builder's claude is counted against the unit like the lane's own calls; without a route, none."""
    pod_opts = k8s.LanePod.model_validate({"buildRunner": {"enabled": True}})
    routed = spec()
    routed.env["N8N_INSTANCE_AI_MODEL_URL"] = "http://gw.evals.svc:8788/lane/3"
    for lane_spec, expected in ((routed, ["http://gw.evals.svc:8788/lane/3"]), (spec(), [])):
        pod = k8s.pod_object("r1", 3, "evals", lane_spec, secret="lane-keys", pod=pod_opts,
                             sidecar_image="registry.invalid/n8n-eval-orchestrator:1")
        runner = pod["spec"]["containers"][1]
        assert [e["value"] for e in runner["env"] if e["name"] == "ANTHROPIC_BASE_URL"] == expected


@pytest.mark.parametrize("version", ["1.27", "1.30", "1.33"])
def test_lane_pod_with_build_runner_and_sandbox(version: str) -> None:
    pod_opts = k8s.LanePod.model_validate({"buildRunner": {"enabled": True}, "sandbox": {"enabled": True}})
    pod = k8s.pod_object("r1", 0, "evals", spec(), secret="lane-keys", pod=pod_opts,
                         sidecar_image="registry.invalid/n8n-eval-orchestrator:1")
    kubernetes_validate.validate(pod, version, strict=True)
    n8n, runner, sandbox = pod["spec"]["containers"]
    assert (n8n["name"], runner["name"], sandbox["name"]) == ("n8n", "build-runner", "sandbox")
    assert runner["image"] == sandbox["image"] == "registry.invalid/n8n-eval-orchestrator:1"
    assert runner["command"][:4] == ["python", "-m", "orchestrator.builders.claude.build_runner", "serve"]
    assert "http://127.0.0.1:5678" in runner["command"]
    assert sandbox["command"][:4] == ["python", "-m", "orchestrator.sandbox", "serve"]
    assert {"name": "N8N_EVAL_SANDBOX_URL", "value": "http://127.0.0.1:8791"} in n8n["env"]
    # the runner's model key: the same Secret reference as n8n's, never a value
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in runner["env"] if "valueFrom" in e}
    assert refs == {"ANTHROPIC_API_KEY": "lane-keys", "N8N_INSTANCE_AI_MODEL_API_KEY": "lane-keys",
                    "N8N_EVAL_RUNNER_TOKEN": "lane-keys"}
    assert SECRET_VALUE not in json.dumps(pod)
    for c in (runner, sandbox):
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"]
    policy = k8s.network_policy_object("r1", "evals", build_runner=True)
    assert {"protocol": "TCP", "port": 8790} in policy["spec"]["ingress"][0]["ports"]
    svc = k8s.service_object("r1", "evals", build_runner=True)
    validate(svc)
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["http", "build-runner"]
    bare = k8s.pod_object("r1", 0, "evals", spec(), secret="s")
    assert [c["name"] for c in bare["spec"]["containers"]] == ["n8n"]


# ---- local disk and disruption --------------------------------------------------------------------

DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


@pytest.mark.parametrize("version", ["1.27", "1.30", "1.33"])
@pytest.mark.parametrize("sidecars", [False, True], ids=["n8n-only", "with-sidecars"])
def test_lane_pod_bounds_local_disk_and_is_not_disrupted(version: str, sidecars: bool) -> None:
    """Every container has an ephemeral-storage request and limit, every emptyDir a sizeLimit (a lane
    filling a node's disk is evicted alone), and the pod carries the same do-not-disrupt annotations as
    the chart's orchestrator pod (templates/_helpers.tpl): consolidation never stops a running lane."""
    opts = {"buildRunner": {"enabled": True}, "sandbox": {"enabled": True}} if sidecars else {}
    pod = k8s.pod_object("r1", 0, "evals", spec(), secret="s", pod=k8s.LanePod.model_validate(opts))
    kubernetes_validate.validate(pod, version, strict=True)
    containers, volumes = pod["spec"]["containers"], pod["spec"]["volumes"]
    assert len(containers) == (3 if sidecars else 1) and len(volumes) == (4 if sidecars else 2)
    for c in containers:
        assert c["resources"]["requests"]["ephemeral-storage"] == c["resources"]["limits"]["ephemeral-storage"], c["name"]
    assert {v["name"]: v["emptyDir"]["sizeLimit"] for v in volumes} == {
        "lane-data": "1Gi", "tmp": "256Mi", **({"builds": "512Mi", "sandbox": "512Mi"} if sidecars else {})}
    assert DO_NOT_DISRUPT.items() <= pod["metadata"]["annotations"].items()


def test_lane_pod_disk_and_disruption_options() -> None:
    """The knobs reach the pod; a storage size given in ``resources`` wins; do-not-disrupt can be off;
    a malformed quantity is refused naming it."""
    opts = k8s.LanePod.model_validate({
        "ephemeralStorage": "4Gi", "dataSizeLimit": "3Gi", "tmpSizeLimit": "512Mi", "doNotDisrupt": False,
        "buildRunner": {"enabled": True, "volumeSizeLimit": "2Gi",
                        "resources": {"limits": {"memory": "1Gi", "ephemeral-storage": "3Gi"}}}})
    pod = k8s.pod_object("r1", 0, "evals", spec(), secret="s", pod=opts)
    validate(pod)
    n8n, runner = pod["spec"]["containers"]
    assert n8n["resources"]["limits"]["ephemeral-storage"] == "4Gi"
    assert runner["resources"]["requests"]["ephemeral-storage"] == runner["resources"]["limits"]["ephemeral-storage"] == "3Gi"
    assert {v["name"]: v["emptyDir"]["sizeLimit"] for v in pod["spec"]["volumes"]} == {
        "lane-data": "3Gi", "tmp": "512Mi", "builds": "2Gi"}
    assert not DO_NOT_DISRUPT.keys() & pod["metadata"]["annotations"].keys()
    with pytest.raises(ValueError, match="2 GB"):
        k8s.LanePod.model_validate({"ephemeralStorage": "2 GB"})


@pytest.mark.parametrize("version", ["1.27", "1.30", "1.33"])
def test_lane_dns_egress_reaches_node_local_dns_cache(version: str) -> None:
    """Lane DNS goes to the cluster DNS pods and to NodeLocal DNSCache's link-local address (53 UDP and
    TCP), as the chart's orchestrator policy allows; the address list is a knob, an empty one drops it,
    a malformed address is refused naming it."""
    policy = k8s.network_policy_object("r1", "evals")
    kubernetes_validate.validate(policy, version, strict=True)
    dns = policy["spec"]["egress"][0]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert dns["to"][1:] == [{"ipBlock": {"cidr": "169.254.20.10/32"}}]
    assert "podSelector" in dns["to"][0]
    for proto in ("UDP", "TCP"):
        assert k8s.egress_allows([dns], "169.254.20.10", 53, proto)
    assert not k8s.egress_allows([dns], "169.254.20.10", 80)
    other = k8s.network_policy_object("r1", "evals", egress=k8s.LaneEgress.model_validate(
        {"nodeLocalDnsIps": ["169.254.25.10", "fd00::a"]}))
    validate(other)
    assert [p["ipBlock"]["cidr"] for p in other["spec"]["egress"][0]["to"][1:]] == ["169.254.25.10/32", "fd00::a/128"]
    none = k8s.network_policy_object("r1", "evals", egress=k8s.LaneEgress.model_validate({"nodeLocalDnsIps": []}))
    assert not k8s.egress_allows(none["spec"]["egress"][:1], "169.254.20.10", 53, "UDP")
    with pytest.raises(ValueError, match="169.254.20"):
        k8s.LaneEgress.model_validate({"nodeLocalDnsIps": ["169.254.20"]})
