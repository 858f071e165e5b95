"""One evaluation case: what the user says (``conversation``), what the build is graded on
(``executionScenarios``, ``processExpectations``, ``outcomeExpectations``), and the world it
starts in (``credentials``, ``seed``).

JSON uses camelCase (``triggerType``); Python attributes are snake_case (``trigger_type``); both
are accepted on input. Validation applies every load-time rule, so an ``EvalCase`` that exists
is one the harness can run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orchestrator.cases.base import CaseModel, OpenModel
from orchestrator.cases.credentials import CredentialSpec
from orchestrator.cases.intent import INTENT_EXAM_DATASET, with_intent_preamble
from orchestrator.cases.issues import Violation, raise_violations
from orchestrator.cases.provider_fixtures import credential_fixture_problem
from orchestrator.cases.rules import director_notes
from orchestrator.cases.seed import InlineSeed, ReplaySeed, Seed

Complexity = Literal["simple", "medium", "complex"]
TriggerType = Literal["manual", "webhook", "schedule", "form"]
DEFAULT_DATASETS: tuple[str, ...] = ("full",)
SETUP_PANEL_EXECUTE = "setup-panel-execute"

#: Keys of the pre-union seeding design; a case carrying one fails by name rather than running
#: unseeded.
PRE_UNION_SEED_KEYS: tuple[str, ...] = (
    "conversationSeed",
    "priorConversation",
    "seedThread",
    "seedFile",
)
#: Keys of the first case shape (one ``prompt``, ``scenarios``), each with the key that replaced it.
FIRST_SHAPE_KEYS: dict[str, str] = {
    "prompt": "`prompt` is the first case shape's single prompt: write it as the opening turn of "
              "`conversation` ([{\"role\": \"user\", \"text\": ...}])",
    "scenarios": "`scenarios` was renamed: use `executionScenarios` (same items: name, description, "
                 "dataSetup, successCriteria)",
}
RETIRED_KEYS: tuple[str, ...] = ("buildExpectations", *PRE_UNION_SEED_KEYS, *FIRST_SHAPE_KEYS)


def _join_lines(value: object) -> object:
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        value = "\n".join(value)
    if not isinstance(value, str):
        raise ValueError("text must be a string or a list of strings")
    if "[" in value and "]" not in value:
        # n8n's rule: the proxy would send an unclosed stage direction as dialogue.
        raise ValueError("unbalanced stage direction: the text opens `[` but never closes it, so the "
                         "user proxy would send it as dialogue instead of treating it as a direction")
    return value


TurnText = Annotated[str, BeforeValidator(_join_lines)]
NonEmptyStr = Annotated[str, Field(min_length=1)]


class Attachment(CaseModel):
    """The resource the user has open when they start the conversation (editor hand-off)."""

    workflow: NonEmptyStr | None = None
    agent: NonEmptyStr | None = None
    source: Literal["setup-panel-execute"] | None = None

    @property
    def kind(self) -> Literal["workflow", "agent"]:
        return "workflow" if self.workflow is not None else "agent"

    @property
    def ref(self) -> str:
        """The attached workflow's or agent's id (whichever :attr:`kind` says)."""
        return self.workflow if self.workflow is not None else self.agent or ""


class Turn(CaseModel):
    #: A plain object in n8n's schema: keys it does not know are dropped, not refused.
    model_config = ConfigDict(extra="ignore")

    role: Literal["user", "assistant"]
    #: Always a string once validated (a list of lines is joined with newlines).
    text: TurnText
    attach: Attachment | None = None

    @property
    def director_notes(self) -> list[str]:
        """The ``[bracketed]`` stage directions of a user turn (none for other roles)."""
        return director_notes(self.text) if self.role == "user" else []


class ExecutionScenario(CaseModel):
    #: A plain object in n8n's schema: keys it does not know are dropped, not refused.
    model_config = ConfigDict(extra="ignore")

    name: NonEmptyStr
    description: str
    data_setup: str
    success_criteria: str
    requires: str | None = None
    #: Typed data tables created and row-seeded before this scenario executes (opaque here).
    seed_data_tables: list[dict[str, Any]] = Field(default_factory=list, max_length=20)


Anchor = Literal["probe", "turn-end"]


class ContextAssertion(CaseModel):
    """An exact value that must (or must not) be in the agent's captured context at a moment:
    ``probe`` (the graded turn's first step, the default) or ``turn-end``. n8n checks it by a
    case-insensitive substring search over the run debug, with no judge."""

    text: NonEmptyStr
    must_appear: StrictBool | None = None
    note: NonEmptyStr | None = None
    anchor: Anchor | None = None


class MemoryExpectation(CaseModel):
    """A natural-language claim about the agent's captured context (not the transcript), judged at
    ``anchor`` (``probe`` by default)."""

    model_config = ConfigDict(extra="ignore")

    text: NonEmptyStr
    anchor: Anchor | None = None
    note: str | None = None


def _memory_expectation(value: object) -> object:
    return {"text": value} if isinstance(value, str) else value


class IntentAccept(OpenModel):
    """One classification the intent grader accepts (``anchor`` e.g. ``wf`` / ``agent``)."""

    anchor: NonEmptyStr
    embeds_other: bool | str | None = None


class IntentPart(OpenModel):
    """One independent automation of a compound request, classified on its own."""

    label: str | None = None
    accepts: list[IntentAccept] = Field(min_length=1)


class IntentExpectation(OpenModel):
    """What the agent's fenced ``intent`` block must say (agents-exam cases): any one of
    ``accepts``, or for a compound request one classification per part (``parts``, in order).
    Other keys (``context``, ``rationale``, ``source``) are kept as authored."""

    accepts: list[IntentAccept] | None = Field(default=None, min_length=1)
    parts: list[IntentPart] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_form(self) -> IntentExpectation:
        if (self.accepts is None) == (self.parts is None):
            raise ValueError("intentExpectation needs exactly one of accepts (one classification) or parts "
                             "(one per independent automation)")
        return self


class EvalCase(CaseModel):
    #: A display title some n8n cases carry; not used for grading.
    title: str | None = None
    description: str | None = None
    conversation: list[Turn] = Field(default_factory=list)
    complexity: Complexity
    tags: list[str]
    trigger_type: TriggerType | None = None
    datasets: list[str] = Field(default_factory=lambda: list(DEFAULT_DATASETS), min_length=1)
    execution_scenarios: list[ExecutionScenario] = Field(default_factory=list)
    process_expectations: list[NonEmptyStr] = Field(default_factory=list)
    outcome_expectations: list[NonEmptyStr] = Field(default_factory=list)
    credentials: list[CredentialSpec] = Field(default_factory=list)
    message_budget: Annotated[StrictInt, Field(gt=0)] | None = None
    requires_memory_compaction: StrictBool = False
    allow_user_execution: StrictBool = False
    seed: Seed | None = None
    #: Opts the case into n8n's credential-setup checks: a provider fixture id
    #: (:mod:`orchestrator.cases.provider_fixtures`); ``local`` and unknown ids are refused at load.
    credential_fixture: NonEmptyStr | None = None
    context_assertions: list[ContextAssertion] = Field(default_factory=list)
    memory_expectations: list[Annotated[MemoryExpectation, BeforeValidator(_memory_expectation)]] = Field(
        default_factory=list)
    intent_expectation: IntentExpectation | None = None

    # Retired keys: declared only so their presence fails with a migration hint.
    build_expectations: Any = Field(default=None, exclude=True, repr=False)
    conversation_seed: Any = Field(default=None, exclude=True, repr=False)
    prior_conversation: Any = Field(default=None, exclude=True, repr=False)
    seed_thread: Any = Field(default=None, exclude=True, repr=False)
    seed_file: Any = Field(default=None, exclude=True, repr=False)
    prompt: Any = Field(default=None, exclude=True, repr=False)
    scenarios: Any = Field(default=None, exclude=True, repr=False)

    @field_validator(
        "build_expectations",
        "conversation_seed",
        "prior_conversation",
        "seed_thread",
        "seed_file",
        "prompt",
        "scenarios",
        mode="before",
    )
    @classmethod
    def _retired(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name in FIRST_SHAPE_KEYS:
            raise ValueError(FIRST_SHAPE_KEYS[info.field_name or ""])
        if info.field_name == "build_expectations":
            raise ValueError(
                "`buildExpectations` is no longer supported: split it into processExpectations "
                "(about the build conversation) and outcomeExpectations (about the result)"
            )
        key = cls.model_fields[info.field_name or ""].alias
        raise ValueError(
            f"`{key}` is a pre-union seeding key and is no longer supported: declare the seed in "
            "`seed` with mode 'inline' (authored history) or 'replay' (a LangSmith threadId)"
        )

    @field_validator("credential_fixture")
    @classmethod
    def _runnable_fixture(cls, value: str | None) -> str | None:
        problem = credential_fixture_problem(value) if value else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _rules(self) -> EvalCase:
        raise_violations(check_case(self))
        return self

    # ------------------------------------------------------------------ helpers

    @property
    def is_build_only(self) -> bool:
        """No execution scenarios: graded by expectations and the workflow checks only."""
        return not self.execution_scenarios

    @property
    def is_single_prompt(self) -> bool:
        """One user turn and nothing else: sent as-is with every confirmation auto-approved."""
        turns = self.conversation
        return len(turns) == 1 and turns[0].role == "user" and not self.is_replay

    @property
    def is_replay(self) -> bool:
        """Whether the seed is rebuilt from a LangSmith trace at run time rather than given inline."""
        return isinstance(self.seed, ReplaySeed)

    @property
    def inline_seed(self) -> InlineSeed | None:
        return self.seed if isinstance(self.seed, InlineSeed) else None

    @property
    def expectation_count(self) -> int:
        """Process plus outcome expectations: what the expectations judge grades."""
        return len(self.process_expectations) + len(self.outcome_expectations)

    @property
    def opening_attachment(self) -> Attachment | None:
        """What the first turn attaches (a workflow or an agent), if anything."""
        return self.conversation[0].attach if self.conversation else None

    def opening_prompt(self) -> str:
        """The text of turn 0, sent to the builder verbatim — after the intent-classification
        preamble for an agents-exam case (:attr:`is_intent_exam`), as n8n loads that tier.

        Raises ``ValueError`` for a replay-seeded case without a conversation: its live turn
        comes from the trace, not the case.
        """
        if not self.conversation:
            raise ValueError("this case has no conversation: its live turn comes from a replay seed")
        text = self.conversation[0].text
        return with_intent_preamble(text) if self.is_intent_exam and self.conversation[0].role == "user" else text

    @property
    def is_intent_exam(self) -> bool:
        """An agents-exam case: its opening turn carries the intent-classification preamble and its
        ``intentExpectation`` is graded on the reply's fenced ``intent`` block
        (:mod:`orchestrator.cases.intent`)."""
        return self.intent_expectation is not None and INTENT_EXAM_DATASET in self.datasets

    def to_json(self) -> dict[str, Any]:
        """The case body as camelCase JSON (retired keys never appear)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --------------------------------------------------------------------------- whole case


def check_case(case: EvalCase) -> list[Violation]:
    """The cross-field rules of a case pydantic cannot express (the live turn and grading, the
    conversation's turns, attachments); empty when it keeps them all."""
    return [*_live_turn_and_grading(case), *_conversation_turns(case), *_attachments(case)]


def _live_turn_and_grading(case: EvalCase) -> Iterator[Violation]:
    replay = case.seed is not None and case.seed.mode == "replay"
    if not case.conversation and not replay:
        yield Violation(
            ("conversation",),
            "a case needs a conversation, or a seed with mode 'replay' (which supplies the live turn)",
        )
    if not (case.execution_scenarios or case.process_expectations or case.outcome_expectations):
        yield Violation(
            (),
            "a case needs at least one executionScenario, processExpectation or "
            "outcomeExpectation to grade it",
        )


def _conversation_turns(case: EvalCase) -> Iterator[Violation]:
    """n8n's rule (``harness/schema.ts``): every user turn needs text, except a non-replay opening
    turn that carries ``attach``; assistant turns are proxy script data and are never posted. A
    director note in the opening turn is authoring advice there, not a load error."""
    replay = case.seed is not None and case.seed.mode == "replay"
    for index, turn in enumerate(case.conversation):
        if turn.role == "assistant" or turn.text.strip():
            continue
        opening_may_attach = index == 0 and not replay
        if opening_may_attach and turn.attach is not None:
            continue
        yield Violation(
            ("conversation", index, "text"),
            "an opening turn with empty text must carry attach (the chat API rejects an empty message)"
            if opening_may_attach else
            "a user turn needs text: the chat API rejects an empty message, and only a non-replay "
            "opening turn may carry attach instead",
        )


def _attachments(case: EvalCase) -> Iterator[Violation]:
    inline = case.seed if case.seed is not None and case.seed.mode == "inline" else None
    for index, turn in enumerate(case.conversation):
        attach = turn.attach
        if attach is None:
            continue
        loc: tuple[str | int, ...] = ("conversation", index, "attach")
        if case.seed is not None and case.seed.mode == "replay":
            yield Violation(loc, "a replay seed's opening turn comes from its trace and the seed declares no "
                                 "workflows or agents: no authored turn can carry attach (use an inline seed)")
            continue
        if index != 0:
            yield Violation(loc, "only the opening turn may carry attach")
            continue
        if turn.role != "user":
            yield Violation(loc, "only a user turn may carry attach")
            continue
        if (attach.workflow is None) == (attach.agent is None):
            yield Violation(loc, "attach names exactly one of workflow or agent")
            continue
        if attach.source is not None and attach.workflow is None:
            yield Violation(
                (*loc, "source"),
                "only workflow attachments may set source 'setup-panel-execute'",
            )
        if attach.workflow is not None and inline is None:
            yield Violation((*loc, "workflow"), f"attach.workflow {attach.workflow!r}: the case has no inline seed, "
                                                "so it declares no workflow to attach")
        elif attach.workflow is not None and inline is not None and attach.workflow not in inline.workflow_ids():
            yield Violation(
                (*loc, "workflow"),
                f"attach.workflow {attach.workflow!r} names no workflow declared in the "
                "inline seed's workflows",
            )
        if attach.agent is not None and inline is None:
            yield Violation((*loc, "agent"), f"attach.agent {attach.agent!r}: the case has no inline seed, "
                                             "so it declares no agent to attach")
        elif attach.agent is not None and inline is not None and attach.agent not in inline.agent_ids():
            yield Violation(
                (*loc, "agent"),
                f"attach.agent {attach.agent!r} names no agent declared in the inline seed's agents",
            )
