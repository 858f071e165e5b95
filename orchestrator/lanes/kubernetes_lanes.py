"""The ``kubernetes`` backend: one n8n Pod + ClusterIP Service per lane, in one namespace.

Connection: the in-cluster service account when there is one, else the kubeconfig (``KUBECONFIG``
or ``~/.kube/config``, context from the ``context`` option); tests inject an ``ApiClient``.

What a run creates, in order (each recorded in the ledger *before* it is created):

1. a Secret ``n8n-lanes-<run>-env`` with the lanes' secret env (skipped when there is no secret
   env, or when ``existing_secret`` names a Secret whose keys are the env names);
2. one NetworkPolicy ``n8n-lanes-<run>``: the run's lane pods admit ingress only from pods labelled
   ``app.kubernetes.io/name=n8n-eval-orchestrator``, on port 5678;
3. per lane, a Pod and a Service ``n8n-lane-<run>-<index>-<attempt>``.

Readiness: the pod is watched (``list_namespaced_pod`` with ``watch=true`` and a ``fieldSelector``
on its name) until it is Running with the Ready condition, then ``GET /healthz/readiness`` is
asked through the lane URL. The lane URL is ``http://<service>.<namespace>.svc.cluster.local:5678``
or, outside the cluster, the ``url_template`` option (e.g. ``http://127.0.0.1:{local_port}`` behind
one ``kubectl port-forward svc/<service> <local_port>:5678`` per lane).

Teardown deletes the lane's Pod and Service (404 = already gone) and, with the run's last lane, the
NetworkPolicy and Secret. ``sweep`` deletes by label selector — pods, services, networkpolicies,
and secrets (by ``deletecollection``: the orchestrator never needs to read a Secret).

Options (keyword options of the backend, each also read from the environment):

=====================  ==================================  ================================
option                 env                                 default
=====================  ==================================  ================================
namespace              ORCHESTRATOR_K8S_NAMESPACE          POD_NAMESPACE, kubeconfig, default
url_template           ORCHESTRATOR_K8S_URL_TEMPLATE       in-cluster DNS name of the Service
existing_secret        ORCHESTRATOR_K8S_LANE_SECRET        a per-run Secret
image                  ORCHESTRATOR_LANE_IMAGE             ``LaneSpec.image``
image_pull_policy      ORCHESTRATOR_K8S_IMAGE_PULL_POLICY  IfNotPresent
owner_kind             ORCHESTRATOR_K8S_OWNER_KIND         pod (``pod`` | ``job`` | ``none``)
context                ORCHESTRATOR_K8S_CONTEXT            the kubeconfig's current context
run_as_user            ORCHESTRATOR_K8S_RUN_AS_USER        1000
=====================  ==================================  ================================

In-cluster, the downward-API env ``POD_NAME``, ``POD_NAMESPACE``, ``POD_UID`` (and ``JOB_NAME``,
``JOB_UID`` for ``owner_kind=job``) make every object owned by the orchestrator's Pod (or Job), so
the cluster garbage-collects the lanes if the orchestrator dies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import ConfigError
from orchestrator.lanes import k8s_objects as objects
from orchestrator.lanes.backend import LaneBackend, LaneError, answers_ready, register_backend
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.ledger import Ledger
from orchestrator.redact import redact, register_secret

log = logging.getLogger(__name__)

T = TypeVar("T")
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: Container states that will never turn into a ready lane.
TERMINAL_WAITING = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
     "CrashLoopBackOff", "ErrImageNeverPull"}
)
_ENV_OPTIONS = {
    "namespace": "ORCHESTRATOR_K8S_NAMESPACE",
    "url_template": "ORCHESTRATOR_K8S_URL_TEMPLATE",
    "existing_secret": "ORCHESTRATOR_K8S_LANE_SECRET",
    "image": "ORCHESTRATOR_LANE_IMAGE",
    "image_pull_policy": "ORCHESTRATOR_K8S_IMAGE_PULL_POLICY",
    "owner_kind": "ORCHESTRATOR_K8S_OWNER_KIND",
    "context": "ORCHESTRATOR_K8S_CONTEXT",
    "run_as_user": "ORCHESTRATOR_K8S_RUN_AS_USER",
}


class KubernetesOptions(BaseModel):
    """The backend's options after env fallbacks; a bad value is refused naming the option."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    url_template: str | None = None
    existing_secret: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    image: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    owner_kind: Literal["pod", "job", "none"] = "pod"
    context: str | None = None
    run_as_user: int = Field(1000, ge=1)
    #: How long one ``health`` call may wait on the pod watch before answering "not yet".
    health_watch_s: float = Field(5.0, gt=0)
    request_timeout_s: float = Field(30.0, gt=0)


def parse_options(options: Mapping[str, object], env: Mapping[str, str]) -> KubernetesOptions:
    """This backend's options (a value, else its env var); options meant for other backends
    (the run passes ``base_url``, ``email``, … to whichever backend it picked) are ignored."""
    known = set(KubernetesOptions.model_fields)
    ignored = sorted(k for k, v in options.items() if k not in known and v is not None)
    if ignored:
        log.debug("kubernetes backend: ignoring options %s", ", ".join(ignored))
    given = {k: v for k, v in options.items() if k in known and v is not None}
    for key, var in _ENV_OPTIONS.items():
        if key not in given and env.get(var):
            given[key] = env[var]
    try:
        return KubernetesOptions(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "?"
        var = _ENV_OPTIONS.get(field)
        where = f"option {field!r}" + (f" (env {var})" if var else "")
        raise ConfigError(f"kubernetes backend: {where}: {first['msg']}") from None


def _load_api_client(context: str | None) -> tuple[client.ApiClient, bool]:
    """(client, in_cluster): the service account first, else the kubeconfig."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg), True
    except config.ConfigException:
        pass
    try:
        config.load_kube_config(context=context, client_configuration=cfg)
    except (config.ConfigException, FileNotFoundError, TypeError) as exc:
        raise ConfigError(
            "--backend kubernetes: no in-cluster service account and no usable kubeconfig "
            f"(KUBECONFIG or ~/.kube/config): {exc}"
        ) from None
    return client.ApiClient(cfg), False


def _kubeconfig_namespace(context: str | None) -> str | None:
    try:
        contexts, active = config.list_kube_config_contexts()
    except (config.ConfigException, FileNotFoundError, TypeError):
        return None
    chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace")


def _is_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _terminal_reason(pod: Mapping[str, Any]) -> str | None:
    """Why a pod will never become ready (it ended, or a container is stuck for good), else None."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase in ("Failed", "Succeeded"):
        return f"pod phase {phase}" + (f" ({status['reason']})" if status.get("reason") else "")
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in TERMINAL_WAITING:
            return f"container {cs.get('name')}: {waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
        if state.get("terminated"):
            term = state["terminated"]
            return f"container {cs.get('name')} terminated: {term.get('reason', '')} exit {term.get('exitCode')}"
    return None


def _status_summary(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    parts = [f"pod phase {status.get('phase', '?')}"]
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" and cond.get("message"):
            parts.append(f"{cond.get('type')}: {cond['message']}")
    reason = _terminal_reason(pod)
    if reason:
        parts.append(reason)
    return "; ".join(parts)


@register_backend
class KubernetesBackend(LaneBackend):
    name = "kubernetes"

    def __init__(
        self,
        run_id: str,
        ledger: Ledger,
        state_dir: Path,
        *,
        api_client: client.ApiClient | None = None,
        environ: Mapping[str, str] | None = None,
        **options: object,
    ) -> None:
        super().__init__(run_id, ledger, state_dir, **options)
        self._environ = dict(os.environ if environ is None else environ)
        self.opts = parse_options(options, self._environ)
        self._api_client = api_client
        self._owns_client = api_client is None
        self._namespace: str | None = None
        self._owner = objects.owner_from_env(self._environ, self.opts.owner_kind)
        self._attempts: dict[int, int] = {}
        self._run_objects_ready = False
        self._ready_pods: set[str] = set()
        self._lock = asyncio.Lock()
        # Lanes are cluster-internal (or port-forwarded to loopback): never through an env proxy.
        self._http = httpx.AsyncClient(timeout=5.0, trust_env=False)
        self.url_template = self.opts.url_template or objects.DEFAULT_URL_TEMPLATE
        try:
            objects.lane_url(self.url_template, service="probe", namespace="probe", index=0, base_port=0)
        except ValueError as exc:
            raise ConfigError(f"kubernetes backend: option 'url_template' (env ORCHESTRATOR_K8S_URL_TEMPLATE): {exc}") from None

    # ---- connection ----------------------------------------------------------------------------

    def _client(self) -> client.ApiClient:
        if self._api_client is None:
            self._api_client, in_cluster = _load_api_client(self.opts.context)
            log.debug("kubernetes backend: %s config, API %s", "in-cluster" if in_cluster else "kubeconfig",
                      self._api_client.configuration.host)
        return self._api_client

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._client())

    @property
    def networking(self) -> client.NetworkingV1Api:
        return client.NetworkingV1Api(self._client())

    @property
    def namespace(self) -> str:
        if self._namespace is None:
            self._namespace = (
                self.opts.namespace
                or self._environ.get(objects.ENV_POD_NAMESPACE)
                or (SA_NAMESPACE_FILE.read_text().strip() if self._owns_client and SA_NAMESPACE_FILE.exists() else None)
                or (_kubeconfig_namespace(self.opts.context) if self._owns_client else None)
                or "default"
            )
        return self._namespace

    @property
    def owner(self) -> objects.OwnerRef | None:
        """The orchestrator's Pod/Job, when it runs in the lanes' namespace (else no ownerReference)."""
        if self._owner is not None and self._owner.namespace == self.namespace:
            return self._owner
        return None

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one blocking client call in a thread; an unreachable API server becomes a LaneError."""
        kwargs.setdefault("_request_timeout", self.opts.request_timeout_s)
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except urllib3.exceptions.HTTPError as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: Exception) -> LaneError:
        host = self._client().configuration.host
        return LaneError(redact(f"kubernetes: API server {host} unreachable: {exc.__class__.__name__}: {exc}"))

    # ---- run-level objects ---------------------------------------------------------------------

    @property
    def secret_ref(self) -> str:
        """The Secret lane pods read their secret env from."""
        return self.opts.existing_secret or objects.secret_name(self.run_id)

    async def _ensure_run_objects(self, spec: LaneSpec) -> None:
        if self._run_objects_ready:
            return
        ns = self.namespace
        if spec.secret_env and not self.opts.existing_secret:
            for value in spec.secret_env.values():
                register_secret(value)
            body = objects.secret_object(self.run_id, ns, spec.secret_env, self.owner)
            name = body["metadata"]["name"]
            self.ledger.created("secret", name, backend=self.name, namespace=ns)
            try:
                try:
                    await self._call(self.core.create_namespaced_secret, ns, body)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    # Left by an earlier process of this run: its values may be stale, so replace it.
                    await self._call(self.core.delete_namespaced_secret, name, ns)
                    await self._call(self.core.create_namespaced_secret, ns, body)
            except ApiException as exc:
                raise self._api_error(f"create Secret {ns}/{name}", exc) from None
        policy = objects.network_policy_object(self.run_id, ns, self.owner)
        name = policy["metadata"]["name"]
        self.ledger.created("networkpolicy", name, backend=self.name, namespace=ns)
        try:
            await self._call(self.networking.create_namespaced_network_policy, ns, policy)
        except ApiException as exc:
            if exc.status != 409:  # same run, same deterministic policy: keep it
                raise self._api_error(f"create NetworkPolicy {ns}/{name}", exc) from None
        self._run_objects_ready = True

    async def _delete_run_objects(self) -> None:
        for kind, delete in (
            ("networkpolicy", self.networking.delete_namespaced_network_policy),
            ("secret", self.core.delete_namespaced_secret),
        ):
            for entry in self.ledger.open_entries(kind):
                if entry.meta.get("backend") != self.name:
                    continue
                ns = str(entry.meta.get("namespace") or self.namespace)
                await self._delete(kind, entry.id, ns, delete)
        self._run_objects_ready = False

    async def _delete(self, kind: str, name: str, ns: str, delete: Callable[..., Any], *, lane: str = "",
                      **kwargs: Any) -> None:
        """Delete one object (404 = gone = fine) and record it; record a failure and raise otherwise."""
        try:
            await self._call(delete, name, ns, **kwargs)
        except ApiException as exc:
            if exc.status != 404:
                err = self._api_error(f"delete {kind} {ns}/{name}", exc)
                self.ledger.delete_failed(kind, name, str(err), lane=lane)
                raise err from None
        self.ledger.deleted(kind, name, lane=lane)

    @staticmethod
    def _api_error(what: str, exc: ApiException) -> LaneError:
        detail = exc.reason or ""
        try:
            detail = json.loads(exc.body or "{}").get("message") or detail
        except (ValueError, AttributeError):
            pass
        return LaneError(redact(f"kubernetes: {what} failed: HTTP {exc.status} {detail}".strip()))

    # ---- lanes ---------------------------------------------------------------------------------

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        attempt = self._attempts.get(index, -1) + 1
        self._attempts[index] = attempt
        ns = self.namespace
        pod = objects.pod_object(
            self.run_id, index, ns, spec,
            secret=self.secret_ref, attempt=attempt, image=self.opts.image,
            image_pull_policy=self.opts.image_pull_policy, run_as_user=self.opts.run_as_user, owner=self.owner,
        )
        service = objects.service_object(self.run_id, index, ns, attempt=attempt, owner=self.owner)
        name = pod["metadata"]["name"]
        base_url = objects.lane_url(self.url_template, service=name, namespace=ns, index=index, base_port=spec.base_port)
        lane = Lane(lane_id=name, index=index, base_url=base_url, backend=self.name, run_id=self.run_id,
                    state=LaneState.starting, handle=name)
        async with self._lock:
            await self._ensure_run_objects(spec)
            self.ledger.created("lane", name, lane=name, backend=self.name, index=index, pod=name, service=name,
                                namespace=ns, base_url=base_url)
            self.ledger.created("service", name, lane=name, backend=self.name, namespace=ns)
        try:
            try:
                await self._call(self.core.create_namespaced_pod, ns, pod)
            except ApiException as exc:
                raise self._api_error(f"create Pod {ns}/{name}", exc) from None
            try:
                await self._call(self.core.create_namespaced_service, ns, service)
            except ApiException as exc:
                raise self._api_error(f"create Service {ns}/{name}", exc) from None
        except LaneError:
            try:  # leave nothing behind for a lane the caller never got
                await self.teardown(lane)
            except LaneError as exc:
                log.warning("%s", exc)
            raise
        return lane

    def _lane_namespace(self, lane: Lane) -> str:
        for entry in self.ledger.open_entries("lane"):
            if entry.id == lane.lane_id and entry.meta.get("namespace"):
                return str(entry.meta["namespace"])
        return self.namespace

    async def _read_pod(self, lane: Lane) -> dict[str, Any] | None:
        """The pod as a dict, or None when it does not exist."""
        try:
            resp = await self._call(
                self.core.read_namespaced_pod, lane.handle, self._lane_namespace(lane), _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._api_error(f"read Pod {lane.handle}", exc) from None
        return json.loads(resp.data)

    def _watch_until_ready(self, name: str, ns: str, timeout_s: float) -> tuple[bool, str | None]:
        """Block on the pod watch until Ready, terminal, or ``timeout_s``: (ready, terminal reason)."""
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.core.list_namespaced_pod, ns,
                    field_selector=f"metadata.name={name}",
                    timeout_seconds=max(1, math.ceil(remaining)),
                    _request_timeout=remaining + 5,
                ):
                    obj = event.get("raw_object") or {}
                    if event.get("type") == "DELETED":
                        return False, "pod deleted"
                    if _is_ready(obj):
                        return True, None
                    reason = _terminal_reason(obj)
                    if reason:
                        return False, reason
                    if time.monotonic() >= deadline:
                        break
            finally:
                w.stop()
        return False, None

    async def wait_ready(self, lane: Lane, timeout_s: float) -> None:
        """Watch the pod until it is Ready (raise :class:`LaneError` on a dead pod or the deadline),
        then ask ``/healthz/readiness`` through the lane URL."""
        ns = self._lane_namespace(lane)
        deadline = time.monotonic() + timeout_s
        try:
            ready, reason = await asyncio.to_thread(self._watch_until_ready, lane.handle, ns, timeout_s)
        except urllib3.exceptions.HTTPError as exc:
            raise self._unreachable(exc) from None
        except ApiException as exc:
            raise self._api_error(f"watch Pod {ns}/{lane.handle}", exc) from None
        if reason:
            raise LaneError(f"{lane.describe()}: {reason}")
        if not ready:
            raise LaneError(f"{lane.describe()}: pod not ready after {timeout_s:.0f} s")
        self._ready_pods.add(lane.handle)
        while not await self._http_ready(lane):
            if time.monotonic() >= deadline:
                raise LaneError(f"{lane.describe()}: pod Ready but {lane.base_url}/healthz/readiness did not answer 200")
            await asyncio.sleep(0.5)

    async def _http_ready(self, lane: Lane) -> bool:
        return await answers_ready(self._http, lane.base_url)

    async def health(self, lane: Lane) -> bool:
        """Pod Running with Ready=True (watched while it starts, read afterwards) AND readiness over HTTP.

        An API server that cannot be reached or answers an error counts as "not healthy", not a crash.
        """
        try:
            return await self._health(lane)
        except (ApiException, LaneError, urllib3.exceptions.HTTPError) as exc:
            log.debug("%s: health check failed: %s", lane.describe(), redact(str(exc)))
            return False

    async def _health(self, lane: Lane) -> bool:
        if lane.handle not in self._ready_pods:
            ready, _ = await asyncio.to_thread(
                self._watch_until_ready, lane.handle, self._lane_namespace(lane), self.opts.health_watch_s
            )
            if not ready:
                return False
            self._ready_pods.add(lane.handle)
        else:
            pod = await self._read_pod(lane)
            if pod is None or not _is_ready(pod):
                return False
        return await self._http_ready(lane)

    async def is_gone(self, lane: Lane) -> bool:
        """True when the pod was deleted or can never become ready (ended, image pull failed, …)."""
        try:
            pod = await self._read_pod(lane)
        except (LaneError, urllib3.exceptions.HTTPError):
            return False  # the API is unreachable for now: that says nothing about the pod
        return pod is None or _terminal_reason(pod) is not None

    async def logs(self, lane: Lane, lines: int = 40) -> str:
        """The container's last ``lines``, plus the pod's status when it is stuck or gone."""
        ns = self._lane_namespace(lane)
        try:
            text = str(await self._call(
                self.core.read_namespaced_pod_log, lane.handle, ns, container=objects.CONTAINER_NAME, tail_lines=lines
            ))
        except ApiException as exc:
            text = f"(no log: HTTP {exc.status} {exc.reason})"
        if lane.handle not in self._ready_pods or text.startswith("(no log"):
            try:
                pod = await self._read_pod(lane)
            except LaneError:
                pod = None
            text += f"\n[{_status_summary(pod) if pod is not None else 'pod not found'}]"
        return redact(text)

    async def teardown(self, lane: Lane) -> None:
        """Delete the lane's Pod then its Service (404 = gone); with the run's last lane, the run objects."""
        ns = self._lane_namespace(lane)
        name = lane.handle or lane.lane_id
        try:
            await self._call(self.core.delete_namespaced_pod, name, ns, grace_period_seconds=5)
        except ApiException as exc:
            if exc.status != 404:
                raise self._api_error(f"delete Pod {ns}/{name}", exc) from None
        self._ready_pods.discard(name)
        await self._delete("service", name, ns, self.core.delete_namespaced_service, lane=lane.lane_id)
        lane.state = LaneState.stopped
        async with self._lock:
            self.ledger.deleted("lane", lane.lane_id, lane=lane.lane_id)
            if not [e for e in self.ledger.open_entries("lane") if e.meta.get("backend") == self.name]:
                await self._delete_run_objects()

    async def sweep(self, run_id: str | None = None) -> list[str]:
        """Delete by label: pods, services, networkpolicies (list + delete), secrets (deletecollection)."""
        ns = self.namespace
        selector = objects.sweep_selector(run_id)
        removed: list[str] = []
        for kind, lister, deleter in (
            ("pod", self.core.list_namespaced_pod, self.core.delete_namespaced_pod),
            ("service", self.core.list_namespaced_service, self.core.delete_namespaced_service),
            ("networkpolicy", self.networking.list_namespaced_network_policy,
             self.networking.delete_namespaced_network_policy),
        ):
            try:
                resp = await self._call(lister, ns, label_selector=selector, _preload_content=False)
            except ApiException as exc:
                raise self._api_error(f"list {kind}s in {ns} ({selector})", exc) from None
            for item in json.loads(resp.data).get("items") or []:
                meta = item.get("metadata") or {}
                try:
                    await self._call(deleter, meta["name"], ns)
                except ApiException as exc:
                    if exc.status != 404:
                        raise self._api_error(f"delete {kind} {ns}/{meta['name']}", exc) from None
                removed.append(f"{kind}/{ns}/{meta['name']}")
                self._forget(kind, meta)
        if not self.opts.existing_secret:  # with an existing Secret the backend has no RBAC on secrets
            try:
                resp = await self._call(
                    self.core.delete_collection_namespaced_secret, ns, label_selector=selector, _preload_content=False
                )
            except ApiException as exc:
                raise self._api_error(f"delete secrets in {ns} ({selector})", exc) from None
            for item in json.loads(resp.data or b"{}").get("items") or []:
                meta = item.get("metadata") or {}
                removed.append(f"secret/{ns}/{meta.get('name')}")
                self._forget("secret", meta)
        if run_id in (None, self.run_id):
            self._run_objects_ready = False
        return removed

    def _forget(self, kind: str, meta: Mapping[str, Any]) -> None:
        """Close the ledger entries of a swept object in the run that created it (if that ledger is here)."""
        run_id = (meta.get("annotations") or {}).get(objects.ANNOTATION_RUN_ID)
        if not run_id:
            return
        ledger = self.ledger if run_id == self.run_id else Ledger(self.state_dir / "runs" / run_id)
        if not ledger.path.exists():  # a run recorded elsewhere (another machine, a pod's volume)
            return
        name = meta.get("name", "")
        if kind == "pod":
            ledger.deleted("lane", name, lane=name)
        elif kind == "service":
            ledger.deleted("service", name, lane=name)
        else:
            ledger.deleted(kind, name)

    async def close(self) -> None:
        await self._http.aclose()
        if self._owns_client and self._api_client is not None:
            await asyncio.to_thread(self._api_client.close)
            self._api_client = None
