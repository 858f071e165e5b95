"""The Kubernetes janitor: delete lane objects whose owning run is no longer alive — never a live run's.

Why it exists: lane objects carry an ``ownerReference`` to the orchestrator's Pod (or Job), and the
cluster's garbage collector deletes them when that owner is *deleted*. An orchestrator that was
OOM-killed or evicted is not deleted: its Pod stays, phase ``Failed`` (``restartPolicy: Never``),
until its Job's ``ttlSecondsAfterFinished`` — so its lanes (n8n pods with 1–2 GiB each) would keep
running. The janitor closes that gap; it runs as a CronJob in the chart and as
``orchestrator cleanup --kubernetes``.

A run (every object labelled ``n8n-eval/run-id=<run>`` and managed by the orchestrator; with
``release``, only that Helm release's) is judged first by its **Lease** (``coordination.k8s.io/v1``,
``n8n-lanes-<run>``), which the orchestrator renews every third of its TTL (default 60 s) from its
event loop. A fresh Lease means alive. A Lease past ``renewTime + leaseDurationSeconds`` is only a
suspicion: the pass then watches it (one list of Leases every few seconds) and the run is **dead**
only once the pass itself saw that Lease expired and unrenewed for ``lease_grace_s`` (at least the
Lease's TTL) with every API call it made answered — any failed call, even one retried away, starts
the watch again (:class:`~orchestrator.lanes.kubernetes.lease.ExpiryWitness`). An API outage therefore
never kills a live run: the janitor cannot see the API either, and once it can, the orchestrator
renews within a third of its TTL. A dead (OOM-killed, evicted, hung) orchestrator's lanes go within
TTL + lease grace + one janitor period. A run without a Lease is judged by its owners: it is
**dead** when one of its owners is

* gone (404), or replaced (same name, another uid), or
* a Pod in phase ``Failed``/``Succeeded``, or being deleted, and that happened more than
  ``grace_s`` ago (``finishedAt`` of its containers, else its conditions' transition time), or
* a Job with a ``Complete``/``Failed`` condition older than ``grace_s``.

or when it has neither an owner nor a Lease and its newest object is older than ``grace_s`` (every
orchestrator creates its Lease first and deletes it last: such a run's orchestrator is gone). A run
is **alive** otherwise — including a run with no owner but a fresh Lease (started from a
workstation). A pass that could not list every kind removes nothing (a partial view could hide a
run's Lease, or delete half a run and leave pods whose owner looks alive).

Deletion of a dead run: its lane Pods, Services and NetworkPolicies (list by label, delete by name
*with the listed uid as a precondition*, so an object re-created under the same name in between is
never touched), its Lease and, unless the lanes use an existing Secret, its Secret by
``deletecollection`` (no secret is ever read).

A pass never gives up: every API call retries 429, 5xx, resets and timeouts (``kubernetes.api``); an error
that remains (a 403 on one owner read, a failed delete) is logged, counted in
``n8n_eval_janitor_errors_total{step}`` and recorded in the report, and the pass goes on with the
next object and run. A run whose liveness cannot be read is left alone (never deleted on a guess).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter

from orchestrator.lanes.kubernetes import objects
from orchestrator.lanes.kubernetes.api import call_with_retry, finished_at, load_api_client, parse_time
from orchestrator.lanes.kubernetes.lease import ExpiryWitness
from orchestrator.lanes.kubernetes.namespace import resolve_namespace
from orchestrator.lanes.kubernetes.options import DEFAULT_GRACE_S, DEFAULT_LEASE_GRACE_S, JanitorOptions
from orchestrator.redact import redact

log = logging.getLogger(__name__)

_DELETED_KINDS = ("pod", "service", "networkpolicy", "lease")


@dataclass
class RunVerdict:
    run: str
    alive: bool
    why: str
    objects: list[str] = field(default_factory=list)
    #: an expired Lease: dead once the pass watched it stay so (``Janitor._confirm``)
    lease: dict[str, Any] | None = None


@dataclass
class JanitorReport:
    verdicts: list[RunVerdict] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: a kind could not be listed: no run is judged on a partial view (a run's Lease may be among the
    #: unlisted, or a half-deleted run left with pods whose owner looks alive), nothing is removed
    incomplete: bool = False

    @property
    def dead_runs(self) -> list[str]:
        """The runs this pass judged dead (by their Lease, else their owners: see the module docstring)."""
        return [v.run for v in self.verdicts if not v.alive]


class Janitor:
    """One pass over a namespace (or one run in it). Synchronous: the CLI and the CronJob call it once."""

    def __init__(self, api_client: client.ApiClient, namespace: str, *, grace_s: float = DEFAULT_GRACE_S,
                 delete_secrets: bool = True, now: Callable[[], float] = time.time,
                 request_timeout_s: float = 30.0, retry_budget_s: float = 60.0,
                 registry: CollectorRegistry | None = None, release: str | None = None,
                 lease_grace_s: float = DEFAULT_LEASE_GRACE_S, sleep: Callable[[float], None] = time.sleep) -> None:
        self.core = client.CoreV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.grace_s = grace_s
        self.delete_secrets = delete_secrets
        self.now = now
        self.timeout = request_timeout_s
        self.retry_budget_s = retry_budget_s
        self.release = release
        self.sleep = sleep
        self.witness = ExpiryWitness(lease_grace_s, now)
        self.registry = registry or CollectorRegistry()
        self.errors = Counter("n8n_eval_janitor_errors", "Janitor API errors that remained after retries, by step.",
                              ["step"], registry=self.registry)
        self.retries = Counter("n8n_eval_janitor_retries", "Janitor API calls retried (429, 5xx, reset, timeout).",
                               registry=self.registry)

    def _retried(self, _: BaseException) -> None:
        self.retries.inc()
        self.witness.failed()  # the API failed for the janitor: no Lease counts as watched through that

    def _raw(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            resp = call_with_retry(fn, *args, _preload_content=False, _request_timeout=self.timeout,
                                   budget_s=self.retry_budget_s, on_retry=self._retried, **kwargs)
        except Exception:
            self.witness.failed()
            raise
        return dict(json.loads(resp.data or b"{}"))

    def _failed(self, report: JanitorReport, step: str, what: str, exc: Exception) -> None:
        detail = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
        message = redact(f"{what}: {detail}")
        log.warning("janitor: %s", message)
        self.errors.labels(step=step).inc()
        report.failures.append(message)

    def _listers(self) -> dict[str, tuple[Callable[..., Any], Callable[..., Any]]]:
        return {
            "pod": (self.core.list_namespaced_pod, self.core.delete_namespaced_pod),
            "service": (self.core.list_namespaced_service, self.core.delete_namespaced_service),
            "networkpolicy": (self.networking.list_namespaced_network_policy,
                              self.networking.delete_namespaced_network_policy),
            "lease": (self.coordination.list_namespaced_lease, self.coordination.delete_namespaced_lease),
        }

    def lane_objects(self, run_id: str | None = None,
                     report: JanitorReport | None = None) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        """Run label → [(kind, object)] of every lane object (one run, or all). A kind that cannot be
        listed is a failure in ``report`` (raised without one); the other kinds are still listed."""
        selector = objects.sweep_selector(run_id, self.release)
        runs: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for kind, (lister, _) in self._listers().items():
            try:
                items = self._raw(lister, self.namespace, label_selector=selector).get("items") or []
            except Exception as exc:
                if report is None:
                    raise
                self._failed(report, "list", f"list {kind}s in {self.namespace}", exc)
                report.incomplete = True
                continue
            for item in items:
                run = ((item.get("metadata") or {}).get("labels") or {}).get(objects.LABEL_RUN_ID, "")
                runs.setdefault(run, []).append((kind, item))
        return runs

    # ---- is the owner alive? -------------------------------------------------------------------

    def verdict(self, run: str, items: list[tuple[str, dict[str, Any]]]) -> RunVerdict:
        """Dead when an owner is dead (gone, replaced, ended past the grace) or the run's Lease ran out;
        alive while the Lease is valid; without a Lease, alive unless an owner is dead. An owner that
        cannot be read raises — unless the Lease decides (then it is only logged and counted)."""
        names = [f"{kind}/{item['metadata']['name']}" for kind, item in items]
        owners = {
            (ref.get("kind"), ref.get("name"), ref.get("uid"))
            for _, item in items for ref in (item["metadata"].get("ownerReferences") or [])
            if ref.get("kind") in ("Pod", "Job")
        }
        lease = next((item for kind, item in items if kind == "lease"), None)
        expires = objects.lease_expires_at(lease) if lease is not None else None
        reasons = [] if owners else ["no owner in the cluster (started outside it)"]
        for kind, name, uid in sorted(owners, key=str):
            try:
                dead, why = self._owner_dead(str(kind), str(name), str(uid))
            except Exception as exc:
                if expires is None:
                    raise
                self.errors.labels(step="owner").inc()
                log.warning("janitor: run %s: owner %s %s unreadable (%s): the lease decides", run, kind, name,
                            redact(str(exc)))
                continue
            if dead:
                return RunVerdict(run, False, why, names)
            reasons.append(why)
        if expires is not None and lease is not None:
            holder = (lease.get("spec") or {}).get("holderIdentity") or "?"
            left = expires - self.now()
            if left < 0:  # a suspicion: dead once this pass watched it stay so (_confirm)
                return RunVerdict(run, False, f"lease expired {-left:.0f} s ago (holder {holder})", names, lease)
            reasons.append(f"lease held by {holder}, valid {left:.0f} s more")
        elif not owners and lease is None:
            created = [parse_time(item["metadata"].get("creationTimestamp")) for _, item in items]
            newest = max((c for c in created if c is not None), default=None)
            age = self.now() - newest if newest is not None else 0.0
            if age >= self.grace_s:
                return RunVerdict(run, False, f"no owner and no Lease; its newest object is {age:.0f} s old", names)
            reasons[0] += f" and no Lease, newest object {age:.0f} s old (grace {self.grace_s:.0f} s): left alone"
        elif not owners:
            reasons[0] += ": left alone"
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
        listed = sorted(self.lane_objects(run_id, report).items())
        if report.incomplete:
            log.warning("janitor: not every kind could be listed: no run is judged, nothing is removed")
            return report
        verdicts: list[tuple[RunVerdict, list[tuple[str, dict[str, Any]]]]] = []
        for run, items in listed:
            try:
                verdict = self.verdict(run, items)
            except Exception as exc:  # one unreadable owner: this run is left alone, the pass goes on
                self._failed(report, "owner", f"run {run}: liveness unknown, left alone", exc)
                continue
            if force and verdict.alive and verdict.why.startswith("no owner") and "lease held" not in verdict.why:
                verdict = RunVerdict(run, False, "asked for by run id (no owner in the cluster)", verdict.objects)
            verdicts.append((verdict, items))
        self._confirm([v for v, _ in verdicts if v.lease is not None], report)
        for verdict, items in verdicts:
            report.verdicts.append(verdict)
            log.info("run %s: %s: %s", verdict.run, "alive" if verdict.alive else "dead", verdict.why)
            if verdict.alive or dry_run:
                continue
            self._delete_run(verdict.run, items, report)
        return report

    def _confirm(self, suspects: list[RunVerdict], report: JanitorReport) -> None:
        """Watch the suspects' expired Leases (one list every ``poll_s``) until each is renewed or gone
        (alive) or has stayed expired and unrenewed through the lease grace with every call answered
        (dead); a run still undecided after ``4 × grace`` of failing calls is left alone."""
        if not suspects:
            return
        for v in suspects:
            assert v.lease is not None
            self.witness.saw(v.run, v.lease)
        window = max([self.witness.window_s] + [float((v.lease or {}).get("spec", {}).get("leaseDurationSeconds") or 0)
                                                  for v in suspects])
        poll = max(min(window / 6, 5.0), 0.05)
        polls = int(4 * window / poll) + 2  # bounded however the clock goes
        pending = {v.run: v for v in suspects}
        while pending:
            polls -= 1
            if polls < 0:
                for v in pending.values():
                    v.alive, v.why = True, f"{v.why}; the API kept failing for the janitor: left alone"
                return
            self.sleep(poll)
            try:
                items = self._raw(self.coordination.list_namespaced_lease, self.namespace,
                                  label_selector=objects.sweep_selector(None, self.release)).get("items") or []
            except Exception as exc:  # the watch starts again (ExpiryWitness.failed, in _raw)
                self._failed(report, "lease", f"list leases in {self.namespace} (watching expired Leases)", exc)
                continue
            leases = {((i.get("metadata") or {}).get("labels") or {}).get(objects.LABEL_RUN_ID, ""): i for i in items}
            for run, v in list(pending.items()):
                lease = leases.get(run)
                if lease is None or (lease.get("metadata") or {}).get("uid") != (v.lease or {}).get("metadata", {}).get("uid"):
                    v.alive, v.why = True, f"{v.why}; then its Lease went or was replaced: left for the next pass"
                elif (why := self.witness.saw(run, lease)) is not None:
                    v.why = why
                elif not self.witness.watching(run):
                    v.alive, v.why = True, f"{v.why}; then renewed (holder alive)"
                else:
                    continue
                del pending[run]

    def _delete_run(self, run: str, items: list[tuple[str, dict[str, Any]]], report: JanitorReport) -> None:
        listers = self._listers()
        for kind in _DELETED_KINDS:  # pods first: the lane stops before its Service and policy go
            for k, item in items:
                if k != kind:
                    continue
                name = item["metadata"]["name"]
                uid = item["metadata"].get("uid")
                body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
                try:
                    call_with_retry(listers[kind][1], name, self.namespace, body=body, _request_timeout=self.timeout,
                                    budget_s=self.retry_budget_s, on_retry=lambda _: self.retries.inc())
                except ApiException as exc:
                    if exc.status == 409:  # re-created under the same name since the list: not what we judged
                        log.info("janitor: %s %s/%s was replaced since it was listed: left alone", kind,
                                 self.namespace, name)
                        continue
                    if exc.status != 404:
                        self._failed(report, "delete", f"delete {kind} {self.namespace}/{name}", exc)
                        continue
                except Exception as exc:
                    self._failed(report, "delete", f"delete {kind} {self.namespace}/{name}", exc)
                    continue
                report.removed.append(f"{kind}/{self.namespace}/{name}")
        if self.delete_secrets:
            selector = f"{objects.sweep_selector()},{objects.LABEL_RUN_ID}={run}"
            try:
                gone = self._raw(self.core.delete_collection_namespaced_secret, self.namespace,
                                 label_selector=selector).get("items") or []
            except Exception as exc:
                self._failed(report, "delete", f"delete secrets of run {run}", exc)
                return
            report.removed += [f"secret/{self.namespace}/{s['metadata']['name']}" for s in gone]


def _pod_detail(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    reasons = [status.get("reason")] + [
        ((cs.get("state") or {}).get("terminated") or {}).get("reason") for cs in status.get("containerStatuses") or []
    ]
    known = [r for r in reasons if r]
    return f" ({', '.join(known)})" if known else ""


def janitor_pass(options: JanitorOptions, run_id: str | None, *, say: Callable[[str], object]) -> int:
    """One pass of the janitor (``cleanup --kubernetes``) over ``options``' namespace, or over run
    ``run_id`` only (then even before its grace), told line by line through ``say``. Returns the
    number of failures."""
    api_client, _ = load_api_client(options.context)
    ns = resolve_namespace(options.namespace, os.environ, options.context, local=True)
    # With an existing lane Secret (what the chart requires) there is no per-run Secret, and no RBAC on
    # secrets; with the chart's release, only that release's runs (its admission policy lets the
    # janitor delete nothing else).
    janitor = Janitor(api_client, ns, grace_s=options.grace_seconds, delete_secrets=not options.existing_secret,
                      release=options.release, lease_grace_s=options.lease_grace_seconds)
    try:
        report = janitor.run(run_id, dry_run=options.dry_run, force=run_id is not None)
    finally:
        api_client.close()
    for verdict in report.verdicts:
        state = "alive" if verdict.alive else ("dead (dry run: kept)" if options.dry_run else "dead")
        say(f"{verdict.run}: {state}: {verdict.why}")
    for item in report.removed:
        say(f"removed {item}")
    for failure in report.failures:
        say(f"[red]failed:[/red] {failure}")
    say(f"cleanup --kubernetes ({ns}): {len(report.verdicts)} run(s), {len(report.dead_runs)} dead, "
        f"{len(report.removed)} removed, {len(report.failures)} failed")
    return len(report.failures)
