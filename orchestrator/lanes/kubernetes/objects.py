"""The Kubernetes objects of a ``kubernetes`` lane pool, built as plain dicts (no API calls here).

Per run: one NetworkPolicy (only the orchestrator reaches the run's lanes), one headless Service
selecting the run's lane pods (it gives each pod a DNS name, ``<pod>.<service>.<ns>.svc.<domain>``:
no ClusterIP, no per-lane Service) and, unless an existing Secret is named, one Secret holding the
lanes' secret env. Per lane: one Pod running the n8n lane image, its ``hostname`` its own name and
its ``subdomain`` the run's Service.

Every object carries the same labels, which are the only index ``sweep`` needs::

    app.kubernetes.io/name=n8n-eval-lane
    app.kubernetes.io/managed-by=n8n-eval-orchestrator
    app.kubernetes.io/instance=<run label>
    n8n-eval/run-id=<run label>
    n8n-eval/lane-index=<index>          (pods only)
    n8n-eval/lane=<pod name>             (pods only)
    n8n-eval/release=<Helm release>      (when the orchestrator runs from the chart: ``release``)

``<run label>`` is the run id made fit for a label value (see :func:`run_label`); the raw run id is
kept in the ``n8n-eval/run-id`` annotation.

When the orchestrator itself runs in the cluster, the downward API gives it ``POD_NAME``,
``POD_NAMESPACE`` and ``POD_UID`` (and, for a Job owner, ``JOB_NAME`` / ``JOB_UID`` from the pod's
``batch.kubernetes.io/job-name`` / ``batch.kubernetes.io/controller-uid`` labels). Every object then
gets an ``ownerReference`` to that Pod (or Job) so the cluster garbage-collects the lanes when the
orchestrator dies. Owners are namespaced: a reference is only set when the lanes live in the
orchestrator's own namespace (a cross-namespace owner makes the garbage collector delete the child).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.lanes.kubernetes.pod_options import DEFAULT_CLUSTER_CIDRS as DEFAULT_CLUSTER_CIDRS
from orchestrator.lanes.kubernetes.pod_options import METADATA_CIDRS as METADATA_CIDRS
from orchestrator.lanes.kubernetes.pod_options import NODE_LOCAL_DNS_IP as NODE_LOCAL_DNS_IP
from orchestrator.lanes.kubernetes.pod_options import LaneEgress as LaneEgress
from orchestrator.lanes.kubernetes.pod_options import LanePod as LanePod
from orchestrator.lanes.kubernetes.pod_options import SandboxSidecar as SandboxSidecar
from orchestrator.lanes.kubernetes.pod_options import Sidecar as Sidecar
from orchestrator.lanes.model import LaneSpec

N8N_PORT = 5678
CONTAINER_NAME = "n8n"
LANE_APP = "n8n-eval-lane"
ORCHESTRATOR_APP = "n8n-eval-orchestrator"
MANAGED_BY = "n8n-eval-orchestrator"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_RUN_ID = "n8n-eval/run-id"
LABEL_LANE_INDEX = "n8n-eval/lane-index"
LABEL_LANE = "n8n-eval/lane"
#: The Helm release whose orchestrator created the object: the chart's policies select one release's lanes.
LABEL_RELEASE = "n8n-eval/release"
ANNOTATION_RUN_ID = "n8n-eval/run-id"
#: The orchestrator process that created an object (its holder identity): nothing else deletes it by name.
ANNOTATION_CREATOR = "n8n-eval/creator"
#: How long a run's Lease stays valid without a renewal; the orchestrator renews it every third of that.
DEFAULT_LEASE_TTL_S = 60
#: A lane pod outlives the run's deadline by this much at most (``activeDeadlineSeconds``): time for
#: the orchestrator's own teardown first; past it the kubelet ends the pod even if nobody else does.
LANE_DEADLINE_MARGIN_S = 600

#: Downward-API env the orchestrator reads to own its lanes (the Helm chart sets all of them).
ENV_POD_NAME = "POD_NAME"
ENV_POD_NAMESPACE = "POD_NAMESPACE"
#: the lane's model route (the run's model gateway, ``<gateway>/lane/<index>``): the build runner's
#: claude calls it too, as ``ANTHROPIC_BASE_URL``
ENV_MODEL_URL = "N8N_INSTANCE_AI_MODEL_URL"
ENV_POD_UID = "POD_UID"
ENV_JOB_NAME = "JOB_NAME"
ENV_JOB_UID = "JOB_UID"

#: Where the lane's n8n keeps its SQLite database: an emptyDir, gone with the pod.
USER_FOLDER = "/var/lib/n8n-lane"
#: Fully qualified (trailing dot): the resolver asks for exactly this name, not once per search domain
#: of the pod's resolv.conf (ndots:5 would otherwise turn each lookup into up to 4 misses first).
DEFAULT_URL_TEMPLATE = "http://{pod}.{service}.{namespace}.svc.{cluster_domain}.:{port}"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
BUILD_RUNNER_PORT = 8790
SANDBOX_PORT = 8791
BUILD_RUNNER_CONTAINER = "build-runner"
SANDBOX_CONTAINER = "sandbox"
SANDBOX_ROOT = "/sandbox"
BUILD_ROOT = "/builds"
#: Node consolidation (Karpenter) and scale-down (cluster-autoscaler) leave a running lane alone,
#: as the chart does for the orchestrator pod (``disruption.doNotDisrupt``).
DO_NOT_DISRUPT_ANNOTATIONS = {"karpenter.sh/do-not-disrupt": "true",
                              "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
#: The AppArmor annotation (read by every supported version; 1.30+ also has a securityContext field).
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


OwnerKind = Literal["pod", "job", "none"]
_LABEL_OK = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


@dataclass(frozen=True)
class OwnerRef:
    """The object lanes belong to: the orchestrator's Pod or Job."""

    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str

    def as_dict(self) -> dict[str, Any]:
        """The ``ownerReferences`` entry (not a controller, no ``blockOwnerDeletion``)."""
        # blockOwnerDeletion would need `update` on the owner's finalizers: not worth the RBAC.
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid, "controller": False}


def owner_from_env(env: Mapping[str, str], kind: OwnerKind = "pod") -> OwnerRef | None:
    """The owner named by the downward-API env, or None when not running in a cluster."""
    namespace = env.get(ENV_POD_NAMESPACE, "")
    if kind == "none" or not namespace:
        return None
    if kind == "job":
        name, uid = env.get(ENV_JOB_NAME, ""), env.get(ENV_JOB_UID, "")
        return OwnerRef("batch/v1", "Job", name, uid, namespace) if name and uid else None
    name, uid = env.get(ENV_POD_NAME, ""), env.get(ENV_POD_UID, "")
    return OwnerRef("v1", "Pod", name, uid, namespace) if name and uid else None


def _short_hash(text: str, n: int = 6) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def run_label(run_id: str) -> str:
    """``run_id`` as a label value and DNS-label fragment: lower-case ``[a-z0-9-]``, ≤ 40 chars.

    Ids that had to change (case, characters, length) get a hash suffix so two runs never collide.
    """
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    if slug == run_id and len(slug) <= 40:
        return slug
    return f"{slug[:33].strip('-')}-{_short_hash(run_id)}".strip("-")


def pod_name(run_id: str, index: int, attempt: int = 0) -> str:
    """Pod name (and DNS hostname) of lane ``index``; a replacement lane gets a new ``attempt``."""
    return f"n8n-lane-{run_label(run_id)}-{index}-{attempt}"


def lane_attempts(pod_names: Iterable[str]) -> Iterator[tuple[int, int]]:
    """(index, attempt) of each lane pod name ``n8n-lane-<run>-<index>-<attempt>``."""
    for name in pod_names:
        m = re.search(r"-(\d+)-(\d+)$", name)
        if name.startswith("n8n-lane-") and m:
            yield int(m.group(1)), int(m.group(2))


def network_policy_name(run_id: str) -> str:
    """The name of the run's NetworkPolicy."""
    return f"n8n-lanes-{run_label(run_id)}"


def run_service_name(run_id: str) -> str:
    """The run's headless Service (a DNS-1035 label: starts with a letter, ≤ 63 characters)."""
    return f"n8n-lanes-{run_label(run_id)}"


def lease_name(run_id: str) -> str:
    """The run's liveness Lease (``coordination.k8s.io/v1``), renewed by the orchestrator while it runs."""
    return f"n8n-lanes-{run_label(run_id)}"


def micro_time(t: float) -> str:
    """Unix seconds as a Kubernetes ``MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_object(run_id: str, namespace: str, owner: OwnerRef | None, holder: str, ttl_s: int,
                 now: float, *, release: str | None = None) -> dict[str, Any]:
    """The run's liveness Lease, held by ``holder`` for ``ttl_s`` from ``now``; it carries the run's
    labels and owner so the janitor and the cluster find it."""
    meta = _metadata(lease_name(run_id), namespace, run_labels(run_id, "lease", release), run_id, owner)
    meta["annotations"][ANNOTATION_CREATOR] = holder
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": ttl_s, "acquireTime": micro_time(now),
                 "renewTime": micro_time(now)},
    }


def lease_expires_at(lease: Mapping[str, Any]) -> float | None:
    """When a Lease runs out (renewTime + leaseDurationSeconds, Unix seconds); None if it says neither."""
    spec = lease.get("spec") or {}
    renew, ttl = spec.get("renewTime") or spec.get("acquireTime"), spec.get("leaseDurationSeconds")
    if not renew or ttl is None:
        return None
    try:
        return dt.datetime.fromisoformat(str(renew).replace("Z", "+00:00")).timestamp() + float(ttl)
    except ValueError:
        return None


def secret_name(run_id: str) -> str:
    """The name of the Secret that holds the lanes' secret env."""
    return f"n8n-lanes-{run_label(run_id)}-env"


def run_labels(run_id: str, component: str, release: str | None = None) -> dict[str, str]:
    """The labels of every object of the run (the only index cleanup needs): app, managed-by, instance
    and run id, ``component`` and, in a Helm release, the release."""
    value = run_label(run_id)
    return {
        LABEL_NAME: LANE_APP,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_INSTANCE: value,
        LABEL_COMPONENT: component,
        LABEL_RUN_ID: value,
        **({LABEL_RELEASE: release} if release else {}),
    }


def lane_labels(run_id: str, index: int, attempt: int = 0, release: str | None = None) -> dict[str, str]:
    """:func:`run_labels` of a lane pod plus its index and pod name (``attempt`` numbers a retry)."""
    return {**run_labels(run_id, "lane", release), LABEL_LANE_INDEX: str(index),
            LABEL_LANE: pod_name(run_id, index, attempt)}


def run_selector(run_id: str) -> dict[str, str]:
    """What the run's headless Service selects: every lane pod of the run (and nothing of another run)."""
    return {LABEL_NAME: LANE_APP, LABEL_RUN_ID: run_label(run_id), LABEL_COMPONENT: "lane"}


def sweep_selector(run_id: str | None = None, release: str | None = None) -> str:
    """Label selector for everything this orchestrator created: one run, or every run (of one
    release, when given)."""
    parts = [f"{LABEL_NAME}={LANE_APP}", f"{LABEL_MANAGED_BY}={MANAGED_BY}"]
    if release:
        parts.append(f"{LABEL_RELEASE}={release}")
    if run_id is not None:
        parts.append(f"{LABEL_RUN_ID}={run_label(run_id)}")
    return ",".join(parts)


def _metadata(name: str, namespace: str, labels: dict[str, str], run_id: str, owner: OwnerRef | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "annotations": {ANNOTATION_RUN_ID: run_id},
    }
    if owner is not None and owner.namespace == namespace:
        meta["ownerReferences"] = [owner.as_dict()]
    return meta


def secret_object(run_id: str, namespace: str, secret_env: Mapping[str, str], owner: OwnerRef | None = None, *,
                  release: str | None = None) -> dict[str, Any]:
    """The per-run Secret the lanes' secret env is read from (``valueFrom.secretKeyRef``)."""
    bad = [k for k in secret_env if not _ENV_NAME.match(k)]
    if bad:
        raise ValueError(f"secret env names not usable as Secret keys: {', '.join(sorted(bad))}")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(secret_name(run_id), namespace, run_labels(run_id, "lane-secrets", release), run_id, owner),
        "type": "Opaque",
        "stringData": dict(sorted(secret_env.items())),
    }


def egress_rules(egress: LaneEgress) -> list[dict[str, Any]]:
    """NetworkPolicy egress rules: DNS to the cluster DNS pods and NodeLocal DNSCache, ``ports`` to allowed CIDRs minus the
    denied ones (each ``except`` entry must lie inside its ``cidr``, so it is computed per block)."""
    denied = [ipaddress.ip_network(c) for c in [*egress.deny_cidrs, *egress.cluster_cidrs]]
    blocks = []
    for cidr in egress.allow_cidrs:
        net = ipaddress.ip_network(cidr)
        inside = sorted({str(d) for d in denied if d.version == net.version and d != net and d.subnet_of(net)})  # type: ignore[arg-type]
        if any(d.version == net.version and net.subnet_of(d) for d in denied):  # type: ignore[arg-type]
            continue  # wholly denied
        blocks.append({"ipBlock": {"cidr": cidr, **({"except": inside} if inside else {})}})
    host_blocks = [{"ipBlock": {"cidr": str(ipaddress.ip_network(ip))}} for ip in egress.node_local_dns_ips]
    dns = {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": egress.dns_namespace}},
                "podSelector": {"matchLabels": dict(egress.dns_pod_labels)}}, *host_blocks],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    rules = [dns]
    if blocks and egress.ports:
        rules.append({"to": blocks, "ports": [{"protocol": "TCP", "port": p} for p in egress.ports]})
    return rules


def egress_allows(rules: list[dict[str, Any]], ip: str, port: int, protocol: str = "TCP") -> bool:
    """Whether ``ip:port`` is reachable under these egress rules' ``ipBlock`` peers (NetworkPolicy
    semantics: any rule whose port and block match; a block's ``except`` carves addresses out)."""
    addr = ipaddress.ip_address(ip)
    for rule in rules:
        ports = rule.get("ports") or []
        if ports and not any(p.get("protocol", "TCP") == protocol and p.get("port") == port for p in ports):
            continue
        for peer in rule.get("to") or []:
            block = peer.get("ipBlock")
            if not block:
                continue
            net = ipaddress.ip_network(block["cidr"])
            if addr.version != net.version or addr not in net:
                continue
            if any(addr in ipaddress.ip_network(e) for e in block.get("except") or []):
                continue
            return True
    return False


def network_policy_object(run_id: str, namespace: str, owner: OwnerRef | None = None,
                          egress: LaneEgress | None = None, *, build_runner: bool = False,
                          release: str | None = None) -> dict[str, Any]:
    """One policy per run: the run's lanes admit ingress only from orchestrator pods (of ``release``,
    when given), on the n8n port (lanes expose ``POST /rest/e2e/reset``, which wipes a lane), and —
    unless egress is disabled — reach only DNS and the model providers' port 443 (LLM-built workflows
    run there: no metadata endpoint, no in-cluster service)."""
    egress = egress if egress is not None else LaneEgress.model_validate({})
    orchestrators = {LABEL_NAME: ORCHESTRATOR_APP, **({LABEL_INSTANCE: release} if release else {})}
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": {LABEL_NAME: LANE_APP, LABEL_RUN_ID: run_label(run_id)}},
        "policyTypes": ["Ingress", "Egress"] if egress.enabled else ["Ingress"],
        "ingress": [
            {
                "from": [{"podSelector": {"matchLabels": orchestrators}}],
                "ports": [{"protocol": "TCP", "port": N8N_PORT}]
                + ([{"protocol": "TCP", "port": BUILD_RUNNER_PORT}] if build_runner else []),
            }
        ],
    }
    if egress.enabled:
        spec["egress"] = egress_rules(egress)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(network_policy_name(run_id), namespace, run_labels(run_id, "lane-network-policy", release),
                              run_id, owner),
        "spec": spec,
    }


def lane_env(spec: LaneSpec, secret: str) -> list[dict[str, Any]]:
    """Plain env from ``spec.env``; secret env only as references into ``secret``, never as values."""
    forced = {
        "N8N_PORT": str(N8N_PORT),
        "N8N_LISTEN_ADDRESS": "0.0.0.0",
        "N8N_USER_FOLDER": USER_FOLDER,
        "HOME": USER_FOLDER,
    }
    plain = {k: v for k, v in spec.env.items() if k not in spec.secret_env and k not in forced}
    plain.update(forced)
    env: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in sorted(plain.items())]
    env += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": k, "optional": False}}}
        for k in sorted(spec.secret_env)
    ]
    return env


def _probe(path: str, *, period: int, failures: int, timeout: int = 3) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http", "scheme": "HTTP"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def pod_object(
    run_id: str,
    index: int,
    namespace: str,
    spec: LaneSpec,
    *,
    secret: str,
    attempt: int = 0,
    image: str | None = None,
    image_pull_policy: str = "IfNotPresent",
    run_as_user: int = 1000,
    owner: OwnerRef | None = None,
    pod: LanePod | None = None,
    sidecar_image: str | None = None,
    release: str | None = None,
    active_deadline_s: int | None = None,
) -> dict[str, Any]:
    """One n8n lane. ``restartPolicy: Never``: a crashed lane is dead (and replaced), not silently reborn.
    ``active_deadline_s``: the kubelet ends the pod that long after it started, whoever else forgot it."""
    pod = pod if pod is not None else LanePod.model_validate({})
    startup_failures = max(6, int(max(spec.ready_timeout_s, pod.ready_timeout_seconds) // 5) + 1)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(pod_name(run_id, index, attempt), namespace, lane_labels(run_id, index, attempt, release),
                              run_id, owner),
        "spec": {
            # DNS name <pod>.<run's headless Service>.<ns>.svc.<cluster domain>: no Service per lane
            "hostname": pod_name(run_id, index, attempt),
            "subdomain": run_service_name(run_id),
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            # Service links would inject e.g. N8N_PORT=tcp://… for a Service named n8n.
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": pod.termination_grace_period_seconds,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": run_as_user,
                "runAsGroup": run_as_user,
                "fsGroup": run_as_user,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": CONTAINER_NAME,
                    "image": image or spec.image,
                    "imagePullPolicy": image_pull_policy,
                    "ports": [{"name": "http", "containerPort": N8N_PORT, "protocol": "TCP"}],
                    "env": lane_env(spec, secret),
                    "startupProbe": _probe("/healthz", period=5, failures=startup_failures),
                    "readinessProbe": _probe("/healthz/readiness", period=2, failures=3),
                    "livenessProbe": _probe("/healthz", period=10, failures=6, timeout=5),
                    "resources": lane_resources(spec, pod),
                    "securityContext": {
                        "runAsNonRoot": True,
                        "allowPrivilegeEscalation": False,
                        "privileged": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumeMounts": [
                        {"name": "lane-data", "mountPath": USER_FOLDER},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {"name": "lane-data", "emptyDir": {"sizeLimit": pod.data_size_limit}},
                {"name": "tmp", "emptyDir": {"sizeLimit": pod.tmp_size_limit}},
            ],
        },
    }
    if pod.build_runner.enabled or pod.sandbox.enabled:
        _add_sidecars(body["spec"], pod, sidecar_image or image or spec.image, image_pull_policy)
    if pod.sandbox.enabled:
        body["metadata"]["annotations"][APPARMOR_ANNOTATION + SANDBOX_CONTAINER] = "unconfined"
    if pod.do_not_disrupt:
        body["metadata"]["annotations"].update(DO_NOT_DISRUPT_ANNOTATIONS)
    extra = {
        "imagePullSecrets": pod.image_pull_secrets,
        "nodeSelector": pod.node_selector,
        "tolerations": pod.tolerations,
        "affinity": pod.affinity,
        "topologySpreadConstraints": pod.topology_spread_constraints,
        "priorityClassName": pod.priority_class_name,
        "activeDeadlineSeconds": active_deadline_s,
    }
    body["spec"].update({k: v for k, v in extra.items() if v})
    return body


def _guaranteed_memory(resources: Mapping[str, Mapping[str, str]], ephemeral: str) -> dict[str, dict[str, str]]:
    """Memory request = limit; ephemeral-storage as given in ``resources`` (a lone request or limit
    sets both) else ``ephemeral``, so every container has an ephemeral-storage request and limit."""
    requests, limits = dict(resources.get("requests") or {}), dict(resources.get("limits") or {})
    memory = limits.get("memory") or requests.get("memory")
    if memory:
        requests["memory"] = limits["memory"] = memory
    storage_limit = limits.get("ephemeral-storage") or requests.get("ephemeral-storage") or ephemeral
    requests.setdefault("ephemeral-storage", storage_limit)
    limits["ephemeral-storage"] = storage_limit
    return {"requests": requests, "limits": limits}


def _sidecar(name: str, sidecar: Sidecar, image: str, pull_policy: str, command: list[str], port: int,
             mounts: list[dict[str, str]], env: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "name": name,
        "image": sidecar.image or image,
        "imagePullPolicy": pull_policy,
        "command": command,
        "ports": [{"name": name[:15], "containerPort": port, "protocol": "TCP"}],
        "env": env,
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 2, "failureThreshold": 3},
        "resources": _guaranteed_memory(sidecar.resources, sidecar.ephemeral_storage),
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *mounts],
    }


def _add_sidecars(pod_spec: dict[str, Any], pod: LanePod, image: str, pull_policy: str) -> None:
    """The build runner (claude next to its lane) and the sandbox, each in its own container.

    They share the pod's network namespace with n8n: the runner reaches the MCP server and the
    sandbox is reached by n8n on 127.0.0.1. Neither gets a service-account token (the pod has none)
    and the runner's model key comes from the same lane Secret as n8n's; its claude calls the lane's
    model route (the run's model gateway, which counts every call against the unit) when n8n has one.
    """
    containers, volumes = pod_spec["containers"], pod_spec["volumes"]
    n8n_env = [e for e in containers[0]["env"] if "valueFrom" in e]  # secret refs only
    route = [{"name": "ANTHROPIC_BASE_URL", "value": e["value"]} for e in containers[0]["env"]
             if e["name"] == ENV_MODEL_URL and e.get("value")]
    home = [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}]
    secret = next((e["valueFrom"]["secretKeyRef"]["name"] for e in n8n_env), None)
    runner_token: dict[str, Any] = (  # optional key of the lane Secret: the runner then demands it
        {"name": "N8N_EVAL_RUNNER_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": secret, "key": "N8N_EVAL_RUNNER_TOKEN", "optional": True}}}
        if secret else {"name": "N8N_EVAL_RUNNER_TOKEN", "value": ""})
    if pod.build_runner.enabled:
        containers.append(_sidecar(
            BUILD_RUNNER_CONTAINER, pod.build_runner, image, pull_policy,
            ["python", "-m", "orchestrator.builders.claude.build_runner", "serve", "--port", str(BUILD_RUNNER_PORT),
             "--root", BUILD_ROOT, "--n8n-url", f"http://127.0.0.1:{N8N_PORT}"],
            BUILD_RUNNER_PORT, [{"name": "builds", "mountPath": BUILD_ROOT}], home + route + n8n_env + [runner_token]))
        volumes.append({"name": "builds", "emptyDir": {"sizeLimit": pod.build_runner.volume_size_limit}})
    if pod.sandbox.enabled:
        sandbox = _sidecar(
            SANDBOX_CONTAINER, pod.sandbox, image, pull_policy,
            ["python", "-m", "orchestrator.sandbox", "serve", "--port", str(SANDBOX_PORT), "--root", SANDBOX_ROOT],
            SANDBOX_PORT, [{"name": "sandbox", "mountPath": SANDBOX_ROOT}], home)
        # bubblewrap: user namespaces (seccomp), a /proc it may mount (Unmasked, in the pod's own user
        # namespace); still non-root, no capability, no privilege escalation (SandboxSidecar)
        sandbox["securityContext"]["seccompProfile"] = dict(pod.sandbox.seccomp_profile)
        if pod.sandbox.user_namespace:
            sandbox["securityContext"]["procMount"] = "Unmasked"
            pod_spec["hostUsers"] = False
        containers.append(sandbox)
        volumes.append({"name": "sandbox", "emptyDir": {"sizeLimit": pod.sandbox.volume_size_limit}})
        containers[0]["env"].append({"name": "N8N_EVAL_SANDBOX_URL", "value": f"http://127.0.0.1:{SANDBOX_PORT}"})


def lane_resources(spec: LaneSpec, pod: LanePod) -> dict[str, dict[str, str]]:
    """The n8n container's resources: ``lanes.pod.resources`` else the LaneSpec's, memory request = limit,
    ephemeral-storage from ``resources`` else ``lanes.pod.ephemeralStorage``."""
    if pod.resources:
        resources: Mapping[str, Mapping[str, str]] = pod.resources
    else:
        res = spec.resources
        resources = {"requests": {"cpu": res.cpu_request}, "limits": {"cpu": res.cpu_limit, "memory": res.memory_limit}}
    return _guaranteed_memory(resources, pod.ephemeral_storage)


def service_object(run_id: str, namespace: str, *, owner: OwnerRef | None = None,
                   build_runner: bool = False, release: str | None = None) -> dict[str, Any]:
    """The run's headless Service: no ClusterIP, no proxying; it only gives every lane pod of the run
    (``hostname`` = its name, ``subdomain`` = this Service) the DNS name
    ``<pod>.<service>.<namespace>.svc.<cluster domain>``. ``publishNotReadyAddresses``: the record
    exists as soon as the pod has an IP, so the orchestrator's first lookup (after the watch saw the
    pod Ready) never meets a not-yet-published name (and a negatively cached NXDOMAIN); readiness is
    the orchestrator's own check, not DNS's."""
    ports = [{"name": "http", "port": N8N_PORT, "targetPort": "http", "protocol": "TCP"}]
    if build_runner:
        ports.append({"name": BUILD_RUNNER_CONTAINER, "port": BUILD_RUNNER_PORT, "targetPort": BUILD_RUNNER_CONTAINER,
                      "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(run_service_name(run_id), namespace, run_labels(run_id, "dns", release), run_id, owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": run_selector(run_id),
            "ports": ports,
        },
    }


#: ``{local_port}`` of a lane's build runner: its n8n's local port plus this (a port-forward per lane).
RUNNER_LOCAL_PORT_OFFSET = 100


def lane_url(template: str, *, pod: str, service: str, namespace: str, index: int, base_port: int,
             cluster_domain: str = DEFAULT_CLUSTER_DOMAIN, port: int = N8N_PORT) -> str:
    """Render ``url_template``: fields ``{pod} {service} {namespace} {index} {port} {local_port}
    {cluster_domain}`` (``{pod}``: the lane pod's name and hostname; ``{service}``: the run's
    headless Service).

    ``{local_port}`` is ``base_port + index``, the port a ``kubectl port-forward`` per lane would use;
    for the build runner (``port=8790``) it is that plus :data:`RUNNER_LOCAL_PORT_OFFSET`.
    """
    local_port = base_port + index + (RUNNER_LOCAL_PORT_OFFSET if port == BUILD_RUNNER_PORT else 0)
    try:
        url = template.format(
            service=service, pod=pod, namespace=namespace, index=index, port=port, local_port=local_port,
            cluster_domain=cluster_domain,
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"url_template {template!r}: unknown or malformed field {exc}") from None
    return url.rstrip("/")


def check_label_value(value: str) -> bool:
    """Whether ``value`` is a valid Kubernetes label value (63 characters at most, alphanumeric ends)."""
    return len(value) <= 63 and bool(_LABEL_OK.match(value))
