"""The Helm chart, linted and rendered with real Helm templating (helm-python-sdk embeds Helm v4),
every rendered object validated against the Kubernetes OpenAPI schema (kubernetes-validate, strict).

prometheus-operator kinds (ServiceMonitor, PodMonitor) are CRDs with no upstream schema: they are
rendered and checked by hand below, and kubernetes-validate is shown to have no schema for them.
No cluster is contacted: this proves the chart renders to valid objects, not that a cluster runs them.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from unit.lanes.kubernetes.test_k8s_contract import RecordingApiServer, rbac_of

from orchestrator.lanes.kubernetes import objects as k8s
from repo.test_workflows import PLANNED_SURFACE

CHART = Path(__file__).resolve().parents[2] / "helm" / "n8n-eval-orchestrator"
K8S_VERSION = "1.30"
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "CiliumNetworkPolicy"}
#: GA in Kubernetes 1.30: no such API on 1.27 (the chart's admissionPolicy.enabled=false there).
VAP_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
RELEASE, NAMESPACE = "n8n-eval-orchestrator", "evals"

AB_VALUES: dict[str, Any] = {
    "ab": {
        "enabled": True,
        "arms": [
            {"name": "control", "model": "anthropic/claude-sonnet-4-6",
             "env": {"N8N_FEATURE_FLAG_OVERRIDES": '{"118_instance_ai_setup_overhaul":"control"}'}},
            {"name": "variant", "model": "openai/gpt-5.5",
             "env": {"N8N_FEATURE_FLAG_OVERRIDES": '{"118_instance_ai_setup_overhaul":"variant"}'}},
        ],
    },
    "run": {"suite": "smoke", "tier": "smoke", "iterations": 2, "lanes": 3, "concurrency": 6, "maxCostUsd": 25.5,
            "env": {"N8N_INSTANCE_AI_MODEL": "anthropic/claude-sonnet-4-6"}},
    "lanes": {"ownerKind": "job"},
    "secrets": {
        "anthropicApiKey": {"existingSecret": "eval-keys", "key": "anthropic"},
        "langsmithApiKey": {"existingSecret": "eval-keys", "key": "langsmith"},
        "langtracerApiKey": {"existingSecret": "tracer", "key": "LANGTRACER_API_KEY"},
        "instanceAiModelApiKey": {"existingSecret": "eval-keys", "key": "anthropic"},
    },
    "langtracerUrl": "http://langtracer.evals.svc:8080",
    "metrics": {"port": 9464, "pushgateway": "http://pushgateway.monitoring.svc:9091",
                "serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "results": {"mountPath": "/results", "persistence": {"enabled": True, "size": "10Gi"}},
    "image": {"repository": "registry.invalid/n8n-eval-orchestrator", "tag": "abc123", "pullPolicy": "Always"},
    "laneImage": {"repository": "registry.invalid/n8n-eval-lane", "tag": "abc123", "pullPolicy": "Always"},
}

#: Every new knob set: lane pod scheduling/sizing, egress, cluster domain, namespace, job owner.
FULL_VALUES: dict[str, Any] = {
    "namespace": {"create": True, "podSecurity": "privileged"},  # the sandbox's bwrap: not "restricted"
    "terminationGracePeriodSeconds": 600,
    "janitor": {"enabled": True, "schedule": "*/5 * * * *", "graceSeconds": 120},
    "lanes": {
        "ownerKind": "job", "existingSecret": "lane-keys", "clusterDomain": "corp.k8s",
        "pod": {
            "imagePullSecrets": ["regcred", {"name": "other"}],
            "nodeSelector": {"n8n-eval/lanes": "true"},
            "tolerations": [{"key": "n8n-eval", "operator": "Equal", "value": "lanes", "effect": "NoSchedule"}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                   "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "n8n-eval-lane"}}}}]}},
            "topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone",
                                           "whenUnsatisfiable": "ScheduleAnyway",
                                           "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "n8n-eval-lane"}}}],
            "priorityClassName": "n8n-eval-lanes",
            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "3Gi"}},
            "terminationGracePeriodSeconds": 20,
            "readyTimeoutSeconds": 1200,
            "buildRunner": {"enabled": True},
            "sandbox": {"enabled": True, "image": "registry.invalid/sandbox:1"},
        },
        "egress": {"allowCidrs": ["0.0.0.0/0"], "ports": [443], "clusterCidrs": ["10.96.0.0/12", "10.244.0.0/16"]},
    },
    "orchestratorNetworkPolicy": {"apiServer": {"cilium": True}},
}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = by_kind(docs, kind)
    return doc


def component(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["labels"].get("app.kubernetes.io/component", ""))


def cron(docs: list[dict[str, Any]], which: str = "nightly") -> dict[str, Any]:
    (doc,) = [d for d in by_kind(docs, "CronJob") if component(d) == which]
    return doc


def pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The orchestrator's pod templates (nightly CronJob, A/B Job) — not the janitor's."""
    out = [d["spec"]["jobTemplate"]["spec"]["template"] for d in by_kind(docs, "CronJob") if component(d) != "janitor"]
    out += [d["spec"]["template"] for d in by_kind(docs, "Job")]
    return out


def container(template: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any]
    (c,) = template["spec"]["containers"]
    return c


@pytest.fixture(scope="module")
def defaults() -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def ab() -> list[dict[str, Any]]:
    return render(AB_VALUES)


def test_helm_engine_is_v4() -> None:
    assert helm.helm_sdk_version().startswith("v4.")


@pytest.mark.parametrize("values", [None, AB_VALUES], ids=["defaults", "ab"])
def test_lint_is_clean(values) -> None:
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{K8S_VERSION}.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("version", ["1.27", "1.30", "1.33"])
@pytest.mark.parametrize("values", [None, AB_VALUES, "full"], ids=["defaults", "ab", "full"])
def test_every_rendered_object_is_valid(values, version: str) -> None:
    docs = render(FULL_VALUES if values == "full" else values)
    assert docs
    for doc in docs:
        if doc["kind"] in CRD_KINDS or (doc["kind"] in VAP_KINDS and version == "1.27"):
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(doc, version, strict=True)
            continue
        kubernetes_validate.validate(doc, version, strict=True)


#: What #26/#35 add to every kubernetes render: the orchestrator's priority class and NetworkPolicy,
#: the janitor's own account, the admission policies (lane pods' shape; this release's objects only).
#: No PDB (#35).
HARDENING = ["NetworkPolicy", "PriorityClass", "Role", "RoleBinding", "ServiceAccount", "ValidatingAdmissionPolicy",
             "ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def named(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    (doc,) = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    return doc


def test_what_each_values_set_renders(defaults, ab) -> None:
    assert sorted(d["kind"] for d in defaults) == sorted(  # the results claim: on by default (#35)
        ["CronJob", "CronJob", "NetworkPolicy", "PersistentVolumeClaim", "Role", "RoleBinding", "Service",
         "Service", "ServiceAccount", *HARDENING]  # Services: metrics, the model gateway (#37)
    )
    assert sorted(component(d) for d in by_kind(defaults, "CronJob")) == ["janitor", "nightly"]
    assert sorted(d["kind"] for d in ab) == sorted(
        ["CronJob", "CronJob", "Job", "NetworkPolicy", "PersistentVolumeClaim", "PodMonitor", "Role", "RoleBinding", "Service",
         "Service", "ServiceAccount", "ServiceMonitor", *HARDENING]
    )
    assert not {"ClusterRole", "ClusterRoleBinding", "Secret"} & {d["kind"] for d in defaults + ab}


EXPECTED_RULES = {
    ("", "pods", "create"), ("", "pods", "delete"), ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"),
    ("", "pods/log", "get"),
    ("", "services", "create"), ("", "services", "delete"), ("", "services", "get"), ("", "services", "list"),
    ("networking.k8s.io", "networkpolicies", "create"), ("networking.k8s.io", "networkpolicies", "delete"),
    ("networking.k8s.io", "networkpolicies", "get"), ("networking.k8s.io", "networkpolicies", "list"),
    ("coordination.k8s.io", "leases", "create"), ("coordination.k8s.io", "leases", "delete"),
    ("coordination.k8s.io", "leases", "get"), ("coordination.k8s.io", "leases", "list"),
    ("coordination.k8s.io", "leases", "patch"),
}
#: The janitor's own Role: list and delete lane objects, read the owner Pod; it creates nothing.
JANITOR_RULES = {
    ("", "pods", "delete"), ("", "pods", "get"), ("", "pods", "list"),
    ("", "services", "delete"), ("", "services", "list"),
    ("networking.k8s.io", "networkpolicies", "delete"), ("networking.k8s.io", "networkpolicies", "list"),
    ("coordination.k8s.io", "leases", "delete"), ("coordination.k8s.io", "leases", "list"),
}
JANITOR = f"{RELEASE}-janitor"
#: Reads made only for a pod the run's watch has not seen yet (the Lease keeper reads the Lease,
#: Service and NetworkPolicy in every run).
ADOPT_READS = {("", "pods", "get")}


def role_rules(docs: list[dict[str, Any]], name: str = RELEASE) -> set[tuple[str, str, str]]:
    (role,) = [d for d in by_kind(docs, "Role") if d["metadata"]["name"] == name]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_verbs_exactly(defaults) -> None:
    rules = role_rules(defaults)
    assert rules == EXPECTED_RULES
    assert role_rules(defaults, JANITOR) == JANITOR_RULES
    janitor = cron(defaults, "janitor")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert janitor["serviceAccountName"] == JANITOR
    assert named(defaults, "RoleBinding", "-janitor")["subjects"] == [
        {"kind": "ServiceAccount", "name": JANITOR, "namespace": NAMESPACE}]
    assert not any("*" in part for rule in rules for part in rule)
    binding = named(defaults, "RoleBinding", RELEASE)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELEASE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}]


async def renewed(backend: Any, timeout_s: float = 30.0) -> None:
    """Wait until the backend's Lease keeper renewed the run's Lease once (a read, then a patch)."""
    import time

    deadline = time.monotonic() + timeout_s
    first = backend.keeper.renewed_at
    while backend.keeper.renewed_at == first:
        assert time.monotonic() < deadline, "the Lease was never renewed"
        await asyncio.sleep(0.05)


async def backend_and_janitor_calls(tmp_path: Path, owner_kind: str = "pod") -> tuple[set[tuple[str, str, str]],
                                                                                      set[tuple[str, str, str]]]:
    """(group, resource, verb) of a full lane lifecycle with the chart's settings (an existing lane
    Secret, owned by the orchestrator Pod/Job) — taking over a killed orchestrator's run, renewing the
    Lease — and of a janitor pass over a dead run after it."""
    from unit.lanes.kubernetes.test_k8s_contract import IN_CLUSTER_ENV, NS, lane_spec, make_backend

    from orchestrator.lanes.kubernetes.janitor import Janitor

    env = dict(IN_CLUSTER_ENV, JOB_NAME="nightly-1", JOB_UID="dddddddd-0000-4000-8000-000000000004")
    with RecordingApiServer() as server:
        killed = make_backend(server, tmp_path, environ=env, existing_secret="n8n-eval-keys", owner_kind=owner_kind,
                              lease_ttl_s=1)
        await killed.start_lane(0, lane_spec())
        await killed.close()  # killed mid-run: the next orchestrator takes the run over (--resume-existing)
        backend = make_backend(server, tmp_path, environ=env, existing_secret="n8n-eval-keys", owner_kind=owner_kind,
                               lease_ttl_s=1, takeover=True)
        lane = await backend.start_lane(0, lane_spec())
        await backend.wait_ready(lane, 10)
        await renewed(backend)
        assert await backend.health(lane)
        await backend.logs(lane)
        await backend.teardown(lane)
        dead = make_backend(server, tmp_path, environ=env, existing_secret="n8n-eval-keys", owner_kind=owner_kind,
                            run_id="dead-run")
        await dead.start_lane(0, lane_spec())
        await backend.close()
        await dead.close()
        server.settle()  # the closed backends' watches sent their last request
        split = len(server.state.requests)
        Janitor(server.api_client(), NS, delete_secrets=False).run()  # the owner is gone (404)
        assert not server.names("pods")
        return rbac_of(server.state.requests[:split]), rbac_of(server.state.requests[split:])


async def test_rbac_is_what_the_backend_and_janitor_actually_call(defaults, tmp_path) -> None:
    """Each Role grants exactly the (group, resource, verb) its recorded API calls use: the
    orchestrator's the backend's, the janitor's the janitor's."""
    backend, janitor = await backend_and_janitor_calls(tmp_path)
    assert backend | ADOPT_READS == role_rules(defaults)
    assert janitor == role_rules(defaults, JANITOR)
    job = render({"lanes": {"ownerKind": "job", "existingSecret": "n8n-eval-keys"}})
    # with Job owners the janitor reads the Job, not a Pod; its Role keeps pods/get for Pod owners
    backend, janitor = await backend_and_janitor_calls(tmp_path / "job", "job")
    assert backend | ADOPT_READS == role_rules(job)
    assert janitor | {("", "pods", "get")} == role_rules(job, JANITOR)
    assert ("batch", "jobs", "get") in role_rules(job, JANITOR) and ("batch", "jobs", "get") not in role_rules(job)


def test_existing_secret_is_required_and_no_secret_rbac_and_no_role_for_static() -> None:
    with pytest.raises(helm.HelmValuesError, match="/lanes/existingSecret"):
        render({"lanes": {"existingSecret": ""}})
    docs = render({"lanes": {"existingSecret": "lane-keys"}})
    assert not [r for r in role_rules(docs) if r[1] == "secrets"]
    env = {e["name"]: e for e in container(pod_specs(docs)[0])["env"]}
    assert env["ORCHESTRATOR_K8S_LANE_SECRET"]["value"] == "lane-keys"
    janitor_env = {e["name"]: e for e in container(cron(docs, "janitor")["spec"]["jobTemplate"]["spec"]["template"])["env"]}
    assert janitor_env["ORCHESTRATOR_K8S_LANE_SECRET"]["value"] == "lane-keys"
    static = render({"backend": "static", "staticBaseUrls": ["http://lane-0:5678", "http://lane-1:5678"]})
    assert not by_kind(static, "Role") and not by_kind(static, "RoleBinding")
    args = container(pod_specs(static)[0])["args"]
    assert args[args.index("--backend") + 1] == "static"
    assert args[args.index("--base-url") + 1] == "http://lane-0:5678,http://lane-1:5678"
    assert pod_specs(static)[0]["spec"]["automountServiceAccountToken"] is False


def test_lane_network_policy_matches_the_backend_selectors(defaults) -> None:
    policy = named(defaults, "NetworkPolicy", "-lanes")
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        k8s.LABEL_NAME: k8s.LANE_APP, k8s.LABEL_MANAGED_BY: k8s.MANAGED_BY, k8s.LABEL_RELEASE: RELEASE,
    }
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policy["spec"]["ingress"]
    orchestrators = {k8s.LABEL_NAME: k8s.ORCHESTRATOR_APP, k8s.LABEL_INSTANCE: RELEASE}  # this release's only
    assert rule == {"from": [{"podSelector": {"matchLabels": orchestrators}}],
                    "ports": [{"protocol": "TCP", "port": k8s.N8N_PORT}, {"protocol": "TCP", "port": 8790}]}
    # the chart's policy selects every lane pod the backend makes for this release (the chart passes it) ...
    release = orchestrator_env(defaults)["ORCHESTRATOR_K8S_RELEASE"]
    lane_labels = k8s.pod_object("r1", 0, NAMESPACE, _spec(), secret="s", release=release)["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= lane_labels.items()
    other = k8s.pod_object("r1", 0, NAMESPACE, _spec(), secret="s", release="other")["metadata"]["labels"]
    assert not policy["spec"]["podSelector"]["matchLabels"].items() <= other.items()
    # ... and both policies admit the orchestrator pods the chart runs
    backend_from = k8s.network_policy_object("r1", NAMESPACE, release=release)["spec"]["ingress"][0]["from"][0][
        "podSelector"]
    assert backend_from["matchLabels"] == orchestrators
    for template in pod_specs(defaults):
        labels = template["metadata"]["labels"]
        assert rule["from"][0]["podSelector"]["matchLabels"].items() <= labels.items()
        assert backend_from["matchLabels"].items() <= labels.items()


def _spec():
    from orchestrator.lanes.model import LaneSpec

    return LaneSpec(n8n_version="2.41.1")


@pytest.mark.parametrize("which", ["defaults", "ab"])
def test_security_context_and_volumes(which, defaults, ab) -> None:
    docs = defaults if which == "defaults" else ab
    for template in pod_specs(docs):
        spec = template["spec"]
        assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                           "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
        c = container(template)
        assert c["securityContext"] == {"runAsNonRoot": True, "privileged": False, "allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                                        "seccompProfile": {"type": "RuntimeDefault"}}
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts == {"tmp": "/tmp", "results": "/results"}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["tmp"] == {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}
        claim = one(docs, "PersistentVolumeClaim")  # on by default: a failed night keeps its results
        assert volumes["results"]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
        assert claim["spec"]["resources"]["requests"]["storage"] == ("5Gi" if which == "defaults" else "10Gi")
        assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert spec["restartPolicy"] == "Never"
        assert c["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}


def test_downward_api_env_is_what_the_backend_reads(defaults, ab) -> None:
    want = {k8s.ENV_POD_NAME: "metadata.name", k8s.ENV_POD_NAMESPACE: "metadata.namespace",
            k8s.ENV_POD_UID: "metadata.uid"}
    for template in pod_specs(defaults):
        env = {e["name"]: e for e in container(template)["env"]}
        assert {k: env[k]["valueFrom"]["fieldRef"]["fieldPath"] for k in want} == want
        assert k8s.ENV_JOB_UID not in env
        assert env["ORCHESTRATOR_K8S_OWNER_KIND"]["value"] == "pod"
    (job,) = by_kind(ab, "Job")
    env = {e["name"]: e for e in container(job["spec"]["template"])["env"]}
    assert env[k8s.ENV_JOB_NAME]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['batch.kubernetes.io/job-name']"
    assert env[k8s.ENV_JOB_UID]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['batch.kubernetes.io/controller-uid']"
    assert env["ORCHESTRATOR_K8S_OWNER_KIND"]["value"] == "job"
    assert env["ORCHESTRATOR_LANE_IMAGE"]["value"] == "registry.invalid/n8n-eval-lane:abc123"
    assert env["ORCHESTRATOR_K8S_IMAGE_PULL_POLICY"]["value"] == "Always"


def test_secrets_are_references_only(defaults, ab) -> None:
    for template in pod_specs(defaults):  # no existingSecret given: no secret env at all
        names = {e["name"] for e in container(template)["env"]}
        assert not names & {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "LANGSMITH_API_KEY", "LANGTRACER_API_KEY"}
    for template in pod_specs(ab):
        env = {e["name"]: e for e in container(template)["env"]}
        assert env["ANTHROPIC_API_KEY"] == {"name": "ANTHROPIC_API_KEY",
                                            "valueFrom": {"secretKeyRef": {"name": "eval-keys", "key": "anthropic"}}}
        assert env["LANGSMITH_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "eval-keys", "key": "langsmith"}
        assert env["LANGTRACER_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "tracer"
        assert env["N8N_INSTANCE_AI_MODEL_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "anthropic"
        assert env["LANGTRACER_URL"]["value"] == "http://langtracer.evals.svc:8080"
        for name in ("ANTHROPIC_API_KEY", "LANGSMITH_API_KEY", "LANGTRACER_API_KEY", "N8N_INSTANCE_AI_MODEL_API_KEY"):
            assert "value" not in env[name]


def test_inline_secret_values_are_refused() -> None:
    with pytest.raises(helm.HelmValuesError, match=r"/secrets/anthropicApiKey.*'value' not allowed"):
        render({"secrets": {"anthropicApiKey": {"existingSecret": "", "key": "k", "value": "sk-ant-inline-0123456789"}}})


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_cronjob_runs_the_nightly_sweep_from_values() -> None:
    docs = render({"nightly": {"enabled": True, "schedule": "30 3 * * 1-5", "timeZone": "Etc/UTC"},
                   "run": {"suite": "full", "tier": "full", "iterations": 5, "lanes": 6, "concurrency": 12,
                           "casesPaths": ["cases/instance-ai"]}})
    nightly = cron(docs)
    assert nightly["spec"]["schedule"] == "30 3 * * 1-5" and nightly["spec"]["timeZone"] == "Etc/UTC"
    assert nightly["spec"]["concurrencyPolicy"] == "Forbid"
    c = container(nightly["spec"]["jobTemplate"]["spec"]["template"])
    assert c["command"] == ["orchestrator"]
    args = c["args"]
    # results on the claim (the default): the Job's name is the run id, a replacement pod resumes it
    assert args[:6] == ["run", "--run-id", "$(ORCHESTRATOR_JOB_NAME)", "--resume-existing", "--backend", "kubernetes"]
    assert (_arg(args, "--suite"), _arg(args, "--tier"), _arg(args, "--iterations"), _arg(args, "--lanes"),
            _arg(args, "--concurrency")) == ("full", "full", "5", "6", "12")
    assert _arg(args, "--output-dir") == "/results/$(POD_NAME)"  # expanded by the kubelet from the env
    assert _arg(args, "--metrics-port") == "9464"
    assert "--pushgateway" not in args
    assert args[-1] == "cases/instance-ai"
    assert len(nightly["metadata"]["name"]) <= 52  # CronJob names are limited to 52 characters


def test_a_replaced_nightly_pod_resumes_its_run_from_the_results_volume() -> None:
    """With the run state on durable storage (results.persistence), the nightly run's id is its Job's
    name (the downward API's job-name label: the same for a replacement pod) and ``--resume-existing``
    resumes it; with an emptyDir (state gone with the pod) neither flag is passed."""
    durable = render({"results": {"persistence": {"enabled": True}}})
    nightly = container(cron(durable)["spec"]["jobTemplate"]["spec"]["template"])
    assert nightly["args"][:4] == ["run", "--run-id", "$(ORCHESTRATOR_JOB_NAME)", "--resume-existing"]
    env = {e["name"]: e for e in nightly["env"]}
    assert env["ORCHESTRATOR_JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['batch.kubernetes.io/job-name']"
    assert env["ORCHESTRATOR_STATE_DIR"]["value"] == "/results/.orchestrator"  # on the claim
    template = cron(durable)["spec"]["jobTemplate"]["spec"]["template"]
    assert {v["name"]: v for v in template["spec"]["volumes"]}["results"]["persistentVolumeClaim"]
    # a later --run-id (run.extraArgs) wins: typer keeps the last value
    ephemeral = container(cron(render({"results": {"persistence": {"enabled": False}}}))["spec"]["jobTemplate"]["spec"][
        "template"])["args"]
    assert "--resume-existing" not in ephemeral and "--run-id" not in ephemeral
    off = render({"results": {"persistence": {"enabled": True}}, "run": {"resumeOnReplacement": False}})
    assert "--resume-existing" not in container(cron(off)["spec"]["jobTemplate"]["spec"]["template"])["args"]


def test_a_replaced_ab_pod_resumes_its_arms_from_the_results_volume() -> None:
    """As the nightly run: with the state on the results claim the A/B id is the Job's name (the same
    for a replacement pod) and ``--resume-existing`` resumes each arm's run; with an emptyDir, or
    run.resumeOnReplacement off, neither flag is passed."""
    durable = AB_VALUES  # results.persistence.enabled
    args = container(one(render(durable), "Job")["spec"]["template"])["args"]
    assert args[:4] == ["ab", "--run-id", "$(ORCHESTRATOR_JOB_NAME)", "--resume-existing"]
    assert args.count("--run-id") == 1 and args.count("--arm") == 2
    ephemeral = container(one(render({**AB_VALUES, "results": {"persistence": {"enabled": False}}}),
                                  "Job")["spec"]["template"])["args"]
    assert "--resume-existing" not in ephemeral and "--run-id" not in ephemeral
    off = {**durable, "run": {**AB_VALUES["run"], "resumeOnReplacement": False}}
    assert "--resume-existing" not in container(one(render(off), "Job")["spec"]["template"])["args"]


def test_ab_job_dispatches_both_arms(ab) -> None:
    job = one(ab, "Job")
    assert job["metadata"]["name"] == f"{RELEASE}-ab-1"
    args = container(job["spec"]["template"])["args"]
    assert args[:4] == ["ab", "--run-id", "$(ORCHESTRATOR_JOB_NAME)", "--resume-existing"]  # results on a claim
    assert args[4:8] == ["--arm", "control=anthropic/claude-sonnet-4-6", "--arm", "variant=openai/gpt-5.5"]
    arm_env = [args[i + 1] for i, a in enumerate(args) if a == "--arm-env"]
    assert arm_env == ['control=N8N_FEATURE_FLAG_OVERRIDES={"118_instance_ai_setup_overhaul":"control"}',
                       'variant=N8N_FEATURE_FLAG_OVERRIDES={"118_instance_ai_setup_overhaul":"variant"}']
    assert _arg(args, "--pushgateway") == "http://pushgateway.monitoring.svc:9091"
    assert _arg(args, "--max-cost-usd") == "25.5"
    assert _arg(args, "--env") == "N8N_INSTANCE_AI_MODEL=anthropic/claude-sonnet-4-6"
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "ab"


def test_ab_job_plans_and_runs_sequentially_from_values(ab) -> None:
    """ab.planFrom → ``--plan FILE --power P`` and ab.sequential → ``--sequential``, each with ``--effect``;
    neither by default."""
    args = container(one(ab, "Job")["spec"]["template"])["args"]
    assert not {"--plan", "--sequential", "--effect", "--power"} & set(args)
    values = {**AB_VALUES, "ab": {**AB_VALUES["ab"], "planFrom": "/results/base/eval-results.json", "effect": 0.15,
                                  "power": 0.9, "sequential": True}}
    args = container(one(render(values), "Job")["spec"]["template"])["args"]
    assert _arg(args, "--plan") == "/results/base/eval-results.json" and _arg(args, "--power") == "0.9"
    assert "--sequential" in args and args.count("--effect") == 1 and _arg(args, "--effect") == "0.15"
    only_sequential = {**AB_VALUES, "ab": {**AB_VALUES["ab"], "sequential": True}}
    args = container(one(render(only_sequential), "Job")["spec"]["template"])["args"]
    assert "--sequential" in args and _arg(args, "--effect") == "0.1" and "--plan" not in args


@pytest.mark.parametrize("which", ["defaults", "ab"])
def test_chart_args_use_only_planned_cli_flags(which, defaults, ab) -> None:
    for template in pod_specs(defaults if which == "defaults" else ab):
        args = container(template)["args"]
        sub = args[0]
        flags = {a for a in args if a.startswith("--")}
        allowed = PLANNED_SURFACE[sub] | (PLANNED_SURFACE["run"] if sub == "ab" else set())
        assert flags <= allowed, flags - allowed


def test_metrics_service_and_monitors(defaults, ab) -> None:
    svc = named(defaults, "Service", "-metrics")
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "n8n-eval-orchestrator",
                                       "app.kubernetes.io/instance": RELEASE}
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9464, "targetPort": "metrics", "protocol": "TCP"}]
    sm = one(ab, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= named(ab, "Service", "-metrics")["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]
    pm = one(ab, "PodMonitor")
    assert pm["metadata"]["labels"]["release"] == "prom"
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "interval": "30s"}]
    for template in pod_specs(ab):
        assert pm["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        assert container(template)["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"},
                                                {"name": "gateway", "containerPort": 8788, "protocol": "TCP"}]


def test_the_model_gateway_is_a_service_only_this_releases_lanes_reach(defaults) -> None:
    """Issue 37: every model call of the run goes through the orchestrator pod's gateway; lane pods
    reach it at its Service, and nothing else may (NetworkPolicies); without it, --no-model-gateway."""
    svc = named(defaults, "Service", "-gateway")
    assert svc["spec"]["selector"] == named(defaults, "Service", "-metrics")["spec"]["selector"]
    assert svc["spec"]["ports"] == [{"name": "gateway", "port": 8788, "targetPort": "gateway", "protocol": "TCP"}]
    args = container(cron(defaults)["spec"]["jobTemplate"]["spec"]["template"])["args"]
    assert _arg(args, "--model-gateway-url") == f"http://{RELEASE}-gateway.{NAMESPACE}.svc:8788"
    assert (_arg(args, "--model-gateway-host"), _arg(args, "--model-gateway-port")) == ("0.0.0.0", "8788")
    assert "--concurrency" not in args  # the gateway's rule sets the build concurrency
    lanes_only = {"app.kubernetes.io/name": "n8n-eval-lane", "app.kubernetes.io/managed-by": "n8n-eval-orchestrator",
                  "n8n-eval/release": RELEASE}
    ingress = named(defaults, "NetworkPolicy", "-orchestrator")["spec"]["ingress"]
    assert {"from": [{"podSelector": {"matchLabels": lanes_only}}], "ports": [{"protocol": "TCP", "port": 8788}]} in ingress
    egress = named(defaults, "NetworkPolicy", "-lanes")["spec"]["egress"]
    assert {"to": [{"podSelector": {"matchLabels": svc["spec"]["selector"]}}],
            "ports": [{"protocol": "TCP", "port": 8788}]} in egress
    both = render({**AB_VALUES, "ab": {**AB_VALUES["ab"], "sequential": True}})  # two arms at once, two gateways
    assert [p["port"] for p in named(both, "Service", "-gateway")["spec"]["ports"]] == [8788, 8789]
    assert [p["port"] for p in named(both, "NetworkPolicy", "-lanes")["spec"]["egress"][1]["ports"]] == [8788, 8789]
    off = render({"gateway": {"enabled": False, "port": 8788}, "run": {"concurrency": 8}})
    assert not [d for d in by_kind(off, "Service") if d["metadata"]["name"].endswith("-gateway")]
    args = container(cron(off)["spec"]["jobTemplate"]["spec"]["template"])["args"]
    assert "--no-model-gateway" in args and _arg(args, "--concurrency") == "8"


@pytest.mark.parametrize(
    "values_yaml, field",
    [
        ("run:\n  lanes: 0\n", "/run/lanes"),
        ("run:\n  lanes: many\n", "/run/lanes"),
        ("run:\n  concurrency: 0\n", "/run/concurrency"),
        ("run:\n  iterations: 1.5\n", "/run/iterations"),
        ("backend: docker\n", "/backend"),
        ("nightly:\n  schedule: 5\n", "/nightly/schedule"),
        ("nightly:\n  schedule: every night\n", "/nightly/schedule"),
        ("run:\n  source: s3\n", "/run/source"),
        ("lanes:\n  ownerKind: deployment\n", "/lanes/ownerKind"),
        ("backend: static\n", "/staticBaseUrls"),
        ("ab:\n  enabled: true\n  arms:\n    - {name: control, model: x/y}\n", "/ab/arms"),
        ("metrics:\n  port: 80\n", "/metrics/port"),
        ("lane: 4\n", "'lane' not allowed"),
        ("lanes:\n  existingSecret: ''\n", "/lanes/existingSecret"),
        ("lanes:\n  pod:\n    readyTimeoutSeconds: 180\n", "/lanes/pod/readyTimeoutSeconds"),
        ("lanes:\n  pod:\n    resources:\n      requests: {memory: 1Gi}\n      limits: {memory: 2Gi}\n",
         "/lanes/pod/resources/requests"),
        ("lanes:\n  pod:\n    nodeSelectr: {}\n", "'nodeSelectr' not allowed"),
        ("lanes:\n  egress:\n    allowCidrs: [anywhere]\n", "/lanes/egress/allowCidrs"),
        ("metrics:\n  host: all\n", "/metrics/host"),
        ("laneImage:\n  repository: r\n  digest: sha256:abc\n", "/laneImage/digest"),
    ],
)
def test_bad_values_yaml_is_rejected_naming_the_field(values_yaml: str, field: str, tmp_path) -> None:
    values = helm.values_from_yaml(values_yaml)
    with pytest.raises(helm.HelmValuesError) as info:
        render(values)
    assert field in str(info.value)
    report = helm.lint(CHART, values)
    assert any(field in e for e in report["errors"])


def test_schema_ships_with_the_chart() -> None:
    with helm.Chart.load(CHART) as chart:
        schema = chart.schema
        defaults = chart.values
    assert schema is not None and schema["properties"]["backend"]["enum"] == ["kubernetes", "static"]
    assert json.dumps(defaults)  # the defaults themselves pass (render above would fail otherwise)
    assert defaults["run"]["lanes"] >= 1 and defaults["nightly"]["schedule"]


# ---- the values the GitHub workflows install the chart with ---------------------------------------

LANE_DIGEST, ORCHESTRATOR_DIGEST = "sha256:" + "a" * 64, "sha256:" + "b" * 64
WORKFLOW_ENV = {"REGISTRY": "registry.invalid/evals", "TAG": "0123abc", "RUNNER_TEMP": "/tmp", "NAMESPACE": NAMESPACE,
                "LANE_TAG": "2.41.1-0123456789abcdef", "LANE_DIGEST": LANE_DIGEST, "ORCHESTRATOR_DIGEST": ORCHESTRATOR_DIGEST}


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _helm_set_values() -> dict[str, Any]:
    """The --set/--set-string flags of cluster-run.yml's `helm upgrade --install`, as Helm parses them."""
    import shlex
    from string import Template

    from repo.test_workflows import WORKFLOWS, load, logical_lines, run_blocks

    (line,) = [l for s in run_blocks(load(WORKFLOWS / "cluster-run.yml")) for l in logical_lines(s)
               if "helm upgrade --install" in l]
    words = shlex.split(Template(line).safe_substitute(WORKFLOW_ENV))
    values: dict[str, Any] = {}
    for flag, arg in zip(words, words[1:]):
        if flag == "--set":
            values = _deep_merge(values, helm.parse_set_string(arg))
        elif flag == "--set-string":
            values = _deep_merge(values, helm.parse_set_string_values(arg))
    assert values["lanes"]["existingSecret"] == "n8n-eval-keys"
    return values


def _nightly_values() -> dict[str, Any]:
    import re

    from repo.test_workflows import WORKFLOWS, load

    text = load(WORKFLOWS / "nightly.yml")["jobs"]["nightly"]["with"]["values"]
    # a scheduled run has no inputs: every `${{ inputs.x || default }}` takes its default
    text = re.sub(r"\$\{\{\s*inputs\.\w+\s*\|\|\s*'?([^'}]*?)'?\s*\}\}", r"\1", text)
    text = text.replace("${{ github.run_id }}", "4242")
    assert "${{" not in text
    return helm.values_from_yaml(text)


def _ab_values(tmp_path: Path, design: str = "sequential,plan=/results/base/eval-results.json,effect=0.15"
               ) -> dict[str, Any]:
    """Run ab-experiment.yml's `prepare` step (plain Python) with sample inputs; parse its output
    (``values``: the Helm values; ``design_args``: the runner's CLI flags for the design input)."""
    import os
    import subprocess

    from repo.test_workflows import WORKFLOWS, load

    doc = load(WORKFLOWS / "ab-experiment.yml")
    (script,) = [s["run"] for s in doc["jobs"]["prepare"]["steps"]]
    out = tmp_path / "github_output"
    env = dict(os.environ, GITHUB_OUTPUT=str(out), GITHUB_RUN_ID="4242", GITHUB_RUN_ATTEMPT="1",
               CONTROL_MODEL="anthropic/claude-sonnet-4-6", VARIANT_MODEL="openai/gpt-5.5",
               CONTROL_FLAGS="", VARIANT_FLAGS='{"118_instance_ai_setup_overhaul":"variant"}',
               SUITE="", TIER="full", ITERATIONS="2", LANES="2", DESIGN=design)
    subprocess.run(["bash", "-e", "-c", script], env=env, check=True, timeout=60)
    outputs = dict(line.partition("=")[::2] for line in out.read_text().strip().splitlines())
    assert set(outputs) == {"values", "design_args"}
    values: dict[str, Any] = json.loads(outputs["values"])
    values["design_args"] = json.loads(outputs["design_args"])
    return values


@pytest.mark.parametrize("mode", ["nightly", "ab"])
def test_the_workflows_values_render_to_valid_objects(mode: str, tmp_path: Path) -> None:
    extra = _nightly_values() if mode == "nightly" else _ab_values(tmp_path)
    design_args = extra.pop("design_args", None)
    values = _deep_merge(extra, _helm_set_values())  # Helm: --set wins over -f
    docs = render(values)
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert not [r for r in role_rules(docs) if r[1] == "secrets"]  # lanes read the existing Secret
    if mode == "nightly":
        nightly = cron(docs)
        assert nightly["spec"]["suspend"] is True and not by_kind(docs, "Job")
        args = container(nightly["spec"]["jobTemplate"]["spec"]["template"])["args"]
        assert _arg(args, "--experiment-name") == "nightly-4242"
    else:
        assert [component(d) for d in by_kind(docs, "CronJob")] == ["janitor"]
        args = container(one(docs, "Job")["spec"]["template"])["args"]
        arms = args.index("--arm")
        assert args[arms:arms + 4] == ["--arm", "control=anthropic/claude-sonnet-4-6", "--arm", "variant=openai/gpt-5.5"]
        assert [args[i + 1] for i, a in enumerate(args) if a == "--arm-env"] == [
            'variant=N8N_FEATURE_FLAG_OVERRIDES={"118_instance_ai_setup_overhaul":"variant"}']
        # the dispatch's own id (run.extraArgs, after the Job name's: typer keeps the last), the same for a
        # replacement pod of the Job
        run_id = args[len(args) - 1 - args[::-1].index("--run-id") + 1]
        assert re.fullmatch(r"gh-ab-4242-1-[0-9a-f]{6}", run_id) and _arg(args, "--tier") == "full"
        (tmp_path / "again").mkdir()
        again = _ab_values(tmp_path / "again")["run"]["extraArgs"]
        assert again[0] == "--run-id" and again[1] != run_id  # a second dispatch: another id
        # the design input: plan + sequential, the same flags for the Job and the runner
        assert _arg(args, "--plan") == "/results/base/eval-results.json" and "--sequential" in args
        assert _arg(args, "--effect") == "0.15" and _arg(args, "--power") == "0.8"
        assert design_args == ["--plan", "/results/base/eval-results.json", "--power", "0.8", "--sequential",
                               "--effect", "0.15"]
        assert args.count("--builder") == 1
    template = pod_specs(docs)[0]
    env = {e["name"]: e for e in container(template)["env"]}
    # both images by digest (cluster-run.yml hands Helm the digests it pushed or found)
    assert env["ORCHESTRATOR_LANE_IMAGE"]["value"] == f"registry.invalid/evals/n8n-eval-lane@{LANE_DIGEST}"
    assert container(template)["image"] == f"registry.invalid/evals/n8n-eval-orchestrator@{ORCHESTRATOR_DIGEST}"
    assert env["ORCHESTRATOR_IMAGE"]["value"] == container(template)["image"]  # the lanes' sidecars too
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "n8n-eval-keys", "key": "OPENAI_API_KEY"}
    assert "persistentVolumeClaim" in {k for v in template["spec"]["volumes"] for k in v}
    # the pull Secret cluster-run.yml creates: on every pod of the chart and, through the orchestrator,
    # on the lane pods it starts
    templates = [d["spec"]["jobTemplate"]["spec"]["template"] for d in by_kind(docs, "CronJob")]
    templates += [d["spec"]["template"] for d in by_kind(docs, "Job")]
    assert any(component(d) == "janitor" for d in by_kind(docs, "CronJob"))
    for t in templates:
        assert t["spec"]["imagePullSecrets"] == [{"name": "n8n-eval-pull"}]
    lane_pod = k8s.LanePod.model_validate(json.loads(env["ORCHESTRATOR_K8S_LANE_POD"]["value"]))
    lane = k8s.pod_object("r1", 0, NAMESPACE, _spec(), secret="n8n-eval-keys", pod=lane_pod)
    kubernetes_validate.validate(lane, K8S_VERSION, strict=True)
    assert lane["spec"]["imagePullSecrets"] == [{"name": "n8n-eval-pull"}]


def test_the_workflows_design_input(tmp_path: Path) -> None:
    """`fixed` (the default) adds no flag; an unknown item fails the prepare job, naming it."""
    import subprocess

    fixed = _ab_values(tmp_path, "fixed")
    assert fixed["design_args"] == [] and fixed["ab"]["sequential"] is False and fixed["ab"]["planFrom"] == ""
    with pytest.raises(subprocess.CalledProcessError):
        _ab_values(tmp_path, "sequential,bogus")


# ---- the lane pod, egress, janitor, jobs, namespace ------------------------------------------------

def orchestrator_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container(pod_specs(docs)[0])["env"]}


@pytest.mark.parametrize("version", ["1.27", "1.30", "1.33"])
def test_lane_pod_values_reach_the_backend_and_its_pods_validate(version: str) -> None:
    """lanes.pod travels as JSON env; the backend's LanePod reads it and the lane Pod it builds validates."""
    env = orchestrator_env(render(FULL_VALUES))
    pod_opts = k8s.LanePod.model_validate(json.loads(env["ORCHESTRATOR_K8S_LANE_POD"]))
    assert env["ORCHESTRATOR_K8S_CLUSTER_DOMAIN"] == "corp.k8s"
    pod = k8s.pod_object("r1", 0, NAMESPACE, _spec(), secret=env["ORCHESTRATOR_K8S_LANE_SECRET"], pod=pod_opts,
                         sidecar_image=env["ORCHESTRATOR_IMAGE"])
    kubernetes_validate.validate(pod, version, strict=True)
    assert [(c["name"], c["image"]) for c in pod["spec"]["containers"][1:]] == [
        ("build-runner", env["ORCHESTRATOR_IMAGE"]), ("sandbox", "registry.invalid/sandbox:1")]
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}]
    assert spec["priorityClassName"] == "n8n-eval-lanes" and spec["terminationGracePeriodSeconds"] == 20
    assert spec["nodeSelector"] and spec["tolerations"] and spec["affinity"] and spec["topologySpreadConstraints"]
    c = spec["containers"][0]
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "3Gi", "ephemeral-storage": "2Gi"},
                              "limits": {"cpu": "2", "memory": "3Gi", "ephemeral-storage": "2Gi"}}
    assert {v["name"]: v["emptyDir"]["sizeLimit"] for v in spec["volumes"]} == {
        "lane-data": "1Gi", "tmp": "256Mi", "builds": "512Mi", "sandbox": "512Mi"}
    # disruption.doNotDisrupt (on by default) reaches the lane pods as it reaches the orchestrator's
    assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    off = orchestrator_env(render({**FULL_VALUES, "disruption": {"doNotDisrupt": False}}))
    assert json.loads(off["ORCHESTRATOR_K8S_LANE_POD"])["doNotDisrupt"] is False
    # lanes.pod.imagePullSecrets, when set, wins over the chart-wide ones (which lanes get otherwise)
    both = orchestrator_env(render({**FULL_VALUES, "imagePullSecrets": [{"name": "chart-wide"}]}))
    assert json.loads(both["ORCHESTRATOR_K8S_LANE_POD"])["imagePullSecrets"] == ["regcred", {"name": "other"}]
    # the defaults: guaranteed memory, a ready timeout that survives node scale-up and a big image pull
    defaults = k8s.LanePod.model_validate(json.loads(orchestrator_env(render())["ORCHESTRATOR_K8S_LANE_POD"]))
    assert defaults.ready_timeout_seconds >= 600 and "priorityClassName" not in json.loads(
        orchestrator_env(render())["ORCHESTRATOR_K8S_LANE_POD"])
    res = k8s.lane_resources(_spec(), defaults)
    assert res["requests"]["memory"] == res["limits"]["memory"] == "2Gi"


def test_lane_egress_denies_metadata_and_cluster_ranges(defaults) -> None:
    """The chart's policy (default-deny, DNS only) plus the backend's per-run policy built from the
    chart's lanes.egress: NetworkPolicies add up, so the union is what a lane may reach."""
    chart_policy = named(defaults, "NetworkPolicy", "-lanes")
    assert chart_policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    dns, gateway = chart_policy["spec"]["egress"]  # and the model gateway's port in the orchestrator pods
    assert [p["port"] for p in gateway["ports"]] == [8788] and [list(t) for t in gateway["to"]] == [["podSelector"]]
    assert {p["port"] for p in dns["ports"]} == {53}
    # NodeLocal DNSCache (as the orchestrator's own policy allows): its link-local address, DNS only
    assert [p["ipBlock"] for p in dns["to"] if "ipBlock" in p] == [{"cidr": "169.254.20.10/32"}]
    for proto in ("UDP", "TCP"):
        assert k8s.egress_allows([dns], "169.254.20.10", 53, proto)
    assert not k8s.egress_allows([dns], "169.254.20.10", 443)
    assert not k8s.egress_allows([dns], "169.254.169.254", 53, "UDP")
    for docs, cluster_ranges in ((defaults, ["10.96.0.1", "172.20.0.10", "192.168.0.10", "100.64.0.10"]),
                                 (render(FULL_VALUES), ["10.96.0.1", "10.244.1.2"])):
        egress = k8s.LaneEgress.model_validate(json.loads(orchestrator_env(docs)["ORCHESTRATOR_K8S_LANE_EGRESS"]))
        run_policy = k8s.network_policy_object("r1", NAMESPACE, egress=egress)
        kubernetes_validate.validate(run_policy, K8S_VERSION, strict=True)
        rules = named(docs, "NetworkPolicy", "-lanes")["spec"]["egress"] + run_policy["spec"]["egress"]
        assert not k8s.egress_allows(rules, "169.254.169.254", 443)
        assert not k8s.egress_allows(rules, "169.254.169.254", 80)
        for ip in cluster_ranges:
            assert not k8s.egress_allows(rules, ip, 443), ip
        assert k8s.egress_allows(rules, "160.79.104.10", 443)  # a provider's public address (never contacted)
        assert not k8s.egress_allows(rules, "160.79.104.10", 22)


def test_janitor_cronjob_runs_cleanup_kubernetes() -> None:
    docs = render(FULL_VALUES)
    janitor = cron(docs, "janitor")
    assert janitor["spec"]["schedule"] == "*/5 * * * *" and janitor["spec"]["concurrencyPolicy"] == "Forbid"
    template = janitor["spec"]["jobTemplate"]["spec"]["template"]
    c = container(template)
    assert c["command"] == ["orchestrator"] and c["args"] == ["cleanup", "--kubernetes", "--grace-seconds", "120",
                                                              "--lease-grace-seconds", "60"]
    assert {a for a in c["args"] if a.startswith("--")} <= PLANNED_SURFACE["cleanup"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"]
    # not the orchestrator's name label: no way into the lanes, not scraped as the orchestrator
    assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "n8n-eval-janitor"
    assert template["spec"]["serviceAccountName"] == named(docs, "RoleBinding", "-janitor")["subjects"][0]["name"]
    assert not [d for d in by_kind(render({"janitor": {"enabled": False}}), "CronJob") if component(d) == "janitor"]


def test_failed_jobs_stay_inspectable_survive_disruptions_and_get_teardown_time(defaults, ab) -> None:
    """#35: a failed night's Job, its pod's logs and (on the claim) its results stay three days (a
    working day at least, a weekend too); the CronJob keeps its last three failed Jobs."""
    assert cron(defaults)["spec"]["failedJobsHistoryLimit"] >= 1
    for spec in [cron(defaults)["spec"]["jobTemplate"]["spec"], one(ab, "Job")["spec"]]:
        assert spec["ttlSecondsAfterFinished"] == 3 * 86400
        rules = spec["podFailurePolicy"]["rules"]
        assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in rules
        assert {"action": "FailJob", "onExitCodes": {"containerName": "orchestrator", "operator": "In",
                                                     "values": [2]}, "onPodConditions": []} in rules
        assert spec["template"]["spec"]["restartPolicy"] == "Never"  # required by podFailurePolicy
        assert spec["template"]["spec"]["terminationGracePeriodSeconds"] == 300
    assert "podFailurePolicy" not in cron(render({"podFailurePolicy": {"enabled": False}}))["spec"]["jobTemplate"]["spec"]


def test_namespace_is_labelled_pod_security_restricted() -> None:
    (ns,) = by_kind(render({"namespace": {"create": True}}), "Namespace")
    assert ns["metadata"]["name"] == NAMESPACE
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert not by_kind(render(), "Namespace")
    # lane pods with the sandbox (bwrap: seccomp Unconfined, unmasked /proc) are not "restricted"
    (full,) = by_kind(render(FULL_VALUES), "Namespace")
    assert full["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    with pytest.raises(Exception, match="namespace.podSecurity=privileged"):
        render({"namespace": {"create": True}, "lanes": {"pod": {"sandbox": {"enabled": True}}}})


def test_cluster_runs_build_next_to_their_lanes(defaults) -> None:
    """The chart's runs use the remote builder (claude in the lane pods' build runners); the
    orchestrator gets the runners' optional token from the lane Secret; static lanes cannot."""
    for template in pod_specs(defaults):
        c = container(template)
        assert _arg(c["args"], "--builder") == "remote"
        env = {e["name"]: e for e in c["env"]}
        assert env["N8N_EVAL_RUNNER_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "n8n-eval-keys", "key": "N8N_EVAL_RUNNER_TOKEN", "optional": True}
    mcp = render({"run": {"builder": "mcp"}})
    assert _arg(container(pod_specs(mcp)[0])["args"], "--builder") == "mcp"
    static = {"backend": "static", "staticBaseUrls": ["http://lane.invalid:5678"]}
    assert _arg(container(pod_specs(render(static))[0])["args"], "--builder") == "mcp"
    with pytest.raises(Exception, match="run.builder=remote needs backend=kubernetes"):
        render({**static, "run": {"builder": "remote"}})


def test_metrics_listen_on_the_pod_ip(defaults) -> None:
    for template in pod_specs(defaults):
        c = container(template)
        assert _arg(c["args"], "--metrics-host") == "0.0.0.0"
        assert orchestrator_env(defaults)["ORCHESTRATOR_METRICS_HOST"] == "0.0.0.0"


def test_the_chart_runs_the_image_claude_never_npm(defaults) -> None:
    """The orchestrator image puts the pinned claude where the toolchain looks (N8N_EVAL_CACHE), so a
    pod never runs `npm install` at start; the chart must not point the cache elsewhere."""
    import re

    from orchestrator.toolchain import CLAUDE_VERSION, Toolchain

    dockerfile = (CHART.parents[1] / "Dockerfile").read_text()
    assert re.search(r"^ARG CLAUDE_CODE_VERSION=(\S+)$", dockerfile, re.M).group(1) == CLAUDE_VERSION  # type: ignore[union-attr]
    cache = re.search(r"^ENV N8N_EVAL_CACHE=(\S+)$", dockerfile, re.M).group(1)  # type: ignore[union-attr]
    prefix = Toolchain(Path(cache)).claude_prefix
    assert str(prefix).replace(CLAUDE_VERSION, "${CLAUDE_CODE_VERSION}") == '$N8N_EVAL_CACHE/claude-${CLAUDE_CODE_VERSION}'.replace(
        "$N8N_EVAL_CACHE", cache)
    assert 'prefix="$N8N_EVAL_CACHE/claude-${CLAUDE_CODE_VERSION}"' in dockerfile and "touch .installed" in dockerfile
    assert "npm install -g" not in dockerfile
    for template in pod_specs(defaults):
        assert "N8N_EVAL_CACHE" not in {e["name"] for e in container(template)["env"]}


def test_an_ab_upgrade_renders_through_the_running_job_guard() -> None:
    """The guard that refuses to upgrade over a running A/B Job uses `lookup`, which only a cluster
    answers (empty here): this shows the upgrade path renders, not that it refuses (docs/cluster.md)."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values=AB_VALUES, name=RELEASE, namespace=NAMESPACE, revision=2, is_upgrade=True)
    (job,) = [d for path, t in manifests.items() if not path.endswith("NOTES.txt")
              for d in yaml.safe_load_all(t) if d and d["kind"] == "Job"]
    assert job["metadata"]["name"] == f"{RELEASE}-ab-2"
    template = (CHART / "templates" / "job-ab.yaml").read_text()
    assert 'lookup "batch/v1" "Job" .Release.Namespace ""' in template and "allowUpgradeWhileRunning" in template


def test_the_ab_job_carries_one_builder_and_respects_ab_builder() -> None:
    """#26: the A/B Job passed `--builder mcp` then the run's `--builder remote` (the last won)."""
    def ab_args(ab: dict[str, Any]) -> list[str]:
        docs = render({**AB_VALUES, "ab": {**AB_VALUES["ab"], **ab}})
        args: list[str] = container(one(docs, "Job")["spec"]["template"])["args"]
        return args

    for builder in ("mcp", "instance-ai"):  # what values.schema.json allows for ab.builder
        args = ab_args({"builder": builder})
        assert args.count("--builder") == 1 and _arg(args, "--builder") == builder
        assert _arg(args, "--tier") == "smoke" and _arg(args, "--backend") == "kubernetes"  # the run's options stay
