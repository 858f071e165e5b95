"""What a platform team checks in the chart (issue #35; docs/cluster.md "What a platform team checks"):
no PodDisruptionBudget, every selector of one release, the admission policies' checks, egress by
value, cluster-scoped objects optional, the image's uid, pinned tags, fail-fast graces sized for an
autoscaler, the lanes' deadline. Rendered by real Helm templating (tests/repo/test_helm_chart.py's
``render``); our own chart, not an n8n rule.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.lanes.kubernetes import objects as k8s
from repo.test_helm_chart import (
    AB_VALUES,
    CHART,
    FULL_VALUES,
    RELEASE,
    by_kind,
    container,
    cron,
    named,
    one,
    pod_specs,
    render,
)

REPO = CHART.parents[1]
OUR_APPS = {k8s.LANE_APP, k8s.ORCHESTRATOR_APP, "n8n-eval-janitor"}


@pytest.fixture(scope="module", params=["defaults", "ab", "full"])
def docs(request) -> list[dict[str, Any]]:
    return render({"defaults": None, "ab": AB_VALUES, "full": FULL_VALUES}[request.param])


def selectors(node: Any) -> list[dict[str, str]]:
    """Every label selector (matchLabels, a Service's selector) anywhere in a rendered object."""
    out: list[dict[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("podSelector", "endpointSelector", "selector") and isinstance(value, dict):
                out.append(value.get("matchLabels", value if key == "selector" else {}))
            out += selectors(value)
    elif isinstance(node, list):
        for item in node:
            out += selectors(item)
    return out


def test_no_disruption_budget_and_every_selector_names_one_release(docs) -> None:
    """No PDB at all (none with maxUnavailable 0, none the disruption controller cannot compute for Job
    pods); every selector that picks pods of ours names this release, so a second release beside this
    one (an A/B next to the nightly) never shares a policy or a Service with it."""
    assert not by_kind(docs, "PodDisruptionBudget")
    ours = [sel for d in docs for sel in selectors(d) if OUR_APPS & set(sel.values())]
    assert len(ours) >= 5
    for sel in ours:
        assert sel.get(k8s.LABEL_INSTANCE) == RELEASE or sel.get(k8s.LABEL_RELEASE) == RELEASE, sel


def test_the_orchestrator_is_protected_by_annotations_and_priority(docs) -> None:
    (priority,) = by_kind(docs, "PriorityClass")
    assert priority["value"] > 0 and priority["preemptionPolicy"] == "Never" and priority["globalDefault"] is False
    for template in pod_specs(docs):
        annotations = template["metadata"]["annotations"]
        assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
        assert annotations["karpenter.sh/do-not-disrupt"] == "true"
        assert template["spec"]["priorityClassName"] == priority["metadata"]["name"]


def _policy(docs: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return named(docs, "ValidatingAdmissionPolicy", suffix)


def test_the_lane_pod_policy_checks_security_context_host_port_and_node_name() -> None:
    """The CEL is checked here as text (no API server runs here): each restriction has its rule, and
    the sandbox container's exception exists only when the sandbox is on (and only by its name)."""
    for values, sandbox in ((None, False), (FULL_VALUES, True)):
        policy = _policy(render(values), "-lane-pods")
        rules = " ".join(v["expression"] for v in policy["spec"]["validations"])
        for needle in ("?privileged.orValue(false)", "?capabilities.?add", "?allowPrivilegeEscalation.orValue(true) == false",
                       "?runAsNonRoot", "?runAsUser", "'RuntimeDefault'", "?procMount.orValue('Default') == 'Default'",
                       "hostPort", "!has(object.spec.nodeName)", f"n8n-eval/release'].orValue('') == '{RELEASE}'"):
            assert needle in rules, needle
        assert ("c.name == 'sandbox' ||" in rules) is sandbox
        assert "false ||" in rules or sandbox
    # the backend's own lane pods meet what the policy asks (the fields it reads)
    lane = k8s.pod_object("r1", 0, "evals", _spec(), secret="s", release=RELEASE, active_deadline_s=3600)
    assert lane["metadata"]["labels"][k8s.LABEL_RELEASE] == RELEASE and "nodeName" not in lane["spec"]
    for c in lane["spec"]["containers"]:
        sc = c["securityContext"]
        assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False and "add" not in sc["capabilities"]
        assert sc["runAsNonRoot"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert all("hostPort" not in p for p in c["ports"])


def test_the_objects_policy_limits_create_and_delete_to_this_releases_lane_objects(docs) -> None:
    policy = _policy(docs, "-lane-objects")
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    kinds = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] if "DELETE" in rule["operations"]}
    assert {("", "pods"), ("", "services"), ("networking.k8s.io", "networkpolicies"), ("coordination.k8s.io", "leases")} <= kinds
    (condition,) = policy["spec"]["matchConditions"]
    for account in (RELEASE, f"{RELEASE}-janitor"):
        assert f"'system:serviceaccount:evals:{account}'" in condition["expression"]
    (rule,) = policy["spec"]["validations"]
    assert "request.operation == 'DELETE' ? oldObject : object" in policy["spec"]["variables"][0]["expression"]
    assert "'app.kubernetes.io/managed-by'].orValue('') == 'n8n-eval-orchestrator'" in rule["expression"]
    assert f"'n8n-eval/release'].orValue('') == '{RELEASE}'" in rule["expression"]
    # the chart's own NetworkPolicies do not carry those labels (Helm manages them): the accounts cannot delete them
    for policy_doc in by_kind(docs, "NetworkPolicy"):
        assert policy_doc["metadata"]["labels"].get(k8s.LABEL_MANAGED_BY) == "Helm"
    # what the backend creates carries both
    for obj in (k8s.service_object("r1", "evals", release=RELEASE), k8s.network_policy_object("r1", "evals", release=RELEASE),
                k8s.lease_object("r1", "evals", None, "h", 60, 0.0, release=RELEASE)):
        labels = obj["metadata"]["labels"]
        assert labels[k8s.LABEL_MANAGED_BY] == k8s.MANAGED_BY and labels[k8s.LABEL_RELEASE] == RELEASE


def _egress_ports(docs: list[dict[str, Any]]) -> set[int]:
    policy = named(docs, "NetworkPolicy", "-orchestrator")
    return {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports") or []}


def test_egress_ports_for_langtracer_pushgateway_langsmith_and_the_api_server_are_values() -> None:
    # AB_VALUES: LangTracer on :8080 and a Pushgateway on :9091 (their URLs), LangSmith and providers on 443
    assert {443, 6443, 8080, 9091} <= _egress_ports(render(AB_VALUES))
    assert 8080 not in _egress_ports(render()) and 9091 not in _egress_ports(render())
    given = render({**AB_VALUES, "orchestratorNetworkPolicy": {
        "langtracerPorts": [18080], "pushgatewayPorts": [19091], "langsmithPorts": [8443],
        "apiServer": {"ports": [6443], "cidrs": ["172.20.0.10/32"]}}})
    assert {18080, 19091, 8443, 6443} <= _egress_ports(given) and not {8080, 9091} & _egress_ports(given)
    api_rule = [r for r in named(given, "NetworkPolicy", "-orchestrator")["spec"]["egress"]
                if [p["port"] for p in r.get("ports") or []] == [6443]]
    assert api_rule[0]["to"] == [{"ipBlock": {"cidr": "172.20.0.10/32"}}]
    # Cilium: the API server by entity (an ipBlock never matches a node-hosted one there)
    (cnp,) = by_kind(render(FULL_VALUES), "CiliumNetworkPolicy")
    assert cnp["spec"]["egress"][0]["toEntities"] == ["kube-apiserver"]
    assert {p["port"] for p in cnp["spec"]["egress"][0]["toPorts"][0]["ports"]} == {"443", "6443"}
    assert not by_kind(render(), "CiliumNetworkPolicy")


def test_a_namespaced_install_renders_nothing_cluster_scoped() -> None:
    docs = render({"clusterScoped": False})
    cluster_scoped = {"PriorityClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Namespace",
                      "ClusterRole", "ClusterRoleBinding"}
    assert not cluster_scoped & {d["kind"] for d in docs}
    assert all("priorityClassName" not in t["spec"] for t in pod_specs(docs))
    named_class = render({"clusterScoped": False, "disruption": {"priorityClass": {"name": "existing"}}})
    assert {t["spec"]["priorityClassName"] for t in pod_specs(named_class)} == {"existing"}
    with pytest.raises(Exception, match="clusterScoped=false"):
        render({"clusterScoped": False, "namespace": {"create": True}})


def test_the_pods_run_as_the_images_user() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    uid = int(re.search(r"useradd .*--uid (\d+)", dockerfile).group(1))  # type: ignore[union-attr]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"] == {"runAsUser": uid, "runAsGroup": uid, "fsGroup": uid}
    janitor = cron(render(), "janitor")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert janitor["securityContext"]["runAsUser"] == uid


def test_default_image_tags_are_pinned() -> None:
    """The orchestrator image's tag is the chart's appVersion; the lane image's is the content tag
    lanes/image_tag.py computes for lanes/ as committed (an input changed without it fails here)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert values["image"]["tag"] == chart["appVersion"]
    tag = subprocess.run([sys.executable, str(REPO / "lanes" / "image_tag.py")], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert values["laneImage"]["tag"] == tag


def test_fail_fast_graces_are_values_sized_for_an_autoscaler() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["lanes"]["pod"]
    defaults = k8s.LanePod.model_validate({})
    assert values["pullGraceSeconds"] == defaults.pull_grace_seconds >= 120
    assert values["unschedulableGraceSeconds"] == defaults.unschedulable_grace_seconds >= 600
    assert values["readyTimeoutSeconds"] > values["unschedulableGraceSeconds"]


def test_lanes_get_the_runs_deadline_and_the_janitor_this_release() -> None:
    docs = render(AB_VALUES)
    for template, deadline in ((cron(docs)["spec"]["jobTemplate"]["spec"]["template"],
                                cron(docs)["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]),
                               (one(docs, "Job")["spec"]["template"], one(docs, "Job")["spec"]["activeDeadlineSeconds"])):
        env = {e["name"]: e.get("value") for e in container(template)["env"]}
        assert env["ORCHESTRATOR_K8S_RUN_DEADLINE_S"] == str(deadline)
        assert env["ORCHESTRATOR_K8S_RELEASE"] == RELEASE
    janitor = container(cron(docs, "janitor")["spec"]["jobTemplate"]["spec"]["template"])
    assert {e["name"]: e.get("value") for e in janitor["env"]}["ORCHESTRATOR_K8S_RELEASE"] == RELEASE
    assert janitor["args"][janitor["args"].index("--lease-grace-seconds") + 1] == "60"
    pod = k8s.pod_object("r1", 0, "evals", _spec(), secret="s", active_deadline_s=3600 + k8s.LANE_DEADLINE_MARGIN_S)
    assert pod["spec"]["activeDeadlineSeconds"] == 4200


def _spec():
    from orchestrator.lanes.model import LaneSpec

    return LaneSpec(n8n_version="2.41.1")


def test_docs_have_the_platform_section_matching_the_chart() -> None:
    text = (REPO / "docs" / "cluster.md").read_text()
    section = text[text.index("## What a platform team checks"):]
    section = section[: section.index("\n## ", 4)] if "\n## " in section[4:] else section
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for needle in ("clusterScoped", "PodDisruptionBudget", "safe-to-evict", "leaseGraceSeconds", "langtracerPorts",
                   "pushgatewayPorts", "langsmithPorts", "apiServer.cilium", "activeDeadlineSeconds",
                   str(values["podSecurityContext"]["runAsUser"]), str(values["lanes"]["pod"]["pullGraceSeconds"]),
                   str(values["lanes"]["pod"]["unschedulableGraceSeconds"]), str(values["nightly"]["ttlSecondsAfterFinished"]),
                   "list", "nodeName", "hostPort"):
        assert needle in section, needle
    assert Path(REPO / "docs" / "cluster.md").exists()
