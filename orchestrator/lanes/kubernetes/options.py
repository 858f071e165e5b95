"""The ``kubernetes`` backend's options: keyword options, each also read from its environment
variable, validated into :class:`KubernetesOptions`; a bad value is one ``ConfigError`` line naming
the option and its env var.

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
import logging
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import ConfigError
from orchestrator.lanes.kubernetes import objects

log = logging.getLogger(__name__)

_ENV_OPTIONS = {
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
_JSON_OPTIONS = ("pod", "egress")


class KubernetesOptions(BaseModel):
    """The backend's options after env fallbacks; a bad value is refused naming the option."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    url_template: str | None = None
    cluster_domain: str = Field(objects.DEFAULT_CLUSTER_DOMAIN, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    existing_secret: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    image: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    owner_kind: Literal["pod", "job", "none"] = "pod"
    context: str | None = None
    run_as_user: int = Field(1000, ge=1)
    pod: objects.LanePod = Field(default_factory=lambda: objects.LanePod.model_validate({}))
    egress: objects.LaneEgress = Field(default_factory=lambda: objects.LaneEgress.model_validate({}))
    #: The Helm release this orchestrator belongs to: a label on every object it creates (the chart's
    #: policies and its janitor select one release's lanes), and its lanes admit only its pods.
    release: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=53)
    #: How long the run may take (the chart: its Job's ``activeDeadlineSeconds``): every lane pod gets
    #: ``activeDeadlineSeconds`` = what is left of it + ``LANE_DEADLINE_MARGIN_S``, a backstop for a
    #: lane nothing else removed.
    deadline_s: float = Field(86400.0, gt=0)
    #: Image of the lane pod's build-runner and sandbox containers (the chart: the orchestrator image).
    sidecar_image: str | None = None
    #: Every lane pod runs a build runner (the ``remote`` builder asks for it), whatever ``pod`` says.
    build_runner: bool = False
    #: Every lane pod runs the Instance AI sandbox container and n8n builds in it (the ``instance-ai``
    #: builder asks for it), whatever ``pod`` says.
    sandbox: bool = False
    #: An external n8n-sandbox service for every lane instead of the container.
    sandbox_url: str | None = None
    #: ``--resume`` of a run whose orchestrator was replaced: the old process's Lease is waited out
    #: (a live holder renews it: then a run-id collision), then its objects are removed.
    takeover: bool = False
    #: How long ``health`` waits for the run's pod watch to list the pods once.
    health_watch_s: float = Field(5.0, gt=0)
    request_timeout_s: float = Field(30.0, gt=0)
    #: Server-side timeout of one watch request (the watch then resumes from its resourceVersion).
    watch_timeout_s: int = Field(60, ge=1)
    #: Waiting on 429s/5xx/resets/timeouts, per call, before the error surfaces.
    retry_budget_s: float = Field(120.0, ge=0)
    #: TTL of the run's liveness Lease; renewed every third of it.
    lease_ttl_s: int = Field(objects.DEFAULT_LEASE_TTL_S, ge=1)
    #: Client-side rate limit on API requests (every attempt counts): sustained per second, and at once.
    qps: float = Field(25.0, gt=0)
    burst: int = Field(50, ge=1)
    #: Lane (Pod) creates in flight at once; the rest queue.
    max_concurrent_creates: int = Field(16, ge=1)
    #: Worker threads for the (blocking) client's calls, and its connections to the API server.
    api_workers: int = Field(32, ge=1)


def parse_options(options: Mapping[str, object], env: Mapping[str, str]) -> KubernetesOptions:
    """This backend's options (a value, else its env var); options meant for other backends
    (the run passes ``base_url``, ``email``, … to whichever backend it picked) are ignored."""
    known = set(KubernetesOptions.model_fields)
    ignored = sorted(k for k, v in options.items() if k not in known and v is not None)
    if ignored:
        log.debug("kubernetes backend: ignoring options %s", ", ".join(ignored))
    given: dict[str, Any] = {k: v for k, v in options.items() if k in known and v is not None}
    for key, var in _ENV_OPTIONS.items():
        if key not in given and env.get(var):
            given[key] = env[var]
    for key in _JSON_OPTIONS:
        if isinstance(given.get(key), str):
            try:
                given[key] = json.loads(given[key])
            except ValueError as exc:
                raise ConfigError(f"kubernetes backend: option {key!r} (env {_ENV_OPTIONS[key]}): not JSON: {exc}") from None
    try:
        opts = KubernetesOptions(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "?"
        env_var = _ENV_OPTIONS.get(field.split(".")[0])
        where = f"option {field!r}" + (f" (env {env_var})" if env_var else "")
        raise ConfigError(f"kubernetes backend: {where}: {first['msg']}") from None
    return _resolved(opts)


def _resolved(opts: KubernetesOptions) -> KubernetesOptions:
    """What the flags imply for the lane pod: ``sandbox`` (without a ``sandbox_url``) and
    ``build_runner`` enable their containers; a ``url_template`` must render a lane URL."""
    if opts.sandbox and not opts.sandbox_url and not opts.pod.sandbox.enabled:
        sandbox = opts.pod.sandbox.model_copy(update={"enabled": True})
        opts.pod = opts.pod.model_copy(update={"sandbox": sandbox})
    if opts.build_runner and not opts.pod.build_runner.enabled:
        runner = opts.pod.build_runner.model_copy(update={"enabled": True})
        opts.pod = opts.pod.model_copy(update={"build_runner": runner})
    try:
        objects.lane_url(opts.url_template or objects.DEFAULT_URL_TEMPLATE, pod="probe", service="probe",
                         namespace="probe", index=0, base_port=0)
    except ValueError as exc:
        raise ConfigError(f"kubernetes backend: option 'url_template' (env ORCHESTRATOR_K8S_URL_TEMPLATE): {exc}") from None
    return opts
