"""The Helm chart, linted and rendered with real Helm templating (helm-python-sdk embeds Helm v4),
every rendered object validated against the Kubernetes OpenAPI schema (kubernetes-validate, strict).

prometheus-operator kinds (ServiceMonitor, PodMonitor) are CRDs with no upstream schema: they are
rendered and checked by hand below, and kubernetes-validate is shown to have no schema for them.
No cluster is contacted: this proves the chart renders to valid objects, not that a cluster runs them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from orchestrator.lanes import k8s_objects as k8s
from test_k8s_contract import RecordingApiServer, rbac_of, run_full_lifecycle
from test_workflows import PLANNED_SURFACE

CHART = Path(__file__).resolve().parents[1] / "helm" / "n8n-eval-orchestrator"
K8S_VERSION = "1.30"
CRD_KINDS = {"ServiceMonitor", "PodMonitor"}
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


def pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [d["spec"]["jobTemplate"]["spec"]["template"] for d in by_kind(docs, "CronJob")]
    out += [d["spec"]["template"] for d in by_kind(docs, "Job")]
    return out


def container(template: dict[str, Any]) -> dict[str, Any]:
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


@pytest.mark.parametrize("values", [None, AB_VALUES], ids=["defaults", "ab"])
def test_every_rendered_object_is_valid(values) -> None:
    docs = render(values)
    assert docs
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_what_each_values_set_renders(defaults, ab) -> None:
    assert sorted(d["kind"] for d in defaults) == sorted(
        ["CronJob", "NetworkPolicy", "Role", "RoleBinding", "Service", "ServiceAccount"]
    )
    assert sorted(d["kind"] for d in ab) == sorted(
        ["CronJob", "Job", "NetworkPolicy", "PersistentVolumeClaim", "PodMonitor", "Role", "RoleBinding", "Service",
         "ServiceAccount", "ServiceMonitor"]
    )
    assert not {"ClusterRole", "ClusterRoleBinding", "Secret"} & {d["kind"] for d in defaults + ab}


EXPECTED_RULES = {
    ("", "pods", "create"), ("", "pods", "delete"), ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"),
    ("", "pods/log", "get"),
    ("", "services", "create"), ("", "services", "delete"), ("", "services", "list"),
    ("networking.k8s.io", "networkpolicies", "create"), ("networking.k8s.io", "networkpolicies", "delete"),
    ("networking.k8s.io", "networkpolicies", "list"),
    ("", "secrets", "create"), ("", "secrets", "delete"), ("", "secrets", "deletecollection"),
}


def role_rules(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in one(docs, "Role")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_verbs_exactly(defaults) -> None:
    rules = role_rules(defaults)
    assert rules == EXPECTED_RULES
    assert not any("*" in part for rule in rules for part in rule)
    binding = one(defaults, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELEASE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}]


async def test_rbac_is_what_the_backend_actually_calls(defaults, tmp_path) -> None:
    """The Role grants exactly the (group, resource, verb) the kubernetes backend's recorded API calls use."""
    with RecordingApiServer() as server:
        await run_full_lifecycle(server, tmp_path)
        used = rbac_of(server.state.requests)
    assert used == role_rules(defaults)


def test_no_secret_rbac_with_an_existing_lane_secret_and_no_role_for_static() -> None:
    rules = role_rules(render({"lanes": {"existingSecret": "lane-keys"}}))
    assert rules == {r for r in EXPECTED_RULES if r[1] != "secrets"}
    env = {e["name"]: e for e in container(pod_specs(render({"lanes": {"existingSecret": "lane-keys"}}))[0])["env"]}
    assert env["ORCHESTRATOR_K8S_LANE_SECRET"]["value"] == "lane-keys"
    static = render({"backend": "static", "staticBaseUrls": ["http://lane-0:5678", "http://lane-1:5678"]})
    assert not by_kind(static, "Role") and not by_kind(static, "RoleBinding")
    args = container(pod_specs(static)[0])["args"]
    assert args[args.index("--backend") + 1] == "static"
    assert args[args.index("--base-url") + 1] == "http://lane-0:5678,http://lane-1:5678"
    assert pod_specs(static)[0]["spec"]["automountServiceAccountToken"] is False


def test_lane_network_policy_matches_the_backend_selectors(defaults) -> None:
    policy = one(defaults, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        k8s.LABEL_NAME: k8s.LANE_APP, k8s.LABEL_MANAGED_BY: k8s.MANAGED_BY,
    }
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule == {"from": [{"podSelector": {"matchLabels": {k8s.LABEL_NAME: k8s.ORCHESTRATOR_APP}}}],
                    "ports": [{"protocol": "TCP", "port": k8s.N8N_PORT}]}
    # the chart's policy selects every lane pod the backend makes ...
    lane_labels = k8s.pod_object("r1", 0, NAMESPACE, _spec(), secret="s")["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= lane_labels.items()
    # ... and both policies admit the orchestrator pods the chart runs
    backend_from = k8s.network_policy_object("r1", NAMESPACE)["spec"]["ingress"][0]["from"][0]["podSelector"]
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
        assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                           "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
        c = container(template)
        assert c["securityContext"] == {"runAsNonRoot": True, "privileged": False, "allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                                        "seccompProfile": {"type": "RuntimeDefault"}}
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts == {"tmp": "/tmp", "results": "/results"}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["tmp"] == {"name": "tmp", "emptyDir": {}}
        if which == "defaults":
            assert volumes["results"] == {"name": "results", "emptyDir": {}}
        else:
            claim = one(ab, "PersistentVolumeClaim")
            assert volumes["results"]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
            assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
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
    cron = one(docs, "CronJob")
    assert cron["spec"]["schedule"] == "30 3 * * 1-5" and cron["spec"]["timeZone"] == "Etc/UTC"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    c = container(cron["spec"]["jobTemplate"]["spec"]["template"])
    assert c["command"] == ["orchestrator"]
    args = c["args"]
    assert args[:3] == ["run", "--backend", "kubernetes"]
    assert (_arg(args, "--suite"), _arg(args, "--tier"), _arg(args, "--iterations"), _arg(args, "--lanes"),
            _arg(args, "--concurrency")) == ("full", "full", "5", "6", "12")
    assert _arg(args, "--output-dir") == "/results/$(POD_NAME)"  # expanded by the kubelet from the env
    assert _arg(args, "--metrics-port") == "9464"
    assert "--pushgateway" not in args
    assert args[-1] == "cases/instance-ai"
    assert len(cron["metadata"]["name"]) <= 52  # CronJob names are limited to 52 characters


def test_ab_job_dispatches_both_arms(ab) -> None:
    job = one(ab, "Job")
    assert job["metadata"]["name"] == f"{RELEASE}-ab-1"
    args = container(job["spec"]["template"])["args"]
    assert args[:5] == ["ab", "--arm", "control=anthropic/claude-sonnet-4-6", "--arm", "variant=openai/gpt-5.5"]
    arm_env = [args[i + 1] for i, a in enumerate(args) if a == "--arm-env"]
    assert arm_env == ['control=N8N_FEATURE_FLAG_OVERRIDES={"118_instance_ai_setup_overhaul":"control"}',
                       'variant=N8N_FEATURE_FLAG_OVERRIDES={"118_instance_ai_setup_overhaul":"variant"}']
    assert _arg(args, "--pushgateway") == "http://pushgateway.monitoring.svc:9091"
    assert _arg(args, "--max-cost-usd") == "25.5"
    assert _arg(args, "--env") == "N8N_INSTANCE_AI_MODEL=anthropic/claude-sonnet-4-6"
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "ab"


@pytest.mark.parametrize("which", ["defaults", "ab"])
def test_chart_args_use_only_planned_cli_flags(which, defaults, ab) -> None:
    for template in pod_specs(defaults if which == "defaults" else ab):
        args = container(template)["args"]
        sub = args[0]
        flags = {a for a in args if a.startswith("--")}
        allowed = PLANNED_SURFACE[sub] | (PLANNED_SURFACE["run"] if sub == "ab" else set())
        assert flags <= allowed, flags - allowed


def test_metrics_service_and_monitors(defaults, ab) -> None:
    svc = one(defaults, "Service")
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "n8n-eval-orchestrator",
                                       "app.kubernetes.io/instance": RELEASE}
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9464, "targetPort": "metrics", "protocol": "TCP"}]
    sm = one(ab, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= one(ab, "Service")["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]
    pm = one(ab, "PodMonitor")
    assert pm["metadata"]["labels"]["release"] == "prom"
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "interval": "30s"}]
    for template in pod_specs(ab):
        assert pm["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        assert container(template)["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]


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

WORKFLOW_ENV = {"REGISTRY": "registry.invalid/evals", "TAG": "0123abc", "RUNNER_TEMP": "/tmp", "NAMESPACE": NAMESPACE}


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _helm_set_values() -> dict[str, Any]:
    """The --set/--set-string flags of cluster-run.yml's `helm upgrade --install`, as Helm parses them."""
    import shlex
    from string import Template

    from test_workflows import WORKFLOWS, load, logical_lines, run_blocks

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

    from test_workflows import WORKFLOWS, load

    text = load(WORKFLOWS / "nightly.yml")["jobs"]["nightly"]["with"]["values"]
    # a scheduled run has no inputs: every `${{ inputs.x || default }}` takes its default
    text = re.sub(r"\$\{\{\s*inputs\.\w+\s*\|\|\s*'?([^'}]*?)'?\s*\}\}", r"\1", text)
    text = text.replace("${{ github.run_id }}", "4242")
    assert "${{" not in text
    return helm.values_from_yaml(text)


def _ab_values(tmp_path: Path) -> dict[str, Any]:
    """Run ab-experiment.yml's `prepare` step (plain Python) with sample inputs; parse its output."""
    import os
    import subprocess

    from test_workflows import WORKFLOWS, load

    doc = load(WORKFLOWS / "ab-experiment.yml")
    (script,) = [s["run"] for s in doc["jobs"]["prepare"]["steps"]]
    out = tmp_path / "github_output"
    env = dict(os.environ, GITHUB_OUTPUT=str(out), GITHUB_RUN_ID="4242",
               CONTROL_MODEL="anthropic/claude-sonnet-4-6", VARIANT_MODEL="openai/gpt-5.5",
               CONTROL_FLAGS="", VARIANT_FLAGS='{"118_instance_ai_setup_overhaul":"variant"}',
               SUITE="", TIER="full", ITERATIONS="2", LANES="2")
    subprocess.run(["bash", "-e", "-c", script], env=env, check=True, timeout=60)
    key, _, value = out.read_text().strip().partition("=")
    assert key == "values"
    return json.loads(value)


@pytest.mark.parametrize("mode", ["nightly", "ab"])
def test_the_workflows_values_render_to_valid_objects(mode: str, tmp_path: Path) -> None:
    extra = _nightly_values() if mode == "nightly" else _ab_values(tmp_path)
    values = _deep_merge(extra, _helm_set_values())  # Helm: --set wins over -f
    docs = render(values)
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert not [r for r in role_rules(docs) if r[1] == "secrets"]  # lanes read the existing Secret
    if mode == "nightly":
        cron = one(docs, "CronJob")
        assert cron["spec"]["suspend"] is True and not by_kind(docs, "Job")
        args = container(cron["spec"]["jobTemplate"]["spec"]["template"])["args"]
        assert _arg(args, "--experiment-name") == "nightly-4242"
    else:
        assert not by_kind(docs, "CronJob")
        args = container(one(docs, "Job")["spec"]["template"])["args"]
        assert args[:5] == ["ab", "--arm", "control=anthropic/claude-sonnet-4-6", "--arm", "variant=openai/gpt-5.5"]
        assert [args[i + 1] for i, a in enumerate(args) if a == "--arm-env"] == [
            'variant=N8N_FEATURE_FLAG_OVERRIDES={"118_instance_ai_setup_overhaul":"variant"}']
        assert _arg(args, "--run-id") == "gh-ab-4242" and _arg(args, "--tier") == "full"
    template = pod_specs(docs)[0]
    env = {e["name"]: e for e in container(template)["env"]}
    assert env["ORCHESTRATOR_LANE_IMAGE"]["value"] == "registry.invalid/evals/n8n-eval-lane:0123abc"
    assert container(template)["image"] == "registry.invalid/evals/n8n-eval-orchestrator:0123abc"
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "n8n-eval-keys", "key": "OPENAI_API_KEY"}
    assert "persistentVolumeClaim" in {k for v in template["spec"]["volumes"] for k in v}
