"""The Kubernetes janitor: delete lane objects whose owning run is no longer alive — never a live run's.

Why it exists: lane objects carry an ``ownerReference`` to the orchestrator's Pod (or Job), and the
cluster's garbage collector deletes them when that owner is *deleted*. An orchestrator that was
OOM-killed or evicted is not deleted: its Pod stays, phase ``Failed`` (``restartPolicy: Never``),
until its Job's ``ttlSecondsAfterFinished`` — so its lanes (n8n pods with 1–2 GiB each) would keep
running. The janitor closes that gap; it runs as a CronJob in the chart and as
``orchestrator cleanup --kubernetes``.

A run (every object labelled ``n8n-eval/run-id=<run>`` and managed by the orchestrator) is **dead**
when one of its owners is

* gone (404), or replaced (same name, another uid), or
* a Pod in phase ``Failed``/``Succeeded``, or being deleted, and that happened more than
  ``grace_s`` ago (``finishedAt`` of its containers, else its conditions' transition time), or
* a Job with a ``Complete``/``Failed`` condition older than ``grace_s``.

A run is **alive** otherwise — including a run whose objects name no owner (started from a laptop:
nothing in the cluster can tell whether that process still runs). Those are left alone and
reported; ``orchestrator cleanup --kubernetes --run-id <run>`` removes one explicitly.

Deletion of a dead run: its lane Pods, Services and NetworkPolicies (list by label, delete by name)
and, unless the lanes use an existing Secret, its Secret by ``deletecollection`` (no secret is ever
read). Every API call retries 429s with backoff.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from orchestrator.lanes import k8s_objects as objects
from orchestrator.lanes.k8s_api import call_with_retry, finished_at, parse_time

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 300.0
_DELETED_KINDS = ("pod", "service", "networkpolicy")


@dataclass
class RunVerdict:
    run: str
    alive: bool
    why: str
    objects: list[str] = field(default_factory=list)


@dataclass
class JanitorReport:
    verdicts: list[RunVerdict] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def dead_runs(self) -> list[str]:
        return [v.run for v in self.verdicts if not v.alive]


class Janitor:
    """One pass over a namespace (or one run in it). Synchronous: the CLI and the CronJob call it once."""

    def __init__(self, api_client: client.ApiClient, namespace: str, *, grace_s: float = DEFAULT_GRACE_S,
                 delete_secrets: bool = True, now: Callable[[], float] = time.time,
                 request_timeout_s: float = 30.0) -> None:
        self.core = client.CoreV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.namespace = namespace
        self.grace_s = grace_s
        self.delete_secrets = delete_secrets
        self.now = now
        self.timeout = request_timeout_s

    def _raw(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        resp = call_with_retry(fn, *args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
        return dict(json.loads(resp.data or b"{}"))

    def _listers(self) -> dict[str, tuple[Callable[..., Any], Callable[..., Any]]]:
        return {
            "pod": (self.core.list_namespaced_pod, self.core.delete_namespaced_pod),
            "service": (self.core.list_namespaced_service, self.core.delete_namespaced_service),
            "networkpolicy": (self.networking.list_namespaced_network_policy,
                              self.networking.delete_namespaced_network_policy),
        }

    def lane_objects(self, run_id: str | None = None) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        """Run label → [(kind, object)] of every lane object (one run, or all)."""
        selector = objects.sweep_selector(run_id)
        runs: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for kind, (lister, _) in self._listers().items():
            for item in self._raw(lister, self.namespace, label_selector=selector).get("items") or []:
                run = ((item.get("metadata") or {}).get("labels") or {}).get(objects.LABEL_RUN_ID, "")
                runs.setdefault(run, []).append((kind, item))
        return runs

    # ---- is the owner alive? -------------------------------------------------------------------

    def verdict(self, run: str, items: list[tuple[str, dict[str, Any]]]) -> RunVerdict:
        names = [f"{kind}/{item['metadata']['name']}" for kind, item in items]
        owners = {
            (ref.get("kind"), ref.get("name"), ref.get("uid"))
            for _, item in items for ref in (item["metadata"].get("ownerReferences") or [])
            if ref.get("kind") in ("Pod", "Job")
        }
        if not owners:
            return RunVerdict(run, True, "no owner in the cluster (started outside it): left alone", names)
        reasons = []
        for kind, name, uid in sorted(owners, key=str):
            dead, why = self._owner_dead(str(kind), str(name), str(uid))
            if dead:
                return RunVerdict(run, False, why, names)
            reasons.append(why)
        return RunVerdict(run, True, "; ".join(reasons), names)

    def _owner_dead(self, kind: str, name: str, uid: str) -> tuple[bool, str]:
        read = self.core.read_namespaced_pod if kind == "Pod" else self.batch.read_namespaced_job
        try:
            owner = self._raw(read, name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True, f"owner {kind} {name} is gone"
            raise
        meta = owner.get("metadata") or {}
        if meta.get("uid") != uid:
            return True, f"owner {kind} {name} was replaced (another uid)"
        ended_at: float | None = None
        what = ""
        if kind == "Pod":
            status = owner.get("status") or {}
            phase = status.get("phase")
            if phase in ("Failed", "Succeeded"):
                ended_at, what = finished_at(owner), f"phase {phase}" + _pod_detail(owner)
            elif meta.get("deletionTimestamp"):
                ended_at, what = parse_time(meta["deletionTimestamp"]), "being deleted"
        else:
            for cond in (owner.get("status") or {}).get("conditions") or []:
                if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
                    ended_at, what = parse_time(cond.get("lastTransitionTime")), f"condition {cond['type']}"
        if not what:
            return False, f"owner {kind} {name} is alive"
        age = self.now() - (ended_at if ended_at is not None else self.now())
        if age < self.grace_s:
            return False, f"owner {kind} {name} {what} {age:.0f} s ago (grace {self.grace_s:.0f} s)"
        return True, f"owner {kind} {name} {what} {age:.0f} s ago"

    # ---- one pass ------------------------------------------------------------------------------

    def run(self, run_id: str | None = None, *, dry_run: bool = False, force: bool = False) -> JanitorReport:
        """Judge every run (or ``run_id``) and delete the dead ones' objects. ``force`` deletes
        ``run_id`` even with no owner in the cluster (never a run whose owner is alive)."""
        report = JanitorReport()
        for run, items in sorted(self.lane_objects(run_id).items()):
            verdict = self.verdict(run, items)
            if force and verdict.alive and verdict.why.startswith("no owner"):
                verdict = RunVerdict(run, False, "asked for by run id (no owner in the cluster)", verdict.objects)
            report.verdicts.append(verdict)
            log.info("run %s: %s: %s", run, "alive" if verdict.alive else "dead", verdict.why)
            if verdict.alive or dry_run:
                continue
            self._delete_run(run, items, report)
        return report

    def _delete_run(self, run: str, items: list[tuple[str, dict[str, Any]]], report: JanitorReport) -> None:
        listers = self._listers()
        for kind in _DELETED_KINDS:  # pods first: the lane stops before its Service and policy go
            for k, item in items:
                if k != kind:
                    continue
                name = item["metadata"]["name"]
                try:
                    call_with_retry(listers[kind][1], name, self.namespace, _request_timeout=self.timeout)
                except ApiException as exc:
                    if exc.status != 404:
                        report.failures.append(f"delete {kind} {self.namespace}/{name}: HTTP {exc.status} {exc.reason}")
                        continue
                report.removed.append(f"{kind}/{self.namespace}/{name}")
        if self.delete_secrets:
            selector = f"{objects.sweep_selector()},{objects.LABEL_RUN_ID}={run}"
            try:
                gone = self._raw(self.core.delete_collection_namespaced_secret, self.namespace,
                                 label_selector=selector).get("items") or []
            except ApiException as exc:
                report.failures.append(f"delete secrets of run {run}: HTTP {exc.status} {exc.reason}")
                return
            report.removed += [f"secret/{self.namespace}/{s['metadata']['name']}" for s in gone]


def _pod_detail(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    reasons = [status.get("reason")] + [
        ((cs.get("state") or {}).get("terminated") or {}).get("reason") for cs in status.get("containerStatuses") or []
    ]
    known = [r for r in reasons if r]
    return f" ({', '.join(known)})" if known else ""
