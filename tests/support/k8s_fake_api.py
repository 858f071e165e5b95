"""A loopback stand-in for the Kubernetes API server, for the ``kubernetes`` lane backend's tests.

No real API server can run on this machine (no kube-apiserver/k3s/kind/kwok is installable, and no
images can be pulled). :class:`FakeApiServer` is a threaded HTTP server on 127.0.0.1 that answers
the part of the REST API the backend and the janitor use, driven by the real ``kubernetes`` client:

* create / get / delete / list (label and field selectors) / ``deletecollection`` for pods,
  services, secrets, networkpolicies (``networking.k8s.io/v1``) and jobs (``batch/v1``);
* a monotonic ``resourceVersion`` and **long-poll watches**: ``?watch=true`` streams the current
  objects as ADDED (or, with ``resourceVersion``, only what changed after it), then blocks and
  streams every later ADDED / MODIFIED / DELETED until ``timeoutSeconds`` or shutdown;
* a **kubelet**: each created pod follows a plan of ``(delay_s, outcome)`` steps — ``ready``,
  ``pending``, ``ErrImagePull``, ``ImagePullBackOff``, ``OOMKilled``, ``Evicted``, ``Succeeded`` —
  (default: Ready after 50 ms), and :meth:`FakeApiServer.set_pod` moves a pod at any time;
* **owner-reference garbage collection**: deleting an object deletes (background propagation)
  every object whose ``ownerReferences`` names its uid — and, as in a real cluster, a pod that merely
  *ended* (phase Failed/Succeeded) still exists, so its children stay;
* **429 answers**: ``throttle(n, retry_after)`` makes the next ``n`` API requests answer
  ``429 Too Many Requests`` with a ``Retry-After`` header (``state.throttle_rate``: that fraction of
  them, seeded);
* scripted failures per (method, resource), e.g. ``{("POST", "pods"): 403}``;
* ``/lanes/<service>/healthz/readiness`` answers 200 while the service's pod is Ready (the lane URL
  of the tests points here).

The harsher behaviours of a real API server, each off by default so a test turns on only what it needs:

* **5xx**: ``fail_next(n, code)`` (the next ``n`` API requests) and ``state.error_rate`` (that
  fraction of them, seeded) answer 500/503/504;
* **latency**: ``state.latency_s = (lo, hi)`` delays every API answer by a uniform draw;
* **410 Gone and bookmarks**: ``compact()`` drops the event history, so a watch resuming from an older
  ``resourceVersion`` gets an ``ERROR`` event with code 410 (as etcd compaction does); with
  ``allowWatchBookmarks=true`` an idle watch sends a ``BOOKMARK`` every ``state.bookmark_s``;
* **graceful deletion**: with ``state.termination_s`` > 0 a deleted pod first gets a
  ``deletionTimestamp`` (Terminating, a MODIFIED event) and goes that long later (its owned objects
  with it); ``DeleteOptions.preconditions.uid`` that no longer matches answers 409;
* **admission**: ``state.pod_security = "restricted"`` refuses pods that violate Pod Security
  restricted (403 with the reason, as the admission plugin words it), ``state.quota_pods = N`` a
  ResourceQuota of N pods (403 ``exceeded quota``);
* **leases** (``coordination.k8s.io/v1``) with ``PUT`` (optimistic concurrency on
  ``resourceVersion``) and ``PATCH`` (merge patch), for the run's liveness lease;
* a kubelet outcome ``Unschedulable`` (PodScheduled False with the scheduler's message).

* **RBAC**: ``state.authorizer`` (``tests/support/k8s_fake_rbac.py`` builds one from the Roles and
  RoleBindings a Helm render gives) sees every API request with its bearer token and may refuse it
  with 403, worded as the API server words it (``api_client(token=…)`` sends one);
* **an outage**: ``outage(seconds)`` makes every API request answer 503 for that long (the lanes'
  own endpoints still answer: an API server outage does not stop pods);
* a merge ``PATCH`` carrying ``metadata.resourceVersion`` is refused with 409 when it is stale (as
  the API server's optimistic concurrency does).

Every request is recorded (method, path, query, body) so tests can assert the exact calls. What it
does *not* model: NetworkPolicy enforcement, admission policies' CEL, real scheduling, real
containers. Those need a cluster (docs/cluster.md).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client

#: resource -> (API group, apiVersion, kind)
COLLECTIONS = {
    "pods": ("", "v1", "Pod"),
    "services": ("", "v1", "Service"),
    "secrets": ("", "v1", "Secret"),
    "networkpolicies": ("networking.k8s.io", "networking.k8s.io/v1", "NetworkPolicy"),
    "jobs": ("batch", "batch/v1", "Job"),
    "leases": ("coordination.k8s.io", "coordination.k8s.io/v1", "Lease"),
}
_PREFIXES = {("api", "v1"): "", ("apis", "networking.k8s.io"): "networking.k8s.io", ("apis", "batch"): "batch",
             ("apis", "coordination.k8s.io"): "coordination.k8s.io"}
#: Volume types Pod Security "restricted" allows.
_RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                                 "projected", "secret"})
DEFAULT_PLAN: tuple[tuple[float, str], ...] = ((0.05, "ready"),)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None

    @property
    def call(self) -> tuple[str, str, dict[str, str]]:
        return (self.method, self.path, self.query)

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") == "true"


@dataclass
class ApiState:
    """What the fake cluster holds, and how it behaves."""

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)  # (resource, ns, name)
    requests: list[Request] = field(default_factory=list)
    #: The steps a new pod goes through (delay after the previous step, outcome).
    pod_plan: tuple[tuple[float, str], ...] = DEFAULT_PLAN
    #: Per pod name, a plan overriding ``pod_plan``.
    pod_plans: dict[str, tuple[tuple[float, str], ...]] = field(default_factory=dict)
    #: A plan computed from the pod name (benchmarks: spread readiness, some failing pulls).
    plan_for: Callable[[str], tuple[tuple[float, str], ...]] | None = None
    #: (method, resource) -> HTTP status to fail with, e.g. ("POST", "pods"): 403.
    failures: dict[tuple[str, str], int] = field(default_factory=dict)
    throttle_left: int = 0
    retry_after: str | None = "0"
    throttled: int = 0
    #: That fraction of API requests (seeded) answers 429 with ``Retry-After: retry_after``.
    throttle_rate: float = 0.0
    #: The next ``errors_left`` API requests answer ``error_code``; ``error_rate`` of them at random.
    errors_left: int = 0
    error_code: int = 503
    error_rate: float = 0.0
    errors_sent: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(26))
    #: Every API answer waits a uniform draw from this range (seconds).
    latency_s: tuple[float, float] = (0.0, 0.0)
    #: Watches resuming from a version at or below this get 410 Gone.
    compacted: int = 0
    #: An idle watch that asked for bookmarks gets one this often (None: never).
    bookmark_s: float | None = None
    #: The version each bookmark sent carried, in order (what a test waits for instead of a sleep).
    bookmarks_sent: list[int] = field(default_factory=list)
    #: A deleted pod stays Terminating this long (0: deleted at once).
    termination_s: float = 0.0
    #: "restricted": pods are admitted only if they meet Pod Security restricted.
    pod_security: str | None = None
    #: A ResourceQuota on the pod count (None: none).
    quota_pods: int | None = None
    #: Requests being answered right now, and the most at once, per (method, resource).
    inflight: dict[tuple[str, str], int] = field(default_factory=dict)
    peak_inflight: dict[tuple[str, str], int] = field(default_factory=dict)
    version: int = 1
    #: (resourceVersion, resource, namespace, event type, object snapshot)
    events: list[tuple[int, str, str, str, dict[str, Any]]] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    closing: bool = False
    #: Every namespace an object was created in (the lane side finds a pod by name without a scan).
    namespaces: set[str] = field(default_factory=set)
    #: (request, bearer token or None) -> why it is forbidden, or None (allowed). None: no RBAC.
    authorizer: Callable[[Request, str | None], str | None] | None = None
    #: (request, why) of every request the authorizer refused
    denied: list[tuple[Request, str]] = field(default_factory=list)
    #: API requests answer 503 until this ``time.monotonic()``; how many did
    outage_until: float = 0.0
    outage_answers: int = 0

    @property
    def lock(self) -> threading.Condition:  # the old name, kept for tests that lock the state
        return self.cond


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (``k=v,k2=v2``), which is all the backend sends."""
    return all(labels.get(k) == v for k, v in (p.split("=", 1) for p in selector.split(",") if p))


def _field_ok(selector: str | None, obj: dict[str, Any]) -> bool:
    if not selector:
        return True
    key, _, value = selector.partition("=")
    if key == "metadata.name":
        return bool(obj["metadata"]["name"] == value)
    if key == "status.phase":
        return bool((obj.get("status") or {}).get("phase") == value)
    raise ValueError(f"field selector {selector!r} not modelled")


UNSCHEDULABLE_MESSAGE = "0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available."


def pod_status(outcome: str) -> dict[str, Any]:
    """A pod's ``status`` for one scripted outcome (what a kubelet would report)."""
    now = "2026-12-02T00:00:10Z"
    if outcome == "pending":
        return {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    if outcome == "Unschedulable":
        return {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                    "message": UNSCHEDULABLE_MESSAGE}]}
    if outcome == "ready":
        return {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "n8n", "ready": True, "restartCount": 0, "image": "x", "imageID": "",
                                       "state": {"running": {"startedAt": now}}}]}
    if outcome in ("ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName"):
        return {"phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False", "message": "containers with unready status: [n8n]"}],
                "containerStatuses": [{"name": "n8n", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
                                       "state": {"waiting": {"reason": outcome,
                                                             "message": _waiting_message(outcome)}}}]}
    if outcome == "OOMKilled":
        return {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
                "containerStatuses": [{"name": "n8n", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
                                       "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                                                "finishedAt": now}}}]}
    if outcome == "Evicted":
        return {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
                "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                                "lastTransitionTime": now}]}
    if outcome == "Succeeded":
        return {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
                "containerStatuses": [{"name": "n8n", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
                                       "state": {"terminated": {"reason": "Completed", "exitCode": 0,
                                                                "finishedAt": now}}}]}
    raise ValueError(f"unknown pod outcome {outcome!r}")


def _waiting_message(reason: str) -> str:
    if reason == "ErrImagePull":
        return 'rpc error: code = NotFound desc = failed to pull and unpack image "x": not found'
    if reason == "ImagePullBackOff":
        return 'Back-off pulling image "x"'
    return f"{reason} (scripted)"


def pod_security_violations(pod: dict[str, Any]) -> list[str]:
    """What Pod Security "restricted" objects to in a pod (the checks the admission plugin makes,
    in its words, shortened); [] when it is admitted."""
    spec = pod.get("spec") or {}
    psc = spec.get("securityContext") or {}
    out = [f"host namespaces ({k}=true)" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    for vol in spec.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            out.append(f'restricted volume types (volume "{vol.get("name")}" uses {", ".join(sorted(kinds))})')
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    for c in containers:
        sc, name = c.get("securityContext") or {}, c.get("name")
        if sc.get("privileged"):
            out.append(f'privileged (container "{name}" must not set securityContext.privileged=true)')
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f'allowPrivilegeEscalation != false (container "{name}" must set '
                       "securityContext.allowPrivilegeEscalation=false)")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f'unrestricted capabilities (container "{name}" must set securityContext.capabilities.drop=["ALL"])')
        if not (sc.get("runAsNonRoot", psc.get("runAsNonRoot"))):
            out.append(f'runAsNonRoot != true (container "{name}" must set securityContext.runAsNonRoot=true)')
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f'runAsUser=0 (container "{name}" must not set runAsUser=0)')
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f'seccompProfile (container "{name}" must set securityContext.seccompProfile.type to '
                       '"RuntimeDefault" or "Localhost")')
        if sc.get("procMount") not in (None, "Default"):
            out.append(f'procMount (container "{name}" must not set securityContext.procMount={sc["procMount"]})')
    return out


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386)."""
    for k, v in patch.items():
        if v is None:
            base.pop(k, None)
        elif isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: FakeApiServer  # set per server

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    def _send(self, code: int, payload: Any, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[str, str, str | None, str | None]:
        """(resource, namespace, name, subresource) of an API path, or ('lane', '', service, rest)."""
        parts = [p for p in urlsplit(self.path).path.split("/") if p]
        if parts[:1] == ["lanes"]:
            return "lane", "", parts[1], "/".join(parts[2:])
        if (parts[0], parts[1]) not in _PREFIXES:
            return "?", "", None, None
        parts = parts[2:] if parts[0] == "api" else parts[3:]
        if len(parts) < 3 or parts[0] != "namespaces":
            return "?", "", None, None
        ns, resource = parts[1], parts[2]
        return resource, ns, parts[3] if len(parts) > 3 else None, parts[4] if len(parts) > 4 else None

    def _handle(self) -> None:
        st = self.api.state
        split = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        request = Request(self.command, split.path, query, body)
        with st.cond:
            st.requests.append(request)
        resource, ns, name, sub = self._route()
        if resource == "lane":
            return self._lane(name or "", sub or "", body)
        with st.cond:
            down = time.monotonic() < st.outage_until
            if down:
                st.outage_answers += 1
        if down:
            return self._send(503, status_body(503, "ServiceUnavailable", "etcdserver: request timed out (outage)"))
        auth = self.headers.get("Authorization") or ""
        why = st.authorizer(request, auth[7:] if auth.startswith("Bearer ") else None) if st.authorizer else None
        if why is not None:
            with st.cond:
                st.denied.append((request, why))
            return self._send(403, status_body(403, "Forbidden", why))
        with st.cond:
            throttled = st.throttle_left > 0 or (st.throttle_rate > 0 and st.rng.random() < st.throttle_rate)
            if throttled:
                st.throttle_left = max(0, st.throttle_left - 1)
                st.throttled += 1
        if throttled:
            headers = {"Retry-After": st.retry_after} if st.retry_after is not None else {}
            return self._send(429, status_body(429, "TooManyRequests", "the server has received too many requests"),
                              headers=headers)
        with st.cond:
            error = 0
            if st.errors_left > 0:
                st.errors_left -= 1
                error = st.error_code
            elif st.error_rate and st.rng.random() < st.error_rate:
                error = st.rng.choice((500, 503, 504))
            if error:
                st.errors_sent += 1
            lo, hi = st.latency_s
            delay = st.rng.uniform(lo, hi) if hi > 0 else 0.0
            key = (self.command, resource)
            st.inflight[key] = st.inflight.get(key, 0) + 1
            st.peak_inflight[key] = max(st.peak_inflight.get(key, 0), st.inflight[key])
        try:
            if delay:
                time.sleep(delay)
            if error:
                return self._send(error, status_body(error, "InternalError" if error == 500 else "ServiceUnavailable",
                                                     "injected server error"))
            if (self.command, resource) in st.failures:
                code = st.failures[(self.command, resource)]
                return self._send(code, status_body(code, "Forbidden", f"{resource} is forbidden (scripted)"))
            if resource not in COLLECTIONS:
                return self._send(404, status_body(404, "NotFound", "unknown path"))
            if name is None:
                return self._collection(resource, ns, query, body)
            return self._item(resource, ns, name, sub, body)
        finally:
            with st.cond:
                st.inflight[key] -= 1

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

    def _collection(self, resource: str, ns: str, query: dict[str, str], body: Any) -> None:
        api = self.api
        _, api_version, kind = COLLECTIONS[resource]
        if self.command == "POST":
            code, obj = api.create(resource, ns, body)
            return self._send(code, obj)
        if query.get("watch") == "true":
            return self._watch(resource, ns, query)
        items, version = api.list(resource, ns, query.get("labelSelector"), query.get("fieldSelector"))
        if self.command == "DELETE":  # deletecollection
            for o in items:
                api.delete(resource, ns, o["metadata"]["name"])
        return self._send(200, {"kind": f"{kind}List", "apiVersion": api_version,
                                "metadata": {"resourceVersion": str(version)}, "items": items})

    def _watch(self, resource: str, ns: str, query: dict[str, str]) -> None:
        """Long-poll: current objects as ADDED (unless ``resourceVersion`` is given), then every change
        matching the selectors until ``timeoutSeconds`` or shutdown."""
        st = self.api.state
        selector, fields = query.get("labelSelector"), query.get("fieldSelector")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(event: dict[str, Any]) -> None:
            line = (json.dumps(event) + "\n").encode()
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        def wanted(r: str, n: str, obj: dict[str, Any]) -> bool:
            return (r == resource and n == ns and matches(selector or "", obj["metadata"].get("labels") or {})
                    and _field_ok(fields, obj))

        bookmarks = query.get("allowWatchBookmarks") == "true" and st.bookmark_s
        _, api_version, kind = COLLECTIONS[resource]
        try:
            with st.cond:
                if query.get("resourceVersion"):
                    since = int(query["resourceVersion"])
                    initial: list[dict[str, Any]] = []
                    gone = since < st.compacted
                else:
                    since = st.version
                    initial = [copy.deepcopy(o) for (r, n, _), o in st.objects.items() if wanted(r, n, o)]
                    gone = False
            if gone:  # as etcd after compaction: the watch opens, then says 410 and ends
                chunk({"type": "ERROR", "object": status_body(
                    410, "Expired", f"too old resource version: {since} ({st.compacted})")})
                self.wfile.write(b"0\r\n\r\n")
                return
            for obj in initial:
                chunk({"type": "ADDED", "object": obj})
            last_sent = time.monotonic()
            while True:
                with st.cond:
                    pending = [(v, t, o) for v, r, n, t, o in st.events if v > since and wanted(r, n, o)]
                    if not pending:
                        left = deadline - time.monotonic()
                        if left <= 0 or st.closing:
                            break
                        if bookmarks and time.monotonic() - last_sent >= bookmarks:
                            version = st.version
                        else:
                            st.cond.wait(min(left, 0.5, bookmarks or 0.5))
                            continue
                if not pending:  # a bookmark: "nothing for you up to this version"
                    chunk({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                                                           "metadata": {"resourceVersion": str(version)}}})
                    since, last_sent = max(since, version), time.monotonic()
                    with st.cond:
                        st.bookmarks_sent.append(version)
                    continue
                for v, t, o in pending:
                    chunk({"type": t, "object": o})
                    since = v
                last_sent = time.monotonic()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # the client stopped watching
            pass

    def _item(self, resource: str, ns: str, name: str, sub: str | None, body: Any = None) -> None:
        api = self.api
        if sub == "log":
            obj = api.get(resource, ns, name)
            if obj is None:
                return self._send(404, status_body(404, "NotFound", f'{resource} "{name}" not found'))
            return self._send(200, b"n8n ready on 0.0.0.0, port 5678\nEditor is now accessible\n", "text/plain")
        if self.command in ("PUT", "PATCH"):
            code, out = api.update(resource, ns, name, body or {}, merge=self.command == "PATCH")
            return self._send(code, out)
        if self.command == "DELETE":
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            current = api.get(resource, ns, name)
            if current is not None and uid and current["metadata"].get("uid") != uid:
                return self._send(409, status_body(409, "Conflict", (
                    f'Operation cannot be fulfilled on {resource} "{name}": Precondition failed: UID in precondition: '
                    f'{uid}, UID in object meta: {current["metadata"].get("uid")}')))
            grace = (body or {}).get("gracePeriodSeconds")
            if grace is None:
                grace = next(iter(parse_qs(urlsplit(self.path).query).get("gracePeriodSeconds", [])), None)
            obj = api.delete(resource, ns, name, grace_s=None if grace is None else float(grace))
        else:
            obj = api.get(resource, ns, name)
        if obj is None:
            return self._send(404, status_body(404, "NotFound", f'{resource} "{name}" not found'))
        return self._send(200, obj)

    def _lane(self, service: str, rest: str, body: Any = None) -> None:
        """The lane side: ``GET healthz/readiness`` (200 while the pod runs) and, for benchmarks, a
        stand-in build runner ``POST build {"ms": N}`` that answers after N ms."""
        api = self.api
        ready = False
        with api.state.cond:  # one lookup per namespace, not a scan of every object (500-lane benchmarks)
            for ns in api.state.namespaces:
                pod = api.state.objects.get(("pods", ns, service))
                if pod is not None:
                    ready = (pod.get("status") or {}).get("phase") == "Running"
        if rest == "healthz/readiness" and ready:
            return self._send(200, {"status": "ok"})
        if rest.startswith("rest/") and ready:  # what bring-up asks of n8n (benchmarks: the real provision path)
            return self._n8n(rest, body)
        if rest == "build" and self.command == "POST" and ready:
            time.sleep(float((body or {}).get("ms", 0)) / 1000)
            return self._send(200, {"ok": True, "lane": service})
        return self._send(503, {"status": "error"})


    def _n8n(self, rest: str, body: Any) -> None:
        """A minimal n8n for ``lanes.bringup``: e2e reset and feature, login (a cookie), no editor
        (``/rest/settings`` 404, as with ``N8N_DISABLE_UI``), no Instance AI settings."""
        if rest in ("rest/e2e/reset", "rest/e2e/feature"):
            return self._send(200, {"data": {"success": True}})
        if rest == "rest/login" and self.command == "POST":
            email = (body or {}).get("emailOrLdapLoginId", "")
            return self._send(200, {"data": {"id": "owner", "email": email}},
                              headers={"Set-Cookie": f"n8n-auth=fake-{uuid.uuid4().hex}; Path=/; HttpOnly"})
        return self._send(404, {"message": "not found"})


class _Server(ThreadingHTTPServer):
    request_queue_size = 4096  # benchmarks open a connection per lane at once (500+): the listen backlog
    daemon_threads = True


class FakeApiServer:
    """Threaded HTTP server on 127.0.0.1 standing in for the API server (and the lanes' readiness)."""

    def __init__(self) -> None:
        self.state = ApiState()
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._timers: list[threading.Timer] = []

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.state.cond:
            self.state.closing = True
            self.state.cond.notify_all()
        for t in self._timers:
            t.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- the client side of tests --------------------------------------------------------------

    def api_client(self, token: str | None = None) -> client.ApiClient:
        cfg = client.Configuration()
        cfg.host = self.url
        if token is not None:
            cfg.api_key = {"authorization": token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)

    def outage(self, seconds: float) -> None:
        """Every API request answers 503 for ``seconds`` from now."""
        with self.state.cond:
            self.state.outage_until = time.monotonic() + seconds

    def calls(self, *, watches: bool = True) -> list[tuple[str, str, dict[str, str]]]:
        return [r.call for r in self.state.requests if watches or not r.is_watch]

    def api_calls(self) -> list[Request]:
        """Requests to the API (not to the lanes' readiness endpoint)."""
        return [r for r in self.state.requests if not r.path.startswith("/lanes/")]

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.state.requests if r.method == "POST"]

    def settle(self, quiet_s: float = 0.3, timeout_s: float = 5.0) -> int:
        """Wait until no request arrived for ``quiet_s`` (a closed backend's watch thread may still
        send its last request); returns the request count then."""
        deadline = time.monotonic() + timeout_s
        count = len(self.state.requests)
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            now = len(self.state.requests)
            if now == count:
                break
            count = now
        return count

    def throttle(self, n: int, retry_after: str | None = "0") -> None:
        """The next ``n`` API requests answer 429 (with ``Retry-After: retry_after`` unless None)."""
        with self.state.cond:
            self.state.throttle_left, self.state.retry_after = n, retry_after

    def names(self, resource: str) -> set[str]:
        with self.state.cond:
            return {name for (r, _, name) in self.state.objects if r == resource}

    # ---- the cluster side ----------------------------------------------------------------------

    def _event(self, resource: str, ns: str, kind: str, obj: dict[str, Any]) -> None:
        """Record a change (caller holds the lock): bump the version, wake the watches."""
        st = self.state
        st.version += 1
        obj["metadata"]["resourceVersion"] = str(st.version)
        st.events.append((st.version, resource, ns, kind, copy.deepcopy(obj)))
        st.cond.notify_all()

    def add(self, resource: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        """Put an object in the cluster as someone else would (e.g. the orchestrator's own Pod)."""
        code, obj = self.create(resource, ns, body, plan=False)
        assert code == 201, obj
        return obj

    def create(self, resource: str, ns: str, body: dict[str, Any], *, plan: bool = True) -> tuple[int, dict[str, Any]]:
        st = self.state
        name = body["metadata"]["name"]
        with st.cond:
            if (resource, ns, name) in st.objects:
                return 409, status_body(409, "AlreadyExists", f'{resource} "{name}" already exists')
            if resource == "pods" and plan and st.pod_security == "restricted":
                violations = pod_security_violations(body)
                if violations:
                    return 403, status_body(403, "Forbidden", f'pods "{name}" is forbidden: violates PodSecurity '
                                                              f'"restricted:latest": {"; ".join(violations)}')
            if resource == "pods" and plan and st.quota_pods is not None:
                used = sum(1 for (r, n, _) in st.objects if r == "pods" and n == ns)
                if used + 1 > st.quota_pods:
                    return 403, status_body(403, "Forbidden", (
                        f'pods "{name}" is forbidden: exceeded quota: lanes, requested: pods=1, used: pods={used}, '
                        f"limited: pods={st.quota_pods}"))
            obj = copy.deepcopy(body)
            obj["metadata"].setdefault("uid", str(uuid.uuid4()))
            obj["metadata"]["creationTimestamp"] = _now_rfc3339()
            obj["metadata"]["namespace"] = ns
            if resource == "pods" and "status" not in body:
                obj["status"] = pod_status("pending")
            st.objects[(resource, ns, name)] = obj
            st.namespaces.add(ns)
            self._event(resource, ns, "ADDED", obj)
            out = copy.deepcopy(obj)
        if resource == "pods" and plan:
            chosen = st.pod_plans.get(name) or (st.plan_for(name) if st.plan_for else st.pod_plan)
            self._schedule(ns, name, chosen)
        return 201, out

    def _schedule(self, ns: str, name: str, plan: tuple[tuple[float, str], ...]) -> None:
        at = 0.0
        for delay, outcome in plan:
            at += delay
            timer = threading.Timer(at, self.set_pod, args=(name, outcome, ns))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def set_pod(self, name: str, outcome: str, ns: str | None = None) -> bool:
        """Move a pod to ``outcome`` (see :func:`pod_status`); False when it no longer exists."""
        st = self.state
        with st.cond:
            key = next((k for k in st.objects if k[0] == "pods" and k[2] == name and ns in (None, k[1])), None)
            if key is None or st.closing:
                return False
            obj = st.objects[key]
            obj["status"] = pod_status(outcome)
            self._event("pods", key[1], "MODIFIED", obj)
        return True

    def get(self, resource: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.state.cond:
            obj = self.state.objects.get((resource, ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, resource: str, ns: str, selector: str | None = None,
             fields: str | None = None) -> tuple[list[dict[str, Any]], int]:
        with self.state.cond:
            items = [copy.deepcopy(o) for (r, n, _), o in self.state.objects.items()
                     if r == resource and n == ns and matches(selector or "", o["metadata"].get("labels") or {})
                     and _field_ok(fields, o)]
            return items, self.state.version

    def update(self, resource: str, ns: str, name: str, body: dict[str, Any], *,
               merge: bool = False) -> tuple[int, dict[str, Any]]:
        """PUT (replace; 409 when ``metadata.resourceVersion`` is stale) or PATCH (merge patch)."""
        st = self.state
        with st.cond:
            current = st.objects.get((resource, ns, name))
            if current is None:
                return 404, status_body(404, "NotFound", f'{resource} "{name}" not found')
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent and sent != current["metadata"].get("resourceVersion"):  # PUT, or a PATCH naming a version
                return 409, status_body(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": '
                                                         "the object has been modified")
            obj = _merge(copy.deepcopy(current), body) if merge else copy.deepcopy(body)
            for key in ("uid", "creationTimestamp", "namespace", "name"):
                obj["metadata"][key] = current["metadata"][key]
            st.objects[(resource, ns, name)] = obj
            self._event(resource, ns, "MODIFIED", obj)
            return 200, copy.deepcopy(obj)

    def compact(self) -> None:
        """Forget the event history (etcd compaction): watches from an older version get 410."""
        with self.state.cond:
            self.state.compacted = self.state.version
            self.state.events.clear()

    def fail_next(self, n: int, code: int = 503) -> None:
        """The next ``n`` API requests answer ``code``."""
        with self.state.cond:
            self.state.errors_left, self.state.error_code = n, code

    def delete(self, resource: str, ns: str, name: str, *, grace_s: float | None = None) -> dict[str, Any] | None:
        """Delete an object, then (background propagation) every object it owns, recursively.
        A pod with ``state.termination_s`` > 0 (and a grace period not 0) is Terminating first."""
        st = self.state
        wait = st.termination_s if grace_s is None else min(st.termination_s, grace_s)
        if resource == "pods" and wait > 0:
            with st.cond:
                obj = st.objects.get((resource, ns, name))
                if obj is None:
                    return None
                if not obj["metadata"].get("deletionTimestamp"):
                    obj["metadata"]["deletionTimestamp"] = _now_rfc3339()
                    obj["metadata"]["deletionGracePeriodSeconds"] = int(wait)
                    self._event(resource, ns, "MODIFIED", obj)
                    timer = threading.Timer(wait, self.delete, args=(resource, ns, name), kwargs={"grace_s": 0})
                    timer.daemon = True
                    self._timers.append(timer)
                    timer.start()
                return copy.deepcopy(obj)
        with st.cond:
            obj = st.objects.pop((resource, ns, name), None)
            if obj is None:
                return None
            self._event(resource, ns, "DELETED", obj)
            doomed = [obj["metadata"]["uid"]]
            while doomed:
                uid = doomed.pop()
                for key, child in list(st.objects.items()):
                    refs = child["metadata"].get("ownerReferences") or []
                    if key[1] == ns and any(r.get("uid") == uid for r in refs):
                        st.objects.pop(key)
                        self._event(key[0], key[1], "DELETED", child)
                        doomed.append(child["metadata"]["uid"])
            return copy.deepcopy(obj)


@dataclass(frozen=True)
class Attributes:
    """What RBAC decides on (the API server's request attributes)."""

    group: str
    resource: str  # with its subresource: pods/log
    verb: str
    namespace: str
    name: str | None


def attributes(r: Request) -> Attributes | None:
    """The request attributes of an API request (None: the lanes' own endpoints)."""
    parts = [p for p in r.path.split("/") if p]
    if parts[0] == "lanes":
        return None
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    resource, named = rest[2], len(rest) > 3
    if len(rest) > 4:
        resource = f"{resource}/{rest[4]}"
    verb = {
        ("POST", False): "create",
        ("GET", True): "get",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
        ("PUT", True): "update",
        ("PATCH", True): "patch",
    }.get((r.method, named))
    if verb is None:  # GET on a collection
        verb = "watch" if r.is_watch else "list"
    return Attributes(group, resource, verb, rest[1], rest[3] if named else None)


def rbac_of(requests: list[Request]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every API request — what a Role must grant for them."""
    return {(a.group, a.resource, a.verb) for r in requests if (a := attributes(r)) is not None}
