"""The ``kubernetes`` backend's one pod watch per run: a daemon thread that lists a run's lane pods
by label, then long-polls ``watch`` from the list's ``resourceVersion`` (re-listing on ``410 Gone``),
and keeps every pod's latest status — and since when it has been stuck (an image pull failing,
Unschedulable) — in memory for ``wait_ready``/``health``/``is_gone`` to read without polling."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from orchestrator.lanes.kubernetes.api import call_with_retry, retry_after_s, stuck_reason


class RunPodWatch:
    """One label-selector watch over a run's lane pods, in a daemon thread; a dict of pods by name.

    List once (``resourceVersion`` R), then ``watch`` from R, long-polling ``watch_timeout_s`` at a
    time and resuming from the last version seen; ``410 Gone`` (history compacted) lists again.
    429s and connection errors back off. The API calls this makes do not grow with the lane count.
    """

    def __init__(self, list_pods: Callable[..., Any], namespace: str, selector: str, *, watch_timeout_s: int,
                 request_timeout_s: float) -> None:
        self._list = list_pods
        self.namespace, self.selector = namespace, selector
        self.watch_timeout_s, self.request_timeout_s = watch_timeout_s, request_timeout_s
        self.pods: dict[str, dict[str, Any]] = {}
        self.deleted: set[str] = set()
        #: pod name -> (what, monotonic time first seen): an image pull failing, or Unschedulable.
        self.stuck_since: dict[str, tuple[str, float]] = {}
        self.synced = threading.Event()
        self.error: str | None = None
        self.lists = 0
        self.watches = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._loop, name=f"pod-watch-{selector}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def get(self, name: str) -> dict[str, Any] | None:
        """The last state seen of pod ``name``, or None if the watch has not seen it."""
        with self._lock:
            return self.pods.get(name)

    def _raw_list(self, *args: Any, **kwargs: Any) -> Any:
        # No docstring on purpose: ``watch.Watch`` reads the return type from the function's
        # docstring; without one it hands events over as dicts instead of building a V1Pod model
        # per event (CPU that 500 lanes' events would otherwise cost). ERROR events (410) still raise.
        return self._list(*args, **kwargs)

    def _note_stuck(self, pod: dict[str, Any]) -> None:
        """Remember since when a pod's pull fails or it cannot be scheduled (caller holds the lock)."""
        name = pod["metadata"]["name"]
        stuck = stuck_reason(pod)
        if stuck is None:
            self.stuck_since.pop(name, None)
        elif self.stuck_since.get(name, ("", 0.0))[0] != stuck[0]:
            self.stuck_since[name] = (stuck[0], time.monotonic())

    def stuck_for(self, name: str) -> tuple[str, float] | None:
        """(what, seconds) a pod has been stuck, or None."""
        with self._lock:
            since = self.stuck_since.get(name)
        return (since[0], time.monotonic() - since[1]) if since else None

    def _relist(self) -> str:
        self.lists += 1
        resp = call_with_retry(self._list, self.namespace, label_selector=self.selector, _preload_content=False,
                               _request_timeout=self.request_timeout_s)
        data = json.loads(resp.data)
        with self._lock:
            self.pods = {i["metadata"]["name"]: i for i in data.get("items") or []}
            for pod in self.pods.values():
                self._note_stuck(pod)
        self.synced.set()
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _loop(self) -> None:
        version: str | None = None
        attempt = 0
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                if self._stop.is_set():
                    break
                self._watch = w = watch.Watch()
                self.watches += 1
                for event in w.stream(self._raw_list, self.namespace, label_selector=self.selector,
                                      resource_version=version, allow_watch_bookmarks=True,
                                      timeout_seconds=self.watch_timeout_s,
                                      _request_timeout=self.watch_timeout_s + self.request_timeout_s):
                    if self._stop.is_set():
                        break
                    obj = event.get("raw_object") or {}
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    kind = event.get("type")
                    if kind == "BOOKMARK" or not meta.get("name"):
                        continue
                    with self._lock:
                        if kind == "DELETED":
                            self.pods.pop(meta["name"], None)
                            self.stuck_since.pop(meta["name"], None)
                            self.deleted.add(meta["name"])
                        else:
                            self.pods[meta["name"]] = obj
                            self._note_stuck(obj)
                attempt = 0
                self.error = None
            except ApiException as exc:
                if exc.status == 410:  # our version was compacted away: list again
                    version = None
                    continue
                self.error = f"HTTP {exc.status} {exc.reason}"
                self._stop.wait(retry_after_s(exc, attempt) if exc.status == 429 else min(30.0, 0.5 * 2 ** attempt))
                attempt += 1
            except Exception as exc:
                if self._stop.is_set():
                    break
                self.error = f"{type(exc).__name__}: {exc}"
                self._stop.wait(min(30.0, 0.5 * 2 ** attempt))
                attempt += 1
