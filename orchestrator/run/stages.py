"""The seams through which another harness runs on ``orchestrator run``'s stage set.

``orchestrator run`` is plan → provision → execute → teardown → finalize. A harness (pairwise,
routing, build checks, the MCP manifest: :mod:`orchestrator.harnesses`) keeps the lane pool, the
allocator, the builders, the ledger, clean-up and metrics, and changes only what :class:`Stages`
names; every field left ``None`` is ``run``'s own stage, so ``Stages()`` *is* ``orchestrator run``:

- ``load_cases``: the plan's case loader (instead of ``cases/`` or a LangTracer suite);
- ``builder``: the builder class (instead of the one ``--builder`` names in the registry);
- ``verify``: what happens to a unit whose build succeeded (instead of
  :func:`~orchestrator.verify.verifier.verify_workflow`); it may return the harness's own record of
  the unit, kept in ``UnitResult.harness``;
- ``finalize``: the harness's own files, written after the run's (``eval-results.json`` …).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.builders.builder import Builder, BuildResult
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUser
from orchestrator.cases import EvalCase, LoadedCase
from orchestrator.results.model import EvalResults
from orchestrator.run.config import RunConfig
from orchestrator.verify.judge import Judge
from orchestrator.verify.verifier import Verification


@dataclass(frozen=True)
class UnitCheck:
    """What a unit verifier sees: the case, the successful build, the lane and member it ran on, and
    the run's judge (on the run's model route)."""

    case: EvalCase
    slug: str
    iteration: int
    build: BuildResult
    lane: BuildLane
    user: BuildUser
    judge: Judge
    #: the verification budget (``--timeout-ms``, complex cases × 1.5)
    timeout_ms: int


@dataclass
class Verified:
    verification: Verification
    #: the harness's own record of the unit (``UnitResult.harness``); None: nothing of its own
    record: dict[str, Any] | None = None


class UnitVerifier(Protocol):
    async def __call__(self, check: UnitCheck) -> Verified: ...


CaseLoader = Callable[[RunConfig], Awaitable[list[LoadedCase]]]
#: the finished results → the errors met writing the harness's files (each one line)
Finalizer = Callable[[EvalResults], Awaitable[list[str]]]


@dataclass(frozen=True)
class Stages:
    load_cases: CaseLoader | None = None
    builder: type[Builder] | None = None
    verify: UnitVerifier | None = None
    finalize: Finalizer | None = None
