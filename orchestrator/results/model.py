"""The shape of ``eval-results.json`` and of the per-unit records the run appends as it goes.

A *unit* of work is one (case, iteration): one build, then its verification. A *scoring unit* is
what pass@k counts: one execution scenario, or one evaluated expectation, of a case; each is
measured once per iteration. Keys follow the reference harness: ``<slug>/<scenario>`` for scenarios
and ``<slug>#expectation:<text>`` for expectations.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator.domain import Attribution, BuildStatus, Verdict  # the shared ground's; used by the records below


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
    #: the budget that ended the conversation (n8n's ``buildTimeout``: ``{kind, turn, elapsedMs}``);
    #: every row of the iteration is then ``incomplete`` (attribution ``timeout``), graded or not
    timeout: dict[str, Any] | None = None
    #: plans the simulated user rejected (n8n's ``proxyDecisionStats.rejection``, ``planRejections``)
    plan_rejections: int = 0


class ScenarioResult(BaseModel):
    name: str
    verdict: Verdict
    #: the verdict as graded, kept for the record when the row was stamped ``incomplete`` afterwards
    #: (a timed-out iteration: n8n keeps ``passed`` and sets ``incomplete``); None otherwise
    judged: Verdict | None = None
    failure_category: str | None = None
    attribution: Attribution | None = None
    reason: str = ""
    execution_id: str | None = None
    root_cause: str | None = None
    #: how long running and judging the scenario took (n8n's ``execDurationMs``; 0: not run)
    duration_s: float = 0.0
    #: What the lane's mock execution returned, for the report: ``nodeResults`` (per-node output,
    #: intercepted requests, mock responses), ``errors``, ``mockErrors``, ``hints``. None when not kept.
    execution: dict[str, Any] | None = None
    #: The judge call's input ({system, prompt, count}); never serialised with the unit: the results
    #: writer moves it to ``judge-inputs.jsonl`` (what ``orchestrator rejudge`` replays).
    judge_input: dict[str, Any] | None = Field(default=None, exclude=True)


#: What an expectation row grades: the case's ``processExpectations`` / ``outcomeExpectations``
#: (one judge call), ``memoryExpectations`` (judged on the captured context), ``contextAssertions``
#: (exact match on the captured context), and the checks the harness adds itself: credential setup
#: (``credentialFixture`` cases) and external edits (a rename behind the agent's back).
ExpectationKind = Literal["outcome", "process", "memory", "context", "credential_setup", "external_edit"]
#: Kinds graded without a judge — n8n's "measurements, not judgements": never re-attributed, and
#: not stamped by a timeout (``run/build-orchestrator.ts``)
DETERMINISTIC_KINDS: frozenset[str] = frozenset({"context", "credential_setup", "external_edit"})


class ExpectationResult(BaseModel):
    kind: ExpectationKind
    text: str
    verdict: Verdict
    #: see :attr:`ScenarioResult.judged`
    judged: Verdict | None = None
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
        """``error`` when it could not be measured, ``n_a`` when not applicable, else ``pass`` or ``fail``."""
        if self.errored:
            return "error"
        if self.passed is None:
            return "n_a"
        return "pass" if self.passed else "fail"


#: The reference's name for the same record.
WorkflowCheck = StructuralCheck

#: The rubric's dimensions of a workflow check, in report order (``StructuralCheck.dimension``).
DIMENSIONS = ("structure", "connection_topology", "parameter_correctness", "intent_match", "communication",
              "ai_nodes", "nodes_craftsmanship", "security")


def by_dimension(checks: list[StructuralCheck]) -> dict[str, list[StructuralCheck]]:
    """The checks grouped by dimension, in :data:`DIMENSIONS` order (no dimension: ``structure``)."""
    grouped: dict[str, list[StructuralCheck]] = {d: [] for d in DIMENSIONS}
    for c in checks:
        grouped.setdefault(c.dimension or "structure", []).append(c)
    return {d: cs for d, cs in grouped.items() if cs}


class UsageEntry(BaseModel):
    """Tokens of one of our own agents (judge, user proxy…) on one model, for one iteration."""

    agent: str
    model: str
    calls: int = 0
    input_tokens: int = 0
    uncached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


# --- the model gateway's accounting (issue 37) --------------------------------------------------
class StageCost(BaseModel):
    """One stage's model calls of one unit (``build``, ``mock``, ``verify``, ``judge``, ``proxy``), as
    the model gateway counted them from the provider's usage: input is the uncached input; cache
    writes (5-minute and 1-hour) and reads are apart, each priced at its own rate."""

    stage: str
    calls: int = 0
    #: calls split with other units on the same lane (their tokens and cost shared evenly)
    shared_calls: int = 0
    #: calls whose caller saw the provider fail (after the gateway's one retry, or held while it was down)
    failed_calls: int = 0
    models: list[str] = Field(default_factory=list)
    input_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens + self.output_tokens


class ModelCost(BaseModel):
    """Every model call of one unit, by stage."""

    stages: list[StageCost] = Field(default_factory=list)

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.stages)

    def stage(self, name: str) -> StageCost | None:
        """The cost of the stage named ``name``, or None when the unit made no call in it."""
        return next((s for s in self.stages if s.stage == name), None)
# --------------------------------------------------------------------------------------------------


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
    #: Every model call of the unit, by stage, from the model gateway (None: the run had no gateway).
    model_cost: ModelCost | None = None
    #: A harness's own record of this unit (``orchestrator.harnesses``: a pairwise panel's feedback,
    #: a routing trial's route); None for ``orchestrator run``.
    harness: dict[str, Any] | None = None

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


#: n8n's ``comparisonStatus`` (``run/persist.ts``): the baseline comparison ran (``ok``), found no baseline
#: (``no_baseline``), found this run itself as the newest baseline (``self_baseline``: nothing to compare
#: against), could not read it (``fetch_failed``), or was not attempted (a gated tier, no baseline source).
ComparisonStatus = Literal["ok", "no_baseline", "self_baseline", "fetch_failed", "not_attempted"]


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
    #: how the baseline comparison went (None in files written before it was recorded)
    comparison_status: ComparisonStatus | None = None
    #: why the baseline could not be read (``fetch_failed`` only; redacted)
    comparison_error: str | None = None
