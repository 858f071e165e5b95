"""Teardown stage: delete what builds left, tear the lanes down, say by name what is still open.

Order (the guarantee this module exists for):

1. on every live lane, the invited members no build used are deleted (through the owner);
2. every failed delete in the ledger is tried once more through the owner, while sessions are open;
3. sessions close; every lane is torn down (in parallel);
4. an owned lane that went takes its ledger entries with it; a static lane's entry is closed once
   nothing of ours is left on it;
5. whatever the ledger still has open (lanes aside) is reported as a :class:`CleanupFailure`.

A lane that died (or hangs) is not asked to delete anything: an owned lane takes its users with it
when it is torn down, and on a static lane the entries stay open for ``orchestrator cleanup``.

The whole run lets go of what it holds as one declared sequence (:data:`RUN_TEARDOWN`, run by
:class:`Teardown`): each step is registered once what it closes exists, runs in the declared order
whatever failed before it, and a step that fails is logged and reported (the run's errors, and
``n8n_eval_cleanup_failures_total{kind="teardown:<step>"}``) without stopping the steps after it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence

from orchestrator.builders.lane import BuildLane
from orchestrator.builders.seeds import deleter_for
from orchestrator.deletion import N8N_KINDS, close_with_lane, delete_one, in_delete_order, open_failures
from orchestrator.domain import CleanupFailure, ResourceKind
from orchestrator.lanes.backend import LaneBackend
from orchestrator.lanes.bringup import safe_teardown
from orchestrator.lanes.model import Lane, LaneState
from orchestrator.ledger import Ledger
from orchestrator.redact import redact

log = logging.getLogger(__name__)


async def retry_open_deletes(ledger: Ledger, contexts: dict[str, BuildLane]) -> None:
    """At the end of the run, try every failed delete once more through the owner (live lanes only)."""
    for entry in in_delete_order(ledger.open_entries()):
        ctx = contexts.get(entry.lane)
        if ctx is None or ctx.lane.state == LaneState.dead or ResourceKind.of(entry.kind) not in N8N_KINDS:
            continue
        if await delete_one(ledger, deleter_for(ctx.owner, entry.kind, entry.meta), entry.kind, entry.id,
                            entry.lane) is None:
            log.info("%s: %s %s deleted at the end of the run", entry.lane, entry.kind, entry.id)


async def teardown(backend: LaneBackend, ledger: Ledger, lanes: dict[str, Lane], contexts: dict[str, BuildLane],
                   *, keep_workflows: bool) -> list[CleanupFailure]:
    """The lanes step of a run's teardown, in the order this module's docstring gives. Returns what
    is still open (each by kind, id and lane), for the report and ``orchestrator cleanup``."""
    failures: list[CleanupFailure] = []
    for ctx in contexts.values():
        if ctx.lane.state == LaneState.dead:
            continue
        try:
            for unused in await ctx.users.close():
                log.warning("closing %s: %s", ctx.lane.lane_id, unused)
        except Exception as exc:  # best effort
            failures.append(CleanupFailure(ResourceKind.user, "", ctx.lane.lane_id, redact(f"closing: {exc}")))
    if not keep_workflows:
        await retry_open_deletes(ledger, contexts)
    for ctx in contexts.values():
        await ctx.owner.aclose()
        await ctx.client.aclose()
    ordered = list(lanes.values())
    results = await asyncio.gather(*(safe_teardown(backend, lane) for lane in ordered))
    for lane, lane_failure in zip(ordered, results):
        if lane_failure:
            failures.append(CleanupFailure(ResourceKind.lane, lane.lane_id, "", lane_failure))  # names the lane
        elif backend.owns_lanes:
            close_with_lane(ledger, lane.lane_id)
        elif not any(e.lane == lane.lane_id and e.kind != ResourceKind.lane.value for e in ledger.open_entries()):
            ledger.deleted(ResourceKind.lane.value, lane.lane_id, lane=lane.lane_id)  # nothing of ours is left on it
    failures += open_failures(ledger, keep_workflows=keep_workflows)
    return failures


#: what a run lets go of, in this order: the lanes' provisioning, the lanes and what builds left on
#: them (this module's :func:`teardown`), the lane backend, the builder, the judge, the model gateway
#: (its counts go into the results), the model route, the results (summary, comparison, files),
#: the metrics endpoint, the push to a Pushgateway
RUN_TEARDOWN = ("provisioner", "lanes", "backend", "builder", "judge", "model gateway", "model route", "results",
                "metrics endpoint", "pushgateway")


class Teardown:
    """Named steps run in a declared ``order``, each on its own.

    :meth:`add` registers a step once what it closes exists (a run that failed half-way closes what
    it opened, and nothing else); :meth:`run` runs the registered steps in ``order``. A step that
    raises is logged and handed to ``on_failure(step, message)`` (message redacted), and the next
    step runs all the same; a cancellation is kept until every step ran, then raised.
    """

    def __init__(self, order: Sequence[str], on_failure: Callable[[str, str], None]) -> None:
        self.order = tuple(order)
        self._steps: dict[str, Callable[[], object]] = {}
        self._on_failure = on_failure

    def add(self, name: str, step: Callable[[], object]) -> None:
        """Register ``step`` (sync, or returning an awaitable) under ``name``, one of :attr:`order`."""
        if name not in self.order:
            raise ValueError(f"teardown step {name!r} is not one of {', '.join(self.order)}")
        if name in self._steps:
            raise ValueError(f"teardown step {name!r} is registered twice")
        self._steps[name] = step

    @property
    def registered(self) -> list[str]:
        """The registered steps, in the order :meth:`run` runs them."""
        return [name for name in self.order if name in self._steps]

    async def run(self) -> None:
        """Run every registered step once, in :attr:`order` (see the class docstring)."""
        cancelled: asyncio.CancelledError | None = None
        for name in self.registered:
            step = self._steps.pop(name)
            log.debug("teardown: %s", name)
            try:
                result = step()
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError as exc:  # finish letting go first
                cancelled = exc
            except Exception as exc:
                message = redact(f"teardown step {name!r} failed: {type(exc).__name__}: {exc}")
                log.warning("%s", message)
                self._on_failure(name, message)
        if cancelled is not None:
            raise cancelled
