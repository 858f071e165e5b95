"""The ``kubernetes`` backend: one n8n Pod per lane behind one headless Service per run, in one namespace.

Connection: the in-cluster service account when there is one, else the kubeconfig (``KUBECONFIG``
or ``~/.kube/config``, context from the ``context`` option); tests inject an ``ApiClient``. Every API
call retries 429, 5xx, connection resets and timeouts (tenacity, ``kubernetes.api``). Options: the table in
:mod:`orchestrator.lanes.kubernetes.options` (:mod:`orchestrator.lanes.kubernetes.watch` is the pod watch).

What a run creates, in order (each recorded in the ledger *before* it is created):

1. a Secret ``n8n-lanes-<run>-env`` with the lanes' secret env (skipped when there is no secret
   env, or when ``existing_secret`` names a Secret whose keys are the env names — what the Helm
   chart always does);
2. one NetworkPolicy ``n8n-lanes-<run>``: the run's lane pods admit ingress only from pods labelled
   ``app.kubernetes.io/name=n8n-eval-orchestrator`` on port 5678, and reach only DNS and TCP 443
   outside the cluster (no metadata endpoint, no pod or Service range; see ``LaneEgress``);
3. one headless Service ``n8n-lanes-<run>`` selecting the run's lane pods (DNS names only);
4. per lane, one Pod ``n8n-lane-<run>-<index>-<attempt>`` whose ``hostname`` is that name and whose
   ``subdomain`` is the run's Service: it answers at ``<pod>.n8n-lanes-<run>.<ns>.svc.<domain>.``.

Readiness and health: **one** label-selector watch per run (a background thread: list, then a
long-poll ``watch`` from the list's ``resourceVersion``, re-listing on ``410 Gone``) keeps every
lane pod's status in memory. ``wait_ready``/``health``/``is_gone`` read that cache — no per-lane
polling — and ``health`` then asks ``GET /healthz/readiness`` through the lane URL. Failures fail
fast, as a lane failure that says why: an ended pod (OOMKilled, Evicted, …) or ``InvalidImageName``
at once; an image pull that keeps failing (``ErrImagePull``/``ImagePullBackOff``) after
``lanes.pod.pullGraceSeconds`` (120 s: a registry throttling 500 pulls heals within it), naming the
image; a pod the scheduler cannot place after ``lanes.pod.unschedulableGraceSeconds`` (600 s: time
for an autoscaler to add nodes), with the scheduler's message. Anything else slow waits until
``lanes.pod.readyTimeoutSeconds`` (900 s). The lane URL is
``http://<pod>.<run service>.<namespace>.svc.<cluster_domain>.:5678`` (fully qualified, trailing dot:
no search-domain fan-out) or, outside the cluster, the ``url_template`` option (e.g.
``http://127.0.0.1:{local_port}`` behind one ``kubectl port-forward pod/<pod> <local_port>:5678`` per lane).

Liveness: the run's first object is a Lease ``n8n-lanes-<run>`` (``coordination.k8s.io/v1``, TTL
``lease_ttl_s``, default 60 s) that the backend renews from the event loop every third of its TTL,
checking the run's Service and NetworkPolicy as it goes (re-created when gone; a Lease another
process holds stops the run): :mod:`orchestrator.lanes.kubernetes.lease`. The janitor removes the lanes of a
run whose Lease it saw expired and unrenewed for a while with its own API calls answered (an
OOM-killed, evicted or hung orchestrator — never one the API could not hear from). Every lane pod
gets ``activeDeadlineSeconds`` from the run's deadline (``deadline_s``), a backstop of its own.

Never delete what this process did not create: every object carries the annotation
``n8n-eval/creator=<holder>`` (this process's identity), the uid of every object it created is kept,
and every delete carries that uid as a precondition (the API server answers 409 if the name now
belongs to another object). A create answered 409 is adopted only if the object bears this process's
creator annotation (a create that succeeded although its answer was lost, then retried); otherwise
another orchestrator uses the same run id, and the run stops with one ``ConfigError`` line — before
anything of the other run is touched.

Teardown deletes the lane's Pod (404 = already gone) and, with the run's last lane, the Service,
NetworkPolicy, Secret and Lease. ``sweep(run_id)`` deletes one run's objects by label, and only for a run
this machine's ledger knows as a kubernetes run; ``sweep(None)`` (what plain ``orchestrator
cleanup`` calls) touches nothing: every-run cleanup is the janitor's job
(``orchestrator cleanup --kubernetes``, :mod:`orchestrator.lanes.kubernetes.janitor`), which never deletes
a live run's objects.

``--resume`` (option ``takeover``) of a run whose orchestrator was replaced (same run id, another
process): the old holder's Lease is waited out (renewed meanwhile: a collision, as above), then the
old process's objects are removed (uid preconditions) and new lanes get new attempt numbers; with
no lane to start, :meth:`take_over_leftovers` does so if the ledger has objects of the run open.

With a build runner in the lane pods, each lane's ``endpoints["build-runner"]`` is the same URL
template rendered with port 8790 (``{local_port}``: the lane's plus 100).

In-cluster, the downward-API env ``POD_NAME``, ``POD_NAMESPACE``, ``POD_UID`` (and ``JOB_NAME``,
``JOB_UID`` for ``owner_kind=job``) make every object owned by the orchestrator's Pod (or Job). The
cluster garbage-collects the lanes when that owner is *deleted* — not when it merely ended (an
OOM-killed pod still exists): that case is the janitor's.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from orchestrator.deletion import close_with_lane
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import BackendOptions, LaneBackend, LaneError, answers_ready, register_backend
from orchestrator.lanes.kubernetes import objects
from orchestrator.lanes.kubernetes.api import (
    RateLimiter,
    api_error,
    call_with_retry,
    is_ready,
    load_api_client,
    status_summary,
    stuck_reason,
    terminal_reason,
)
from orchestrator.lanes.kubernetes.janitor import janitor_pass
from orchestrator.lanes.kubernetes.lease import LeaseKeeper, take_over
from orchestrator.lanes.kubernetes.namespace import resolve_namespace
from orchestrator.lanes.kubernetes.options import JanitorOptions, KubernetesOptions, resolved
from orchestrator.lanes.kubernetes.watch import RunPodWatch
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.ledger import Ledger
from orchestrator.n8n.health import shared_tls
from orchestrator.redact import redact, register_secret
from orchestrator.sandbox.service import lane_env as sandbox_lane_env

log = logging.getLogger(__name__)

T = TypeVar("T")


@register_backend
class KubernetesBackend(LaneBackend):
    name = "kubernetes"
    supports_sandbox = True
    hosts_sandbox = True  # the sandbox container in each lane pod (``pod.sandbox``)
    runs_build_runner = True  # the build-runner container in each lane pod (``pod.buildRunner``)
    takes_over_resumed_runs = True  # ``takeover``: a replaced orchestrator's lanes are removed once its Lease ran out
    options_model = KubernetesOptions

    @classmethod
    def janitor(cls, options: BackendOptions, run_id: str | None, *, say: Callable[[str], object]) -> int:
        assert isinstance(options, JanitorOptions)
        return janitor_pass(options, run_id, say=say)

    @classmethod
    def parse_options(cls, options: Mapping[str, object], environ: Mapping[str, str] | None = None) -> KubernetesOptions:
        """The options, else their env variables, validated; then what they imply for the lane pod."""
        opts = super().parse_options(options, environ)
        assert isinstance(opts, KubernetesOptions)
        return resolved(opts)

    def options_environ(self) -> Mapping[str, str]:
        """The environment given to the backend (a test's), else this process's."""
        return self._environ

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
        self._environ = dict(os.environ if environ is None else environ)
        super().__init__(run_id, ledger, state_dir, **options)
        assert isinstance(self.config, KubernetesOptions)
        self.opts: KubernetesOptions = self.config
        self._api_client = api_client
        self._owns_client = api_client is None
        self._namespace: str | None = None
        self._owner = objects.owner_from_env(self._environ, self.opts.owner_kind)
        self._attempts: dict[int, int] = {}
        self._run_objects_ready = False
        self._pod_watch: RunPodWatch | None = None
        self._lock = asyncio.Lock()
        #: This process's identity: the Lease holder and the creator annotation of everything it creates.
        self.holder = f"{self._environ.get(objects.ENV_POD_NAME) or socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        #: (kind, name) -> uid of every object this process created (or adopted as its own).
        self._uids: dict[tuple[str, str], str] = {}
        self._collision: ConfigError | None = None
        self._renewer: asyncio.Task[None] | None = None
        self.keeper: LeaseKeeper | None = None
        self._started = time.time()  # the run's deadline counts from here (a lane's activeDeadlineSeconds)
        self.limiter = RateLimiter(self.opts.qps, self.opts.burst)
        self._creates = asyncio.Semaphore(self.opts.max_concurrent_creates)
        self._executor = ThreadPoolExecutor(max_workers=self.opts.api_workers, thread_name_prefix="k8s-api")
        # Lanes are cluster-internal (or port-forwarded to loopback): never through an env proxy.
        # Health checks of every lane at once: keep a connection per lane (no reconnect per check).
        self._http = httpx.AsyncClient(timeout=5.0, trust_env=False, verify=shared_tls(), limits=httpx.Limits(
            max_connections=None, max_keepalive_connections=1024, keepalive_expiry=60.0))
        self.url_template = self.opts.url_template or objects.DEFAULT_URL_TEMPLATE

    @property
    def min_ready_timeout_s(self) -> float:
        """How long a lane may take to become ready here (node scale-up + image pull). Hook for the
        pool: ``wait_ready(backend, lane, max(spec.ready_timeout_s, backend.min_ready_timeout_s))``."""
        return self.opts.pod.ready_timeout_seconds

    # ---- connection ----------------------------------------------------------------------------

    def _client(self) -> client.ApiClient:
        if self._api_client is None:
            self._api_client, in_cluster = load_api_client(self.opts.context, pool_size=self.opts.api_workers)
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
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self._client())

    @property
    def namespace(self) -> str:
        """The run's namespace, decided once: ``--namespace``, else the pod's own (in-cluster), else the
        kubeconfig context's, else ``default``."""
        if self._namespace is None:
            self._namespace = resolve_namespace(self.opts.namespace, self._environ, self.opts.context,
                                                local=self._owns_client)
        return self._namespace

    @property
    def owner(self) -> objects.OwnerRef | None:
        """The orchestrator's Pod/Job, when it runs in the lanes' namespace (else no ownerReference)."""
        if self._owner is not None and self._owner.namespace == self.namespace:
            return self._owner
        return None

    async def _call(self, fn: Callable[..., T], *args: Any, budget_s: float | None = None,
                    on_retry: Callable[[BaseException], None] | None = None, **kwargs: Any) -> T:
        """Run one blocking client call in the backend's worker threads, every attempt within the
        client-side rate limit, 429/5xx/resets/timeouts retried with backoff (within ``budget_s``,
        default ``retry_budget_s``); an unreachable API server becomes a LaneError."""
        kwargs.setdefault("_request_timeout", self.opts.request_timeout_s)
        budget = self.opts.retry_budget_s if budget_s is None else budget_s
        try:
            call = functools.partial(call_with_retry, self.limiter.limit(fn), *args, budget_s=budget,
                                     on_retry=on_retry, **kwargs)
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
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

    def _mine(self, body: dict[str, Any]) -> dict[str, Any]:
        body["metadata"].setdefault("annotations", {})[objects.ANNOTATION_CREATOR] = self.holder
        return body

    def _collides(self, kind: str, name: str, ns: str, creator: str | None) -> ConfigError:
        self._collision = ConfigError(
            f"--run-id {self.run_id}: another orchestrator ({creator or 'unknown'}) already uses this run id in "
            f"namespace {ns} ({kind} {name} exists); nothing of that run was touched: choose another run id, or "
            f"remove a dead run's objects with `orchestrator cleanup --kubernetes --run-id {self.run_id}`")
        return self._collision

    async def _create(self, kind: str, name: str, ns: str, create: Callable[..., Any], read: Callable[..., Any] | None,
                      body: dict[str, Any]) -> None:
        """Create one object of ours and keep its uid. 409: adopt it if this process created it (a create
        whose answer was lost, retried), else it is another run's: a run-id collision (``ConfigError``)."""
        try:
            made: Any = await self._call(create, ns, self._mine(body), _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise self._api_error(f"create {kind} {ns}/{name}", exc) from None
            existing: dict[str, Any] = {}
            if read is not None:
                try:
                    resp: Any = await self._call(read, name, ns, _preload_content=False)
                    existing = dict(json.loads(resp.data))
                except ApiException as read_exc:
                    raise self._api_error(f"read {kind} {ns}/{name}", read_exc) from None
            meta = existing.get("metadata") or {}
            creator = (meta.get("annotations") or {}).get(objects.ANNOTATION_CREATOR)
            if creator != self.holder:
                raise self._collides(kind, name, ns, creator) from None
            self._uids[(kind, name)] = str(meta.get("uid"))
            return
        self._uids[(kind, name)] = str((json.loads(made.data).get("metadata") or {}).get("uid"))

    async def _ensure_run_objects(self, spec: LaneSpec) -> None:
        if self._collision is not None:
            raise self._collision
        if self._run_objects_ready:
            return
        try:
            await self._create_run_objects(spec)
        except ConfigError:  # a run-id collision: take back what this process created, nothing else
            await self._delete_run_objects()
            raise

    def _run_object(self, kind: str) -> tuple[str, dict[str, Any], Callable[..., Any], Callable[..., Any] | None]:
        """(API kind, body, create, read) of one of the run's objects: lease, networkpolicy, service."""
        ns, release = self.namespace, self.opts.release
        if kind == "lease":
            body = objects.lease_object(self.run_id, ns, self.owner, self.holder, self.opts.lease_ttl_s, time.time(),
                                        release=release)
            return "Lease", body, self.coordination.create_namespaced_lease, self.coordination.read_namespaced_lease
        if kind == "networkpolicy":
            body = objects.network_policy_object(self.run_id, ns, self.owner, self.opts.egress, release=release,
                                                 build_runner=self.opts.pod.build_runner.enabled)
            return ("NetworkPolicy", body, self.networking.create_namespaced_network_policy,
                    self.networking.read_namespaced_network_policy)
        body = objects.service_object(self.run_id, ns, owner=self.owner, release=release,
                                      build_runner=self.opts.pod.build_runner.enabled)
        return "Service", body, self.core.create_namespaced_service, self.core.read_namespaced_service

    async def restore(self, kind: str) -> str:
        """Create one of the run's objects again (the Lease keeper found it gone); its name. A 409 from
        another creator is a ``ConfigError`` (someone else's object under the name: never adopted)."""
        api_kind, body, create, read = self._run_object(kind)
        name = body["metadata"]["name"]
        self._uids.pop((api_kind, name), None)
        self.ledger.created(kind, name, backend=self.name, namespace=self.namespace)
        await self._create(api_kind, name, self.namespace, create, read, body)
        return str(name)

    async def _create_run_objects(self, spec: LaneSpec) -> None:
        ns = self.namespace
        api_kind, lease, create, read = self._run_object("lease")
        name = lease["metadata"]["name"]
        self.ledger.created("lease", name, backend=self.name, namespace=ns)
        try:
            await self._create(api_kind, name, ns, create, read, lease)
        except ConfigError:
            if not self.opts.takeover:
                raise
            await take_over(self, name, ns)  # a replaced orchestrator's run: its Lease ran out, its objects gone
            self._collision = None
            await self.restore("lease")
        if self._renewer is None or self._renewer.done():
            self.keeper = LeaseKeeper(self, name, ns, self.opts.lease_ttl_s)
            self._renewer = asyncio.create_task(self.keeper.run(), name=f"lease-{name}")
        if spec.secret_env and not self.opts.existing_secret:
            for value in spec.secret_env.values():
                register_secret(value)
            body = objects.secret_object(self.run_id, ns, spec.secret_env, self.owner, release=self.opts.release)
            name = body["metadata"]["name"]
            self.ledger.created("secret", name, backend=self.name, namespace=ns)
            # never read (its values are secret): a 409 here is another run's Secret
            await self._create("Secret", name, ns, self.core.create_namespaced_secret, None, body)
        for kind in ("networkpolicy", "service"):
            await self.restore(kind)
        self._run_objects_ready = True

    async def take_over_leftovers(self) -> None:
        """``--resume`` with no lane to start: no Lease create meets the old one, so when the ledger
        still has objects of the run open (the old pod died before its teardown), take over here."""
        if self.opts.takeover and any(e.meta.get("backend") == self.name for e in self.ledger.open_entries()):
            await take_over(self, objects.lease_name(self.run_id), self.namespace)

    async def _delete_run_objects(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None
        for kind, api_kind, delete in (
            ("service", "Service", self.core.delete_namespaced_service),
            ("networkpolicy", "NetworkPolicy", self.networking.delete_namespaced_network_policy),
            ("secret", "Secret", self.core.delete_namespaced_secret),
            ("lease", "Lease", self.coordination.delete_namespaced_lease),  # last: the run is alive until here
        ):
            for entry in self.ledger.open_entries(kind):
                if entry.meta.get("backend") != self.name:
                    continue
                ns = str(entry.meta.get("namespace") or self.namespace)
                await self._delete(kind, entry.id, ns, delete, api_kind=api_kind)
        self._run_objects_ready = False

    async def _delete(self, kind: str, name: str, ns: str, delete: Callable[..., Any], *, lane: str = "",
                      api_kind: str = "", grace_period_seconds: int | None = None, record: bool = True) -> None:
        """Delete one object this process created — by uid precondition — and record it (404 = gone =
        fine; 409 = the name now belongs to someone else's object: left alone). An object this process
        never created (its create failed or collided) is not deleted, only closed in the ledger."""
        uid = self._uids.get((api_kind or kind, name))
        if uid is None:
            log.debug("kubernetes: %s %s/%s was not created by this process: not deleted", kind, ns, name)
            if record:
                self.ledger.deleted(kind, name, lane=lane)
            return
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid),
                                      grace_period_seconds=grace_period_seconds)
        try:
            await self._call(delete, name, ns, body=body, _preload_content=False)  # the answer is not read
        except ApiException as exc:
            if exc.status == 409:
                log.warning("kubernetes: %s %s/%s is another object now (uid changed): left alone", kind, ns, name)
            elif exc.status != 404:
                err = self._api_error(f"delete {kind} {ns}/{name}", exc)
                if record:
                    self.ledger.delete_failed(kind, name, str(err), lane=lane)
                raise err from None
        self._uids.pop((api_kind or kind, name), None)
        if record:
            self.ledger.deleted(kind, name, lane=lane)

    _api_error = staticmethod(api_error)

    # ---- the run's pod watch -------------------------------------------------------------------

    def _watch(self) -> RunPodWatch:
        if self._pod_watch is None:
            selector = f"{objects.LABEL_NAME}={objects.LANE_APP},{objects.LABEL_RUN_ID}={objects.run_label(self.run_id)}"
            self._pod_watch = RunPodWatch(
                self.core.list_namespaced_pod, self.namespace, selector,
                watch_timeout_s=self.opts.watch_timeout_s, request_timeout_s=self.opts.request_timeout_s,
            )
            self._pod_watch.start()
        return self._pod_watch

    async def _watched_pod(self, lane: Lane) -> dict[str, Any] | None:
        """The lane's pod as the watch last saw it (waiting for the first list, at most ``health_watch_s``)."""
        w = self._watch()
        if not w.synced.is_set():
            await asyncio.to_thread(w.synced.wait, self.opts.health_watch_s)
        return w.get(lane.handle)

    # ---- lanes ---------------------------------------------------------------------------------

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        async with self._lock:  # first: a takeover (``--resume``) numbers new lanes after the old ones
            await self._ensure_run_objects(spec)
        attempt = self._attempts.get(index, -1) + 1
        self._attempts[index] = attempt
        ns = self.namespace
        sandbox_url = self.opts.sandbox_url or (
            f"http://127.0.0.1:{objects.SANDBOX_PORT}" if self.opts.pod.sandbox.enabled else None)
        if sandbox_url:  # n8n builds in the pod's sandbox container (same network namespace) or the given one
            spec = replace(spec, env={**spec.env, **sandbox_lane_env(sandbox_url)})
        left = self._started + self.opts.deadline_s - time.time()  # what is left of the run's deadline
        pod = objects.pod_object(
            self.run_id, index, ns, spec,
            secret=self.secret_ref, attempt=attempt, image=self.opts.image,
            image_pull_policy=self.opts.image_pull_policy, run_as_user=self.opts.run_as_user, owner=self.owner,
            pod=self.opts.pod, sidecar_image=self.opts.sidecar_image, release=self.opts.release,
            active_deadline_s=max(int(left), 0) + objects.LANE_DEADLINE_MARGIN_S,
        )
        name = pod["metadata"]["name"]
        service = objects.run_service_name(self.run_id)
        base_url = objects.lane_url(self.url_template, pod=name, service=service, namespace=ns, index=index,
                                    base_port=spec.base_port, cluster_domain=self.opts.cluster_domain)
        lane = Lane(lane_id=name, index=index, base_url=base_url, backend=self.name, run_id=self.run_id,
                    state=LaneState.starting, handle=name)
        if self.opts.pod.build_runner.enabled:  # where the `remote` builder sends this lane's builds
            lane.endpoints[objects.BUILD_RUNNER_CONTAINER] = objects.lane_url(
                self.url_template, pod=name, service=service, namespace=ns, index=index, base_port=spec.base_port,
                cluster_domain=self.opts.cluster_domain, port=objects.BUILD_RUNNER_PORT)
        async with self._lock:
            self.ledger.created("lane", name, lane=name, backend=self.name, index=index, pod=name, service=service,
                                namespace=ns, base_url=base_url)
        try:
            async with self._creates:  # bounded: 500 lanes do not open 500 creates at once
                await self._create("Pod", name, ns, self.core.create_namespaced_pod, self.core.read_namespaced_pod, pod)
        except (LaneError, ConfigError):
            try:  # leave nothing behind for a lane the caller never got
                await self.teardown(lane)
            except LaneError as exc:
                log.warning("%s", exc)
            raise
        self._watch()  # the run's one watch starts with its first lane
        return lane

    def _lane_namespace(self, lane: Lane) -> str:
        for entry in self.ledger.open_entries("lane"):
            if entry.id == lane.lane_id and entry.meta.get("namespace"):
                return str(entry.meta["namespace"])
        return self.namespace

    async def _read_pod(self, lane: Lane) -> dict[str, Any] | None:
        """The pod as a dict from the API (one GET), or None when it does not exist."""
        try:
            resp: Any = await self._call(
                self.core.read_namespaced_pod, lane.handle, self._lane_namespace(lane), _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._api_error(f"read Pod {lane.handle}", exc) from None
        return dict(json.loads(resp.data))

    def _ended(self, pod: dict[str, Any]) -> str | None:
        """Why a lane pod will not become ready: it ended, a container is stuck for good, its image
        pull kept failing ``pullGraceSeconds``, or it stayed Unschedulable ``unschedulableGraceSeconds``."""
        reason = terminal_reason(pod)
        if reason:
            return reason
        stuck = stuck_reason(pod)
        held = self._watch().stuck_for(pod["metadata"]["name"]) if stuck else None
        if stuck is None or held is None or held[0] != stuck[0]:
            return None
        grace = (self.opts.pod.pull_grace_seconds if stuck[0] == "pull" else self.opts.pod.unschedulable_grace_seconds)
        if held[1] < grace:
            return None
        return f"{stuck[1]}; gave up after {held[1]:.0f} s (grace {grace:.0f} s)"

    async def wait_ready(self, lane: Lane, timeout_s: float) -> None:
        """Wait (on the run's watch) until the pod is Ready — an ended pod fails at once, an image pull
        failing past ``pullGraceSeconds`` (120 s) or a pod Unschedulable past
        ``unschedulableGraceSeconds`` (600 s) fails naming the image or the scheduler's message, the
        rest waits until the deadline (at least ``lanes.pod.readyTimeoutSeconds``) — then ask
        ``/healthz/readiness`` through the lane URL."""
        timeout_s = max(timeout_s, self.min_ready_timeout_s)
        deadline = time.monotonic() + timeout_s
        last = "pod not seen yet"
        while True:
            pod = await self._watched_pod(lane)
            if pod is None and lane.handle in self._watch().deleted:
                raise LaneError(f"{lane.describe()}: pod deleted")
            if pod is not None:
                if is_ready(pod):
                    break
                reason = self._ended(pod)
                if reason:
                    raise LaneError(f"{lane.describe()}: {reason}")
                last = status_summary(pod)
            if time.monotonic() >= deadline:
                raise LaneError(f"{lane.describe()}: pod not ready after {timeout_s:.0f} s ({last})")
            await asyncio.sleep(0.2)
        while not await self._http_ready(lane):
            if time.monotonic() >= deadline:
                raise LaneError(f"{lane.describe()}: pod Ready but {lane.base_url}/healthz/readiness did not answer 200")
            await asyncio.sleep(0.5)

    async def _http_ready(self, lane: Lane) -> bool:
        return await answers_ready(self._http, lane.base_url)

    async def health(self, lane: Lane) -> bool:
        """Pod Running with Ready=True (as the run's watch last saw it) AND readiness over HTTP.

        An API server that cannot be reached or answers an error counts as "not healthy", not a crash.
        """
        try:
            pod = await self._watched_pod(lane)
            if pod is None or not is_ready(pod):
                return False
            return await self._http_ready(lane)
        except (ApiException, LaneError, urllib3.exceptions.HTTPError) as exc:
            log.debug("%s: health check failed: %s", lane.describe(), redact(str(exc)))
            return False

    async def is_gone(self, lane: Lane) -> bool:
        """True when the pod was deleted or can never become ready (ended: OOMKilled, Evicted, …; an
        image pull failing or Unschedulable past its grace)."""
        w = self._watch()
        pod = await self._watched_pod(lane)
        if pod is not None:
            return self._ended(pod) is not None
        if lane.handle in w.deleted:
            return True
        if not w.synced.is_set() or w.error:
            return False  # the API is unreachable for now: that says nothing about the pod
        try:  # not in the watch's view (yet): ask once
            read = await self._read_pod(lane)
        except (LaneError, urllib3.exceptions.HTTPError):
            return False
        return read is None or terminal_reason(read) is not None

    async def gone_reason(self, lane: Lane) -> str | None:
        pod = await self._watched_pod(lane)
        if pod is not None:
            return self._ended(pod)
        return "pod deleted" if lane.handle in self._watch().deleted else None

    async def logs(self, lane: Lane, lines: int = 40) -> str:
        """The container's last ``lines``, plus the pod's status when it is stuck or gone."""
        ns = self._lane_namespace(lane)
        try:
            text = str(await self._call(
                self.core.read_namespaced_pod_log, lane.handle, ns, container=objects.CONTAINER_NAME, tail_lines=lines
            ))
        except ApiException as exc:
            text = f"(no log: HTTP {exc.status} {exc.reason})"
        pod = self._pod_watch.get(lane.handle) if self._pod_watch is not None else None
        if pod is None:
            try:
                pod = await self._read_pod(lane)
            except LaneError:
                pod = None
        if pod is None or not is_ready(pod) or text.startswith("(no log"):
            text += f"\n[{status_summary(pod) if pod is not None else 'pod not found'}]"
        return redact(text)

    async def teardown(self, lane: Lane) -> None:
        """Delete the lane's Pod (404 = gone); with the run's last lane, the run objects (Service,
        NetworkPolicy, Secret, Lease)."""
        ns = self._lane_namespace(lane)
        name = lane.handle or lane.lane_id
        await self._delete("pod", name, ns, self.core.delete_namespaced_pod, api_kind="Pod", grace_period_seconds=5,
                           record=False)  # the ledger's "lane" entry is the pod's
        lane.state = LaneState.stopped
        async with self._lock:
            self.ledger.deleted("lane", lane.lane_id, lane=lane.lane_id)
            if not [e for e in self.ledger.open_entries("lane") if e.meta.get("backend") == self.name]:
                await self._delete_run_objects()

    def _knows_run(self, run_id: str) -> bool:
        """Whether this machine's ledger of ``run_id`` recorded kubernetes objects."""
        ledger = self.ledger if run_id == self.run_id else Ledger.for_run(run_id, self.state_dir)
        return any((rec.get("meta") or {}).get("backend") == self.name for rec in ledger.records())

    async def sweep(self, run_id: str | None = None) -> list[str]:
        """Delete one run's objects by label: pods, services, networkpolicies (list + delete), secrets
        (deletecollection) — only for a run this machine's ledger knows as a kubernetes run.

        ``run_id=None`` (every run: what plain ``orchestrator cleanup`` asks) touches nothing: another
        run in the namespace may be alive. The janitor (``orchestrator cleanup --kubernetes``) removes
        the objects of runs whose owner is dead.
        """
        if run_id is None:
            log.info("kubernetes: not swept (every run); `orchestrator cleanup --kubernetes` removes dead runs' lanes")
            return []
        if not self._knows_run(run_id):
            log.debug("kubernetes: run %s has no kubernetes objects in this machine's ledger: not swept", run_id)
            return []
        if run_id == self.run_id and self._renewer is not None:  # the keeper would re-create what goes now
            self._renewer.cancel()
            self._renewer = None
        removed = await self.remove_run(run_id, self.namespace)
        if run_id == self.run_id:
            self._run_objects_ready = False
        return removed

    async def remove_run(self, run_id: str, ns: str) -> list[str]:
        """Delete every object of ``run_id`` by label (list, then delete each by its uid; secrets by
        deletecollection) and close their ledger entries."""
        selector = objects.sweep_selector(run_id, self.opts.release)
        removed: list[str] = []
        for kind, lister, deleter in (
            ("pod", self.core.list_namespaced_pod, self.core.delete_namespaced_pod),
            ("service", self.core.list_namespaced_service, self.core.delete_namespaced_service),
            ("networkpolicy", self.networking.list_namespaced_network_policy,
             self.networking.delete_namespaced_network_policy),
            ("lease", self.coordination.list_namespaced_lease, self.coordination.delete_namespaced_lease),
        ):
            try:
                resp: Any = await self._call(lister, ns, label_selector=selector, _preload_content=False)
            except ApiException as exc:
                raise self._api_error(f"list {kind}s in {ns} ({selector})", exc) from None
            for item in json.loads(resp.data).get("items") or []:
                meta = item.get("metadata") or {}
                body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta.get("uid")))
                try:
                    await self._call(deleter, meta["name"], ns, body=body)  # only the object listed
                except ApiException as exc:
                    if exc.status == 409:
                        continue
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
        return removed

    def _forget(self, kind: str, meta: Mapping[str, Any]) -> None:
        """Close the ledger entries of a swept object in the run that created it (if that ledger is here);
        a lane pod takes what was recorded on it with it (its n8n's users and workflows: a taken-over
        run's teardown must not report them as left)."""
        run_id = (meta.get("annotations") or {}).get(objects.ANNOTATION_RUN_ID)
        if not run_id:
            return
        ledger = self.ledger if run_id == self.run_id else Ledger.for_run(run_id, self.state_dir)
        if not ledger.path.exists():  # a run recorded elsewhere (another machine, a pod's volume)
            return
        name = meta.get("name", "")
        if kind == "pod":
            close_with_lane(ledger, name)
            ledger.deleted("lane", name, lane=name)
        else:
            ledger.deleted(kind, name)

    async def close(self) -> None:
        if self._renewer is not None:  # the Lease runs out on its own; the janitor takes what is left
            self._renewer.cancel()
            self._renewer = None
        if self._pod_watch is not None:
            self._pod_watch.stop()
            self._pod_watch = None
        await self._http.aclose()
        if self._owns_client and self._api_client is not None:
            await asyncio.to_thread(self._api_client.close)
            self._api_client = None
        self._executor.shutdown(wait=False, cancel_futures=True)
