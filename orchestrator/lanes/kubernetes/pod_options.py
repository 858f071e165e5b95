"""How lane pods are scheduled, sized and fenced: ``lanes.pod`` and ``lanes.egress`` of the Helm chart
(env ``ORCHESTRATOR_K8S_LANE_POD`` / ``ORCHESTRATOR_K8S_LANE_EGRESS`` as JSON), validated here and
turned into objects by :mod:`orchestrator.lanes.kubernetes.objects`."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: The cloud metadata endpoints (AWS/GCP/Azure/OpenStack IPv4, AWS IPv6): never reachable from a lane.
METADATA_CIDRS = ("169.254.169.254/32", "fd00:ec2::254/128")
#: NodeLocal DNSCache listens here on every node (its documented default link-local address).
NODE_LOCAL_DNS_IP = "169.254.20.10"
#: Where cluster pods and Services usually live: the private ranges and CGNAT (EKS/GKE/AKS defaults
#: all fall inside). ``lanes.egress.clusterCidrs`` narrows or widens it for a given cluster.
DEFAULT_CLUSTER_CIDRS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")


class _Camel(BaseModel):
    """Options as the Helm chart writes them (camelCase, like the Kubernetes fields they set)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError(f"{value!r} is not a storage quantity (e.g. 512Mi, 2Gi)")
    return value


class Sidecar(_Camel):
    """A container next to n8n in the lane pod (``lanes.pod.buildRunner`` / ``lanes.pod.sandbox``).

    ``image`` defaults to the orchestrator image (``ORCHESTRATOR_IMAGE``, set by the chart).
    Memory is given once, in ``limits``; the request is set equal.
    """

    enabled: bool = False
    image: str | None = None
    resources: dict[str, dict[str, str]] = Field(
        default_factory=lambda: {"requests": {"cpu": "250m"}, "limits": {"cpu": "2", "memory": "1Gi"}})
    #: The container's ephemeral-storage request and limit (unless ``resources`` names one): its
    #: writable layer and logs plus its own emptyDir (``volumeSizeLimit``).
    ephemeral_storage: str = Field("1Gi", alias="ephemeralStorage")
    #: ``sizeLimit`` of the container's own emptyDir (``/builds`` for the runner, ``/sandbox``).
    volume_size_limit: str = Field("512Mi", alias="volumeSizeLimit")

    @field_validator("ephemeral_storage", "volume_size_limit")
    @classmethod
    def _storage(cls, value: str) -> str:
        return _quantity(value)


class SandboxSidecar(Sidecar):
    """The sandbox container (``lanes.pod.sandbox``): what bubblewrap needs to build its jails.

    bwrap runs unprivileged (no setuid, no capability, no privilege escalation) but needs, measured on
    the build machine (tests/unit/sandbox/test_k8s_sandbox_privileges.py): user namespaces, which the container
    runtime's default seccomp profile denies to a container without CAP_SYS_ADMIN, hence
    ``seccompProfile`` (``Unconfined`` by default; a ``Localhost`` profile that allows
    ``unshare``/``clone`` with namespace flags and ``mount`` is the tighter choice); a ``/proc`` it may
    mount again, which the runtime's masked ``/proc`` forbids (``--proc /proc`` → EPERM), hence
    ``procMount: Unmasked``, which Kubernetes allows only in a pod with its own user namespace
    (``hostUsers: false``); and an unconfined AppArmor profile (the runtime default denies ``mount``).
    """

    seccomp_profile: dict[str, str] = Field(default_factory=lambda: {"type": "Unconfined"}, alias="seccompProfile")
    #: ``hostUsers: false`` for the lane pod (the pod's own user namespace; needed for ``procMount: Unmasked``).
    user_namespace: bool = Field(True, alias="userNamespace")

    @field_validator("seccomp_profile")
    @classmethod
    def _seccomp(cls, value: dict[str, str]) -> dict[str, str]:
        kind = value.get("type")
        if kind not in ("Unconfined", "Localhost", "RuntimeDefault"):
            raise ValueError(f"seccompProfile.type must be Unconfined, Localhost or RuntimeDefault, not {kind!r}")
        if (kind == "Localhost") != bool(value.get("localhostProfile")):
            raise ValueError("seccompProfile.localhostProfile is required with (and only with) type Localhost")
        return value


class LanePod(_Camel):
    """How a lane Pod is scheduled and sized (``lanes.pod`` in the chart; env ORCHESTRATOR_K8S_LANE_POD as JSON).

    Fields are passed through to the Pod spec as written (they are Kubernetes' own types), except
    ``resources``, whose memory request is always its limit: a lane running LLM-built workflows must
    not be the first thing a node under memory pressure evicts or OOM-kills.
    """

    image_pull_secrets: list[dict[str, str]] = Field(default_factory=list, alias="imagePullSecrets")
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] = Field(default_factory=dict)
    topology_spread_constraints: list[dict[str, Any]] = Field(default_factory=list, alias="topologySpreadConstraints")
    priority_class_name: str | None = Field(None, alias="priorityClassName")
    #: ``{"requests": {"cpu": …}, "limits": {"cpu": …, "memory": …}}``; None: the LaneSpec's.
    resources: dict[str, dict[str, str]] | None = None
    termination_grace_period_seconds: int = Field(15, ge=1, le=600, alias="terminationGracePeriodSeconds")
    #: How long a lane may take to become ready: node scale-up plus a ~2.8 GB image pull.
    ready_timeout_seconds: float = Field(900.0, gt=0, alias="readyTimeoutSeconds")
    #: A lane whose image pull keeps failing (ErrImagePull/ImagePullBackOff) this long fails, naming the
    #: image: a typo'd tag or a missing pull secret does not heal. Sized for 500 fresh nodes pulling
    #: at once: a registry answering ``toomanyrequests`` heals within the kubelet's back-off (10, 20,
    #: 40, 80 s …), so two minutes; 30 s where pulls are local and quick.
    pull_grace_seconds: float = Field(120.0, ge=0, alias="pullGraceSeconds")
    #: A lane the scheduler cannot place (Unschedulable) this long fails with the scheduler's message.
    #: Sized for an autoscaler adding nodes for hundreds of lanes (cluster-autoscaler scales in steps,
    #: a cloud node takes 2–5 min to join): ten minutes; 0 where no autoscaler runs.
    unschedulable_grace_seconds: float = Field(600.0, ge=0, alias="unschedulableGraceSeconds")
    #: MCP builds next to their lane: ``claude`` runs in this container, reached by the orchestrator
    #: on the pod network (port 8790), talking to n8n's MCP server on 127.0.0.1 (docs/cluster.md).
    build_runner: Sidecar = Field(default_factory=lambda: Sidecar.model_validate({}), alias="buildRunner")
    #: Instance AI's sandbox service (``python -m orchestrator.sandbox serve``), for n8n on 127.0.0.1:8791.
    sandbox: SandboxSidecar = Field(default_factory=lambda: SandboxSidecar.model_validate(
        {"resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "512Mi"}}}))
    #: The n8n container's ephemeral-storage request and limit (unless ``resources`` names one). Pod
    #: usage (writable layers, logs, emptyDirs) above the containers' summed limits evicts the pod, so
    #: it covers ``dataSizeLimit`` + ``tmpSizeLimit`` with room for n8n's logs.
    ephemeral_storage: str = Field("2Gi", alias="ephemeralStorage")
    #: ``sizeLimit`` of the emptyDir holding n8n's SQLite database and user folder.
    data_size_limit: str = Field("1Gi", alias="dataSizeLimit")
    #: ``sizeLimit`` of the pod's shared ``/tmp`` emptyDir.
    tmp_size_limit: str = Field("256Mi", alias="tmpSizeLimit")
    #: ``karpenter.sh/do-not-disrupt`` / ``cluster-autoscaler…/safe-to-evict=false`` on the pod (the
    #: chart passes ``disruption.doNotDisrupt``).
    do_not_disrupt: bool = Field(True, alias="doNotDisrupt")

    @field_validator("ephemeral_storage", "data_size_limit", "tmp_size_limit")
    @classmethod
    def _storage(cls, value: str) -> str:
        return _quantity(value)

    @field_validator("image_pull_secrets", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return [{"name": v} if isinstance(v, str) else v for v in value or []]

    @model_validator(mode="after")
    def _memory_guaranteed(self) -> LanePod:
        res = self.resources or {}
        req, lim = (res.get("requests") or {}).get("memory"), (res.get("limits") or {}).get("memory")
        if req and lim and req != lim:
            raise ValueError(f"resources: memory requests ({req}) must equal limits ({lim})")
        return self


class LaneEgress(_Camel):
    """Where lanes may connect to (``lanes.egress``; env ORCHESTRATOR_K8S_LANE_EGRESS as JSON).

    Default-deny, then: DNS to the cluster's DNS pods and NodeLocal DNSCache, and TCP ``ports`` (443) to ``allowCidrs``
    minus ``denyCidrs`` (the metadata endpoint) and ``clusterCidrs`` (pods and Services).
    """

    enabled: bool = True
    allow_cidrs: list[str] = Field(default_factory=lambda: ["0.0.0.0/0"], alias="allowCidrs")
    ports: list[int] = Field(default_factory=lambda: [443])
    deny_cidrs: list[str] = Field(default_factory=lambda: list(METADATA_CIDRS), alias="denyCidrs")
    cluster_cidrs: list[str] = Field(default_factory=lambda: list(DEFAULT_CLUSTER_CIDRS), alias="clusterCidrs")
    dns_namespace: str = Field("kube-system", alias="dnsNamespace")
    dns_pod_labels: dict[str, str] = Field(default_factory=lambda: {"k8s-app": "kube-dns"}, alias="dnsPodLabels")
    #: NodeLocal DNSCache's link-local address(es): where pods' DNS goes when it runs (the chart's
    #: orchestrator policy allows the same, ``orchestratorNetworkPolicy.nodeLocalDnsIps``).
    node_local_dns_ips: list[str] = Field(default_factory=lambda: [NODE_LOCAL_DNS_IP], alias="nodeLocalDnsIps")

    @field_validator("node_local_dns_ips")
    @classmethod
    def _ips(cls, value: list[str]) -> list[str]:
        for ip in value:
            ipaddress.ip_address(ip)  # ValueError names the bad one
        return value

    @field_validator("allow_cidrs", "deny_cidrs", "cluster_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            ipaddress.ip_network(cidr, strict=True)  # ValueError names the bad one
        return value
