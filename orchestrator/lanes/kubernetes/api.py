"""Small pieces every Kubernetes caller here shares: the client, retries, pod status reading.

API servers answer ``429 Too Many Requests`` under API Priority and Fairness (and some managed
control planes at much lower rates), 500/502/503/504 while a control-plane replica restarts or etcd
is slow, and connections reset or time out during upgrades. :func:`call_with_retry` (tenacity)
retries exactly those: a 429 after its ``Retry-After`` (else exponential backoff with jitter), a 5xx,
a reset or a timeout with the same backoff, within a bounded budget of waiting. Anything else (403,
404, 409, 422…) is raised at once: it will not change by asking again.

A create answered with a 5xx or a timeout may have happened anyway: the retry then gets 409, which
the caller resolves by reading the object and checking that it is its own (``kubernetes.backend``).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception

from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import LaneError
from orchestrator.redact import redact

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Waits between retries when the server sends no Retry-After (seconds, before jitter).
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 16.0
RETRY_429_BUDGET_S = 120.0
#: HTTP statuses worth asking again.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})

#: Container waiting reasons a kubelet keeps retrying on its own: an image pull behind a slow
#: registry or a pull secret being rotated, a ConfigMap/Secret not there yet. Not terminal at once;
#: a pull that keeps failing past a short grace is (:func:`stuck_reason`).
RETRYING_WAITING = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "ContainerCreating", "PodInitializing"}
)
PULL_FAILING = frozenset({"ErrImagePull", "ImagePullBackOff"})
#: Waiting reasons that never turn into a running container
#: (``CreateContainerConfigError``: a key missing from the lanes' Secret; it will not appear mid-run.)
TERMINAL_WAITING = frozenset(
    {"InvalidImageName", "ErrImageNeverPull", "CrashLoopBackOff", "CreateContainerError", "CreateContainerConfigError"}
)


def retry_after_s(exc: ApiException, attempt: int) -> float:
    """How long to wait after a 429: the server's ``Retry-After`` (seconds), else exponential backoff."""
    headers = exc.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    if value is not None:
        try:
            return min(max(float(value), 0.0), BACKOFF_CAP_S * 4)
        except ValueError:
            pass
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * (2.0 ** attempt)) * (0.5 + random.random() / 2)


def is_transient(exc: BaseException) -> bool:
    """429, 5xx, or no answer (connection refused/reset, timeout): worth another try."""
    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUSES
    return isinstance(exc, urllib3.exceptions.HTTPError)


def _wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome is not None else None
    attempt = state.attempt_number - 1
    if isinstance(exc, ApiException) and exc.status == 429:
        return retry_after_s(exc, attempt)
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * (2.0 ** attempt)) * (0.5 + random.random() / 2)


def call_with_retry(fn: Callable[..., T], *args: Any, budget_s: float = RETRY_429_BUDGET_S,
                    sleep: Callable[[float], None] = time.sleep,
                    on_retry: Callable[[BaseException], None] | None = None, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, retried on 429, 5xx, resets and timeouts while the waits so far plus
    the next one stay within ``budget_s``; then (or on any other error) the last error is raised."""

    def out_of_budget(state: RetryCallState) -> bool:
        return state.idle_for + (state.upcoming_sleep or 0.0) > budget_s

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if exc is not None:
            if on_retry is not None:
                on_retry(exc)
            log.debug("kubernetes: %s from %s, retrying in %.2f s", _describe(exc), getattr(fn, "__name__", "call"),
                      state.upcoming_sleep)

    retrying = Retrying(retry=retry_if_exception(is_transient), wait=_wait, stop=out_of_budget, sleep=sleep,
                        before_sleep=before_sleep, reraise=True)
    return retrying(fn, *args, **kwargs)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status}"
    return type(exc).__name__


class RateLimiter:
    """Client-side token bucket, thread-safe (calls run in worker threads): ``qps`` sustained, ``burst``
    at once — what client-go's ``--kube-api-qps``/``--kube-api-burst`` do. A caller beyond the
    budget reserves its token and sleeps until it is due, so waiting callers keep their order."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.qps, self.burst = qps, max(1, burst)
        self._tokens = float(self.burst)
        self._clock, self._sleep = clock, sleep
        self._last = clock()
        self._lock = threading.Lock()
        self.waited_s = 0.0

    def acquire(self) -> None:
        """Take one token, sleeping (in the calling worker thread) until it is due; the wait adds to
        ``waited_s``."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
            self.waited_s += wait
        if wait > 0:
            self._sleep(wait)

    def limit(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` taking a token before every call (every retry too)."""

        @functools.wraps(fn)
        def limited(*args: Any, **kwargs: Any) -> T:
            self.acquire()
            return fn(*args, **kwargs)

        return limited


def load_api_client(context: str | None, pool_size: int = 32) -> tuple[client.ApiClient, bool]:
    """(client, in_cluster): the service account first, else the kubeconfig. ``pool_size``: HTTP
    connections kept to the API server (the client's default is 5 × CPUs, too few for bursts of
    creates)."""
    cfg = client.Configuration()
    cfg.connection_pool_maxsize = pool_size
    try:
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg), True
    except config.ConfigException:
        pass
    try:
        config.load_kube_config(context=context, client_configuration=cfg)
    except (config.ConfigException, FileNotFoundError, TypeError) as exc:
        raise ConfigError(
            "kubernetes: no in-cluster service account and no usable kubeconfig "
            f"(KUBECONFIG or ~/.kube/config): {exc}"
        ) from None
    return client.ApiClient(cfg), False


def kubeconfig_namespace(context: str | None) -> str | None:
    """The namespace of kubeconfig context ``context`` (the active one when None), or None when there
    is no kubeconfig or it names none."""
    try:
        contexts, active = config.list_kube_config_contexts()
    except (config.ConfigException, FileNotFoundError, TypeError):
        return None
    chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace")


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Whether the pod runs with its ``Ready`` condition true."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def waiting_reason(pod: Mapping[str, Any]) -> str | None:
    """The first container's waiting reason + message, e.g. ``n8n: ErrImagePull: …``."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"container {cs.get('name')}: {waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return None


def terminal_reason(pod: Mapping[str, Any]) -> str | None:
    """Why a pod will never become ready (it ended, or a container is stuck for good), else None.

    Image pulls that fail (``ErrImagePull``/``ImagePullBackOff``) are *not* terminal: the kubelet
    retries them, and the caller's ready timeout decides.
    """
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase in ("Failed", "Succeeded"):
        detail = status.get("reason") or next(
            (cs["state"]["terminated"].get("reason") for cs in status.get("containerStatuses") or []
             if (cs.get("state") or {}).get("terminated")), None)
        return f"pod phase {phase}" + (f" ({detail})" if detail else "")
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in TERMINAL_WAITING:
            return f"container {cs.get('name')}: {waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
        if state.get("terminated"):
            term = state["terminated"]
            return f"container {cs.get('name')} terminated: {term.get('reason', '')} exit {term.get('exitCode')}"
    return None


def stuck_reason(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """``("pull", why)`` while a container's image pull fails (naming the image), ``("unschedulable",
    why)`` while the scheduler cannot place the pod (its message), else None. Either may heal (a
    registry blip, a node being added): the caller decides how long to wait."""
    status = pod.get("status") or {}
    images = {c.get("name"): c.get("image") for c in ((pod.get("spec") or {}).get("containers") or [])}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILING:
            image = images.get(cs.get("name")) or cs.get("image") or "?"
            detail = f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
            return "pull", f"image {image} of container {cs.get('name')} cannot be pulled ({detail})"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return "unschedulable", f"unschedulable: {cond.get('message') or 'no node fits'}"
    return None


def status_summary(pod: Mapping[str, Any]) -> str:
    """One line on why a pod is not ready: its phase, false conditions' messages and a container's
    waiting or terminal reason; for error messages."""
    status = pod.get("status") or {}
    parts = [f"pod phase {status.get('phase', '?')}"]
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" and cond.get("message"):
            parts.append(f"{cond.get('type')}: {cond['message']}")
    reason = terminal_reason(pod) or waiting_reason(pod)
    if reason:
        parts.append(reason)
    return "; ".join(parts)


def parse_time(value: str | None) -> float | None:
    """An RFC 3339 timestamp as Unix seconds, or None."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def finished_at(pod: Mapping[str, Any]) -> float | None:
    """When an ended pod ended: its containers' ``finishedAt``, else its conditions' transition time,
    else its creation time (Unix seconds)."""
    status = pod.get("status") or {}
    times = [parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
             for cs in status.get("containerStatuses") or []]
    times += [parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or []]
    known = [t for t in times if t is not None]
    if known:
        return max(known)
    return parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


def api_error(what: str, exc: ApiException) -> LaneError:
    """An API error as one redacted line: ``kubernetes: <what> failed: HTTP <status> <message>``."""
    detail = exc.reason or ""
    try:
        detail = json.loads(exc.body or "{}").get("message") or detail
    except (ValueError, AttributeError):
        pass
    return LaneError(redact(f"kubernetes: {what} failed: HTTP {exc.status} {detail}".strip()))
