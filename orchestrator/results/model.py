"""The shape of ``eval-results.json`` and of the per-unit records the run appends as it goes.

A *unit* of work is one (case, iteration): one build, then its verification. A *scoring unit* is
what pass@k counts: one execution scenario, or one evaluated expectation, of a case; each is
measured once per iteration. Keys follow the reference harness: ``<slug>/<scenario>`` for scenarios
and ``<slug>#expectation:<text>`` for expectations.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel, Field


class Attribution(str, enum.Enum):
    """Who a failure is charged to (the four buckets of the reference harness)."""

    builder_issue = "builder_issue"
    mock_issue = "mock_issue"
    framework_issue = "framework_issue"
    verification_gap = "verification_gap"


class BuildStatus(str, enum.Enum):
    ok = "ok"
    failed = "failed"  # claude ran but produced no workflow id after every attempt
    timeout = "timeout"
    provider_outage = "provider_outage"
    lane_failure = "lane_failure"
    skipped = "skipped"  # not started: spend cap reached or run interrupted


PROVIDER_OUTAGE_ROOT_CAUSE = "provider_outage:"


class BuildRecord(BaseModel):
    status: BuildStatus
    workflow_id: str | None = None
    attempts: int = 0
    cost_usd: float = 0.0
    turns: int = 0
    duration_s: float = 0.0
    error: str | None = None
    root_cause: str | None = None
    #: the Instance AI thread the build ran in (n8n's ``threadIds``: the join key to its trace)
    thread_id: str | None = None


class Verdict(str, enum.Enum):
    passed = "pass"
    failed = "fail"
    incomplete = "incomplete"  # not judged: excluded from scoring


class ScenarioResult(BaseModel):
    name: str
    verdict: Verdict
    failure_category: str | None = None
    attribution: Attribution | None = None
    reason: str = ""
    execution_id: str | None = None
    root_cause: str | None = None
    #: What the lane's mock execution returned, for the report: ``nodeResults`` (per-node output,
    #: intercepted requests, mock responses), ``errors``, ``mockErrors``, ``hints``. None when not kept.
    execution: dict[str, Any] | None = None
    #: The judge call's input ({system, prompt, count}); never serialised with the unit: the results
    #: writer moves it to ``judge-inputs.jsonl`` (what ``orchestrator rejudge`` replays).
    judge_input: dict[str, Any] | None = Field(default=None, exclude=True)


class ExpectationResult(BaseModel):
    kind: Literal["outcome", "process"]
    text: str
    verdict: Verdict
    attribution: Attribution | None = None
    reason: str = ""
    #: Set on the first expectation of a judged batch (see ``ScenarioResult.judge_input``).
    judge_input: dict[str, Any] | None = Field(default=None, exclude=True)


CheckStatus = Literal["pass", "fail", "n_a", "error"]


class StructuralCheck(BaseModel):
    """One workflow check on one built workflow (see ``orchestrator.verify.workflow_checks``)."""

    name: str
    passed: bool | None  # None: not applicable to this workflow (or not measured: ``errored``)
    detail: str = ""
    dimension: str | None = None
    kind: Literal["deterministic", "llm"] = "deterministic"
    errored: bool = False  # could not be measured (judge failed): neither pass, fail nor N/A

    @property
    def status(self) -> CheckStatus:
        if self.errored:
            return "error"
        if self.passed is None:
            return "n_a"
        return "pass" if self.passed else "fail"


#: The reference's name for the same record.
WorkflowCheck = StructuralCheck


class UsageEntry(BaseModel):
    """Tokens of one of our own agents (judge, user proxy…) on one model, for one iteration."""

    agent: str
    model: str
    calls: int = 0
    input_tokens: int = 0
    uncached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


class UnitResult(BaseModel):
    """One finished (case, iteration)."""

    case: str
    iteration: int
    lane: str | None = None
    started_at: float
    finished_at: float
    build: BuildRecord
    scenarios: list[ScenarioResult] = Field(default_factory=list)
    expectations: list[ExpectationResult] = Field(default_factory=list)
    structural: list[StructuralCheck] = Field(default_factory=list)
    failure_category: str | None = None
    attribution: Attribution | None = None
    verify_duration_s: float = 0.0
    #: The built workflow's JSON (nodes, connections) as verified; None when not kept.
    workflow: dict[str, Any] | None = None
    #: The build transcript (JSONL events: chat or claude stream-json), when one was captured.
    transcript_path: str | None = None
    #: Our own model calls for this unit (None: not measured).
    harness_usage: list[UsageEntry] | None = None
    #: The builder that built it (mcp, prebuilt…) and the lane's base URL, for links in the report.
    builder: str | None = None
    base_url: str | None = None

    @property
    def unit_id(self) -> str:
        return f"{self.case}#{self.iteration}"


class Band(BaseModel):
    rate: float
    low: float
    high: float


class ScoringUnitSummary(BaseModel):
    key: str
    kind: Literal["scenario", "expectation"]
    n: int
    c: int
    pass_at_k: float | None
    pass_hat_k: float | None
    #: ours alone: the unbiased C(c,k)/C(n,k) at the run's k (None below k trials)
    pass_hat_k_unbiased: float | None = None


class CaseSummary(BaseModel):
    case: str
    iterations: int
    units: list[ScoringUnitSummary]
    build_cost_usd_per_run: list[float]
    build_turns_per_run: list[int]
    failure_categories: dict[str, int] = Field(default_factory=dict)


class RunSummary(BaseModel):
    k: int
    scoring_units: int
    trials: int
    passed_trials: int
    pass_rate: Band | None
    pass_at_k: float | None
    pass_hat_k: float | None
    #: ours alone: the unbiased C(c,k)/C(n,k) at the run's k (None below k trials)
    pass_hat_k_unbiased: float | None = None
    build_cost_usd: float
    build_turns: int
    attribution: dict[str, int]
    #: Failed trials per failure category across the run (added for drift and the report).
    failure_categories: dict[str, int] = Field(default_factory=dict)
    units_total: int
    units_finished: int
    units_skipped: int
    stopped_reason: str | None = None


class LaneRecord(BaseModel):
    lane: str
    backend: str
    base_url: str
    fingerprint: dict[str, str]


class EvalResults(BaseModel):
    run_id: str
    experiment_name: str | None = None
    started_at: float
    finished_at: float | None = None
    config: dict[str, object] = Field(default_factory=dict)
    lanes: list[LaneRecord] = Field(default_factory=list)
    cases: list[CaseSummary] = Field(default_factory=list)
    units: list[UnitResult] = Field(default_factory=list)
    summary: RunSummary | None = None
    cleanup_failures: list[str] = Field(default_factory=list)
    #: lanes that never joined the pool (failed to start, or configured unlike the first ready lane)
    lane_failures: list[str] = Field(default_factory=list)
    comparison: dict[str, object] | None = None
