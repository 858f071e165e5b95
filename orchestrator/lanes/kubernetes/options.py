"""The ``kubernetes`` backend's options: keyword options, each also read from its environment
variable, validated into the frozen :class:`KubernetesOptions` (:meth:`BackendOptions.parse
<orchestrator.lanes.backend.BackendOptions.parse>`, as every backend's); a bad or unknown option is
one ``ConfigError`` line naming it and its env var.

Options (keyword options of the backend, each also read from the environment):

=====================  ==================================  ================================
option                 env                                 default
=====================  ==================================  ================================
namespace              ORCHESTRATOR_K8S_NAMESPACE          POD_NAMESPACE, kubeconfig, default
url_template           ORCHESTRATOR_K8S_URL_TEMPLATE       in-cluster DNS name of the pod
cluster_domain         ORCHESTRATOR_K8S_CLUSTER_DOMAIN     cluster.local
existing_secret        ORCHESTRATOR_K8S_LANE_SECRET        a per-run Secret
image                  ORCHESTRATOR_LANE_IMAGE             ``LaneSpec.image``
image_pull_policy      ORCHESTRATOR_K8S_IMAGE_PULL_POLICY  IfNotPresent
owner_kind             ORCHESTRATOR_K8S_OWNER_KIND         pod (``pod`` | ``job`` | ``none``)
context                ORCHESTRATOR_K8S_CONTEXT            the kubeconfig's current context
run_as_user            ORCHESTRATOR_K8S_RUN_AS_USER        1000
pod                    ORCHESTRATOR_K8S_LANE_POD (JSON)    ``LanePod()``: scheduling, sizing
egress                 ORCHESTRATOR_K8S_LANE_EGRESS (JSON) ``LaneEgress()``: default-deny
release                ORCHESTRATOR_K8S_RELEASE            none (the chart: its release name)
deadline_s             ORCHESTRATOR_K8S_RUN_DEADLINE_S     86400 (the chart: its Job's deadline)
lease_ttl_s            ORCHESTRATOR_K8S_LEASE_TTL_S        60
build_runner           (set by ``--builder remote``)       ``pod.buildRunner.enabled``
sandbox                (set by ``--builder instance-ai``)  ``pod.sandbox.enabled``
sandbox_url            (``--sandbox-url``)                 the sandbox container
=====================  ==================================  ================================

The rest (rate limits, timeouts, ``takeover``) are fields of :class:`KubernetesOptions`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import BackendOptions
from orchestrator.lanes.kubernetes import objects

_JSON_OPTIONS = ("pod", "egress")
#: How long the janitor keeps the lanes of an orchestrator that ended.
DEFAULT_GRACE_S = 300.0
#: How long a pass watches an expired Lease stay unrenewed (at least the Lease's TTL) before the run is dead.
DEFAULT_LEASE_GRACE_S = 60.0
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class JanitorOptions(BackendOptions):
    """What ``orchestrator cleanup`` takes of this backend: ``--kubernetes`` runs the janitor (what the
    chart's CronJob runs) instead of the ledgers' sweep. The chart's lane Secret and release come
    from the environment, as the orchestrator's own."""

    flags: ClassVar[tuple[str, ...]] = ("kubernetes", "namespace", "context", "grace_seconds",
                                        "lease_grace_seconds", "dry_run")
    env_vars: ClassVar[Mapping[str, str]] = {
        "namespace": "ORCHESTRATOR_K8S_NAMESPACE",
        "context": "ORCHESTRATOR_K8S_CONTEXT",
        "existing_secret": "ORCHESTRATOR_K8S_LANE_SECRET",
        "release": "ORCHESTRATOR_K8S_RELEASE",
    }
    has_janitor: ClassVar[bool] = True

    kubernetes: bool = Field(False, description=(
        "run the Kubernetes janitor: delete lane objects of runs whose orchestrator is gone or ended, "
        "never a live run's"))
    namespace: str | None = Field(None, pattern=_NAME, max_length=63, description=(
        "the janitor's namespace (default: POD_NAMESPACE, the kubeconfig's)"))
    context: str | None = Field(None, description="the janitor's kubeconfig context")
    grace_seconds: float = Field(DEFAULT_GRACE_S, ge=0, description="how long an ended orchestrator's lanes are kept")
    lease_grace_seconds: float = Field(DEFAULT_LEASE_GRACE_S, ge=0, description=(
        "how long the janitor itself must see a run's Lease expired and unrenewed, with its own API calls "
        "answered, before the run is dead (at least the Lease's TTL)"))
    dry_run: bool = Field(False, description="the janitor only says which runs are dead")
    #: the chart's lane Secret: runs made no Secret of their own, and the janitor may delete none
    existing_secret: str | None = Field(None, pattern=_NAME)
    #: the chart's release: only its runs are the janitor's (its admission policy allows no other)
    release: str | None = Field(None, pattern=_NAME, max_length=53)

    def asks_for_janitor(self) -> bool:
        return self.kubernetes


class KubernetesOptions(BackendOptions):
    """The backend's options after env fallbacks (:attr:`env_vars`); a bad value is refused naming the option."""

    cleanup: ClassVar[type[BackendOptions] | None] = JanitorOptions

    env_vars: ClassVar[Mapping[str, str]] = {
        "namespace": "ORCHESTRATOR_K8S_NAMESPACE",
        "url_template": "ORCHESTRATOR_K8S_URL_TEMPLATE",
        "cluster_domain": "ORCHESTRATOR_K8S_CLUSTER_DOMAIN",
        "existing_secret": "ORCHESTRATOR_K8S_LANE_SECRET",
        "image": "ORCHESTRATOR_LANE_IMAGE",
        "image_pull_policy": "ORCHESTRATOR_K8S_IMAGE_PULL_POLICY",
        "owner_kind": "ORCHESTRATOR_K8S_OWNER_KIND",
        "context": "ORCHESTRATOR_K8S_CONTEXT",
        "run_as_user": "ORCHESTRATOR_K8S_RUN_AS_USER",
        "pod": "ORCHESTRATOR_K8S_LANE_POD",
        "egress": "ORCHESTRATOR_K8S_LANE_EGRESS",
        "sidecar_image": "ORCHESTRATOR_IMAGE",
        "qps": "ORCHESTRATOR_K8S_QPS",
        "burst": "ORCHESTRATOR_K8S_BURST",
        "max_concurrent_creates": "ORCHESTRATOR_K8S_MAX_CONCURRENT_CREATES",
        "release": "ORCHESTRATOR_K8S_RELEASE",
        "deadline_s": "ORCHESTRATOR_K8S_RUN_DEADLINE_S",
        "lease_ttl_s": "ORCHESTRATOR_K8S_LEASE_TTL_S",
    }

    namespace: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63, description=(
        "the namespace of the run's objects (default: POD_NAMESPACE, the kubeconfig's, else default)"))
    url_template: str | None = Field(None, description="how a lane's URL is made (default: the pod's in-cluster DNS name)")
    cluster_domain: str = Field(objects.DEFAULT_CLUSTER_DOMAIN, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                                description="the cluster's DNS domain")
    existing_secret: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description=(
        "a Secret holding the lanes' secret env (default: one per run)"))
    image: str | None = Field(None, description="the lane image (default: the profile's)")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="the lane containers' imagePullPolicy")
    owner_kind: Literal["pod", "job", "none"] = Field("pod", description=(
        "what owns the run's objects (the cluster deletes them with it): this pod, its Job, or nothing"))
    context: str | None = Field(None, description="the kubeconfig context (default: its current one)")
    run_as_user: int = Field(1000, ge=1, description="the lane containers' runAsUser")
    pod: objects.LanePod = Field(default_factory=lambda: objects.LanePod.model_validate({}), description=(
        "how lane pods are scheduled and sized (the chart's lanes.pod, JSON)"))
    egress: objects.LaneEgress = Field(default_factory=lambda: objects.LaneEgress.model_validate({}), description=(
        "where lane pods may connect (the chart's lanes.egress, JSON; default: deny)"))
    release: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=53, description=(
        "the Helm release this orchestrator belongs to: a label on every object it creates (the chart's "
        "policies and janitor select one release's lanes), and its lanes admit only its pods"))
    deadline_s: float = Field(86400.0, gt=0, description=(
        "how long the run may take (the chart: its Job's activeDeadlineSeconds): every lane pod gets what is "
        "left of it plus a margin as its activeDeadlineSeconds, a backstop for a lane nothing else removed"))
    sidecar_image: str | None = Field(None, description=(
        "the image of the lane pod's build-runner and sandbox containers (the chart: the orchestrator image)"))
    build_runner: bool = Field(False, description=(
        "every lane pod runs a build runner (the remote builder asks for it), whatever pod says"))
    sandbox: bool = Field(False, description=(
        "every lane pod runs the Instance AI sandbox container (the instance-ai builder asks for it)"))
    sandbox_url: str | None = Field(None, description="an external n8n sandbox service for every lane instead")
    takeover: bool = Field(False, description=(
        "--resume of a run whose orchestrator was replaced: its Lease is waited out, then its objects removed"))
    health_watch_s: float = Field(5.0, gt=0, description="how long health waits for the pod watch's first list")
    request_timeout_s: float = Field(30.0, gt=0, description="timeout of one API request, in seconds")
    watch_timeout_s: int = Field(60, ge=1, description=(
        "server-side timeout of one watch request (the watch then resumes from its resourceVersion)"))
    retry_budget_s: float = Field(120.0, ge=0, description=(
        "seconds of waiting on 429s, 5xx, resets and timeouts, per call, before the error surfaces"))
    lease_ttl_s: int = Field(objects.DEFAULT_LEASE_TTL_S, ge=1, description=(
        "TTL of the run's liveness Lease, renewed every third of it"))
    qps: float = Field(25.0, gt=0, description="client-side API requests per second, sustained (every attempt counts)")
    burst: int = Field(50, ge=1, description="client-side API requests at once")
    max_concurrent_creates: int = Field(16, ge=1, description="lane Pod creates in flight at once; the rest queue")
    api_workers: int = Field(32, ge=1, description=(
        "worker threads for the blocking client's calls, and its connections to the API server"))

    @field_validator(*_JSON_OPTIONS, mode="before")
    @classmethod
    def _json(cls, value: object) -> object:
        """``pod`` and ``egress`` given as text (their env variables): JSON."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not JSON: {exc}") from None
        return value


def resolved(opts: KubernetesOptions) -> KubernetesOptions:
    """What the flags imply for the lane pod: ``sandbox`` (without a ``sandbox_url``) and
    ``build_runner`` enable their containers; a ``url_template`` must render a lane URL."""
    pod = opts.pod
    if opts.sandbox and not opts.sandbox_url and not pod.sandbox.enabled:
        pod = pod.model_copy(update={"sandbox": pod.sandbox.model_copy(update={"enabled": True})})
    if opts.build_runner and not pod.build_runner.enabled:
        pod = pod.model_copy(update={"build_runner": pod.build_runner.model_copy(update={"enabled": True})})
    try:
        objects.lane_url(opts.url_template or objects.DEFAULT_URL_TEMPLATE, pod="probe", service="probe",
                         namespace="probe", index=0, base_port=0)
    except ValueError as exc:
        raise ConfigError(f"kubernetes backend: option 'url_template' (env ORCHESTRATOR_K8S_URL_TEMPLATE): {exc}") from None
    return opts if pod is opts.pod else opts.model_copy(update={"pod": pod})
