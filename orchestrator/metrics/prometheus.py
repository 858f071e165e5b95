"""Prometheus metrics of one run, in their own registry (never the process-global one).

Names are in base units with the conventional suffixes (``_seconds``, ``_total``, ``_usd``).
Label values come from closed sets only — lane states, unit outcomes, cleanup kinds — so the
series count is bounded and no case slug, user, workflow id or secret can reach a label.
The run scrapes them via :meth:`RunMetrics.serve` or pushes them via :meth:`RunMetrics.push`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, push_to_gateway, start_http_server

from orchestrator.domain import ResourceKind
from orchestrator.gateway.attribution import STAGES
from orchestrator.gateway.ledger import OUTCOMES
from orchestrator.gateway.proxy import PROBE_STAGE
from orchestrator.lanes.model import LaneState
from orchestrator.redact import redact
from orchestrator.results.scoring import UnitOutcome

log = logging.getLogger(__name__)

PREFIX = "n8n_eval"
DEFAULT_METRICS_HOST = "127.0.0.1"
METRICS_HOST_ENV = "ORCHESTRATOR_METRICS_HOST"

#: What a cleanup failure was about; anything else is counted as ``other``.
#: bounded label values of ``cleanup_failures_total``: the ledger's resource kinds
CLEANUP_KINDS = tuple(k.value for k in ResourceKind)

LANE_UP_BUCKETS = (5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600)
BUILD_BUCKETS = (10, 30, 60, 120, 180, 300, 450, 600, 900, 1200, 1800, 3600)
VERIFY_BUCKETS = (5, 10, 30, 60, 120, 180, 300, 600, 900, 1800)
QUEUE_BUCKETS = (0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120)
TOKEN_KINDS = ("input", "output", "cache_write", "cache_read", "cache_write_1h")


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` HTTP endpoint; :meth:`close` stops it."""

    server: WSGIServer
    thread: threading.Thread
    addr: str
    port: int

    @property
    def url(self) -> str:
        """Where Prometheus scrapes the run's metrics."""
        return f"http://{self.addr}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and wait (up to 5 s) for the server thread."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


class RunMetrics:
    """The metrics the run updates as lanes come up and units flow through."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.lanes = Gauge(f"{PREFIX}_lanes", "Lanes by state.", ["state"], registry=r)
        self.lane_bringup_seconds = Histogram(
            f"{PREFIX}_lane_bringup_seconds", "Time from provisioning a lane to it being ready.",
            buckets=LANE_UP_BUCKETS, registry=r,
        )
        self.units_queued = Gauge(f"{PREFIX}_units_queued", "Units waiting for a lane.", registry=r)
        self.units_in_flight = Gauge(f"{PREFIX}_units_in_flight", "Units building or verifying.", registry=r)
        self.units_done = Counter(f"{PREFIX}_units_done", "Finished units by outcome.", ["outcome"], registry=r)
        self.build_seconds = Histogram(f"{PREFIX}_build_seconds", "Build wall time per unit.",
                                       buckets=BUILD_BUCKETS, registry=r)
        self.verify_seconds = Histogram(f"{PREFIX}_verify_seconds", "Verification wall time per unit.",
                                        buckets=VERIFY_BUCKETS, registry=r)
        self.build_cost_usd = Counter(f"{PREFIX}_build_cost_usd", "Model spend of builds, in US dollars.", registry=r)
        self.build_turns = Counter(f"{PREFIX}_build_turns", "Agent turns used by builds.", registry=r)
        self.provider_outage_retries = Counter(
            f"{PREFIX}_provider_outage_retries", "Builds retried after a model-provider outage.", registry=r)
        self.cleanup_failures = Counter(f"{PREFIX}_cleanup_failures", "Cleanup steps that failed, by kind.",
                                        ["kind"], registry=r)
        self.steals = Counter(f"{PREFIX}_steals", "Units taken over by another lane.", registry=r)
        self.objects_restored = Counter(
            f"{PREFIX}_lane_objects_restored", "Shared lane objects (Lease, Service, NetworkPolicy) found gone and "
            "re-created, by kind.", ["kind"], registry=r)
        self.run_stopped = Counter(f"{PREFIX}_run_stopped", "Runs stopped before their end, by reason.", ["reason"],
                                   registry=r)
        # the model gateway (issue 37): closed label sets (stages, outcomes, token kinds), never a unit
        self.model_calls = Counter(f"{PREFIX}_model_calls", "Model calls through the gateway, by stage and how "
                                   "they ended for their caller.", ["stage", "result"], registry=r)
        self.model_cost_usd = Counter(f"{PREFIX}_model_cost_usd", "Model spend by stage (the provider's usage, "
                                      "priced cache-aware), in US dollars.", ["stage"], registry=r)
        self.model_tokens = Counter(f"{PREFIX}_model_tokens", "Model tokens by stage and type (input is the "
                                    "uncached input).", ["stage", "type"], registry=r)
        self.model_queue_seconds = Histogram(f"{PREFIX}_model_call_queue_seconds", "Time a model call waited in "
                                             "the gateway for the provider's budget.", buckets=QUEUE_BUCKETS, registry=r)
        self.provider_up = Gauge(f"{PREFIX}_provider_up", "1 while the model provider answers, 0 while the "
                                 "gateway holds it down.", registry=r)
        self.provider_outages = Counter(f"{PREFIX}_provider_outages", "Model provider outages the gateway "
                                        "declared.", registry=r)
        self.build_concurrency = Gauge(f"{PREFIX}_build_concurrency", "The allocator's global cap on concurrent "
                                       "builds (the gateway's rule, or fixed).", registry=r)
        self.provider_up.set(1)
        self._provider_is_up = True
        for stage in (*STAGES, PROBE_STAGE):
            self.model_cost_usd.labels(stage=stage)
            for outcome in OUTCOMES:
                self.model_calls.labels(stage=stage, result=outcome)
        for state in LaneState:
            self.lanes.labels(state=state.value).set(0)
        for outcome in UnitOutcome:
            self.units_done.labels(outcome=outcome.value)
        for kind in CLEANUP_KINDS:
            self.cleanup_failures.labels(kind=kind)

    # ------------------------------------------------------------------ updates

    def lane_state(self, state_counts: Mapping[LaneState | str, int]) -> None:
        """Set the lane gauge from a full census; states left out are set to 0."""
        counts = {LaneState(s).value: n for s, n in state_counts.items()}
        for state in LaneState:
            self.lanes.labels(state=state.value).set(counts.get(state.value, 0))

    def lane_up(self, seconds: float) -> None:
        """A lane became ready ``seconds`` after it was started."""
        self.lane_bringup_seconds.observe(seconds)

    def unit_queued(self, n: int = 1) -> None:
        self.units_queued.inc(n)

    def unit_started(self) -> None:
        """A queued unit started: it moves from queued to in flight."""
        self.units_queued.dec()
        self.units_in_flight.inc()

    def unit_finished(
        self,
        outcome: UnitOutcome | str,
        build_s: float | None = None,
        verify_s: float | None = None,
        cost: float = 0.0,
        turns: int = 0,
    ) -> None:
        """A unit in flight finished with ``outcome``; its build and verify seconds, cost and turns are
        observed when known."""
        label = UnitOutcome(outcome).value
        self.units_in_flight.dec()
        self.units_done.labels(outcome=label).inc()
        if build_s is not None:
            self.build_seconds.observe(build_s)
        if verify_s is not None:
            self.verify_seconds.observe(verify_s)
        if cost > 0:
            self.build_cost_usd.inc(cost)
        if turns > 0:
            self.build_turns.inc(turns)

    def unit_skipped(self) -> None:
        """A queued unit that will never start (spend cap, interruption)."""
        self.units_queued.dec()
        self.units_done.labels(outcome=UnitOutcome.skipped.value).inc()

    def outage_retry(self) -> None:
        self.provider_outage_retries.inc()

    def model_call(self, stage: str, outcome: str, usd: float, tokens: Mapping[str, int], queued_s: float) -> None:
        """One model call the gateway answered (labels from closed sets: anything else is ``other``)."""
        stage = stage if stage in (*STAGES, PROBE_STAGE) else "other"
        self.model_calls.labels(stage=stage, result=outcome if outcome in OUTCOMES else "other").inc()
        if usd > 0:
            self.model_cost_usd.labels(stage=stage).inc(usd)
        for kind, n in tokens.items():
            if n > 0 and kind in TOKEN_KINDS:
                self.model_tokens.labels(stage=stage, type=kind).inc(n)
        self.model_queue_seconds.observe(max(0.0, queued_s))

    def provider_state(self, up: bool) -> None:
        """The model provider is up or down; a change to down counts as a new outage."""
        if not up and self._provider_is_up:  # a new outage
            self.provider_outages.inc()
        self._provider_is_up = up
        self.provider_up.set(1 if up else 0)

    def concurrency_cap(self, cap: int) -> None:
        self.build_concurrency.set(cap)

    def cleanup_failed(self, kind: ResourceKind | str) -> None:
        """A delete of a ``kind`` resource failed (an unknown kind counts as ``other``)."""
        self.cleanup_failures.labels(kind=ResourceKind.of(getattr(kind, "value", kind)).value).inc()

    def stolen(self) -> None:
        self.steals.inc()

    def object_restored(self, kind: str) -> None:
        """A shared object of the lanes (``kind``: a Service, a policy, the Lease) was gone and made again."""
        self.objects_restored.labels(kind=kind).inc()

    def stopped(self, reason: str) -> None:
        """The run stopped before its end, for ``reason`` (a short fixed label: ``provider_down``, ``lane_backend``)."""
        self.run_stopped.labels(reason=reason).inc()

    # ------------------------------------------------------------------ export

    def serve(self, port: int, addr: str | None = None) -> MetricsEndpoint:
        """Serve ``/metrics`` on ``addr:port`` (port 0 picks a free one) until ``close()``.

        ``addr`` defaults to ``ORCHESTRATOR_METRICS_HOST``, else 127.0.0.1 (``--metrics-host``; the
        Helm chart sets 0.0.0.0 so the pod IP can be scraped)."""
        addr = addr or os.environ.get(METRICS_HOST_ENV) or DEFAULT_METRICS_HOST
        server, thread = start_http_server(port, addr=addr, registry=self.registry)
        return MetricsEndpoint(server=server, thread=thread, addr=addr, port=server.server_port)

    def push(self, gateway_url: str, job: str, grouping_key: Mapping[str, str] | None = None,
             timeout: float = 10.0) -> bool:
        """Push to a Pushgateway; a failure is logged, never raised. Returns whether it worked."""
        try:
            push_to_gateway(gateway_url, job=job, registry=self.registry,
                            grouping_key=dict(grouping_key or {}), timeout=timeout)
        except Exception as exc:
            log.warning("metrics push to %s failed: %s", redact(gateway_url), redact(f"{type(exc).__name__}: {exc}"))
            return False
        return True
