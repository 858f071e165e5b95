"""Load-time rules that span more than one field. Each check returns :class:`Violation` s located
relative to the model it is given; the models raise them from their validators.

Field-local rules (id length, folder-name shape, closed credential types, retired keys) live on
the fields themselves in ``seed.py`` / ``credentials.py`` / ``model.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.cases.issues import Violation

if TYPE_CHECKING:
    from orchestrator.cases.model import EvalCase
    from orchestrator.cases.seed import InlineSeed, SeedMessage

#: A director note: ``[...]`` whose content starts with a letter and holds a space, so expression
#: syntax (``$json["a b"]``), lists (``[1, 2]``) and ``[placeholder]`` words are not mistaken for one.
_DIRECTOR_NOTE = re.compile(r"\[([A-Za-z][^\[\]]*\s[^\[\]]*)\]")
_SLUG_SEPARATORS = re.compile(r"[^a-z0-9]+")


def director_notes(text: str) -> list[str]:
    """The ``[bracketed]`` stage directions in a turn's text (brackets stripped)."""
    return [m.group(1).strip() for m in _DIRECTOR_NOTE.finditer(text)]


def strip_director_notes(text: str) -> str:
    """The words a user says: the turn's text with its stage directions removed."""
    return re.sub(r"[ \t]+\n", "\n", _DIRECTOR_NOTE.sub("", text)).strip()


def agent_slug(name: str) -> str:
    """The addressing key n8n derives from an agent name (``Support Bot`` → ``support-bot``)."""
    return _SLUG_SEPARATORS.sub("-", name.lower()).strip("-")


# --------------------------------------------------------------------------- seed messages


def check_seed_message(message: SeedMessage) -> list[Violation]:
    if message.type == "custom":
        return []
    found: list[Violation] = []
    if message.role is None:
        found.append(Violation(("role",), "role is required unless the message type is 'custom'"))
    content = message.content
    if not isinstance(content, list):
        found.append(
            Violation(("content",), "content must be a list of blocks, each with a type")
        )
        return found
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            found.append(Violation(("content", index), "a content block must be an object"))
        elif not isinstance(block.get("type"), str) or not block["type"]:
            found.append(Violation(("content", index, "type"), "a content block needs a type"))
    return found


# --------------------------------------------------------------------------- inline seed


def check_inline_seed(seed: InlineSeed) -> list[Violation]:
    return [
        *_carries_something(seed),
        *_unique_artifact_ids(seed),
        *_folder_references(seed),
        *_folder_cycles(seed),
        *_prior_run_references(seed),
        *_agent_skill_references(seed),
        *_agent_name_collisions(seed),
    ]


def _carries_something(seed: InlineSeed) -> Iterator[Violation]:
    """n8n's rule: an inline seed that carries nothing restores nothing, and the case would grade as
    an unseeded build (folders alone do not count)."""
    if not (seed.messages or seed.workflows or seed.data_tables or seed.agents or seed.projects):
        yield Violation((), "an inline seed must carry something: messages, workflows, dataTables, agents or projects")


def _artifact_ids(seed: InlineSeed) -> Iterator[tuple[str, tuple[str | int, ...]]]:
    groups: tuple[tuple[str, Sequence[Any]], ...] = (
        ("workflows", seed.workflows),
        ("dataTables", seed.data_tables),
        ("agents", seed.agents),
        ("folders", seed.folders),
        ("projects", seed.projects),
    )
    for kind, items in groups:
        for index, item in enumerate(items):
            yield item.id, (kind, index, "id")


def _unique_artifact_ids(seed: InlineSeed) -> Iterator[Violation]:
    first_seen: dict[str, tuple[str | int, ...]] = {}
    for artifact_id, loc in _artifact_ids(seed):
        if artifact_id in first_seen:
            where = ".".join(str(p) for p in ("seed", *first_seen[artifact_id]))
            yield Violation(loc, f"duplicate id {artifact_id!r} (already used by {where})")
        else:
            first_seen[artifact_id] = loc


def _folder_references(seed: InlineSeed) -> Iterator[Violation]:
    folder_ids = {f.id for f in seed.folders}
    for index, folder in enumerate(seed.folders):
        parent = folder.parent_folder_id
        if parent is not None and parent != folder.id and parent not in folder_ids:
            yield Violation(
                ("folders", index, "parentFolderId"),
                f"parentFolderId {parent!r} names no folder declared in seed.folders",
            )
    for index, workflow in enumerate(seed.workflows):
        parent = workflow.parent_folder_id
        if parent is not None and parent not in folder_ids:
            yield Violation(
                ("workflows", index, "parentFolderId"),
                f"parentFolderId {parent!r} names no folder declared in seed.folders",
            )


def _folder_cycles(seed: InlineSeed) -> Iterator[Violation]:
    parents = {f.id: f.parent_folder_id for f in seed.folders}
    for index, folder in enumerate(seed.folders):
        chain = [folder.id]
        current = parents.get(folder.id)
        while current is not None and current in parents:
            if current == folder.id:
                path = " → ".join([*chain, folder.id])
                yield Violation(
                    ("folders", index, "parentFolderId"),
                    f"folder {folder.id!r} is its own ancestor ({path})",
                )
                break
            if current in chain:  # a cycle further up; reported on its own members
                break
            chain.append(current)
            current = parents.get(current)


def prior_run_target(seed: InlineSeed, ref: str) -> str | None:
    """The seed workflow id a ``priorRuns[].workflow`` names: an id, else a unique name."""
    if ref in seed.workflow_ids():
        return ref
    named = [w.id for w in seed.workflows if w.name == ref]
    return named[0] if len(named) == 1 else None


def _prior_run_references(seed: InlineSeed) -> Iterator[Violation]:
    for index, run in enumerate(seed.prior_runs):
        if prior_run_target(seed, run.workflow) is not None:
            continue
        same_name = sum(1 for w in seed.workflows if w.name == run.workflow)
        declared = ", ".join(sorted(seed.workflow_ids())) or "(none)"
        yield Violation(
            ("priorRuns", index, "workflow"),
            f"workflow {run.workflow!r} names {same_name} seed workflows: give its id instead"
            if same_name > 1 else
            f"workflow {run.workflow!r} is neither the id nor the name of a workflow in seed.workflows "
            f"(ids: {declared})",
        )


def _agent_skill_references(seed: InlineSeed) -> Iterator[Violation]:
    for agent_index, agent in enumerate(seed.agents):
        for skill_index, ref in enumerate(agent.config.skills):
            if ref.id not in agent.skills:
                yield Violation(
                    ("agents", agent_index, "config", "skills", skill_index, "id"),
                    f"skill {ref.id!r} has no entry in this agent's skills map",
                )


def _agent_name_collisions(seed: InlineSeed) -> Iterator[Violation]:
    by_slug: dict[str, tuple[int, str]] = {}
    for index, agent in enumerate(seed.agents):
        slug = agent_slug(agent.config.name)
        if slug in by_slug:
            other_index, other_name = by_slug[slug]
            yield Violation(
                ("agents", index, "config", "name"),
                f"agent name {agent.config.name!r} collides with {other_name!r} "
                f"(seed.agents.{other_index}): both address as {slug!r}",
            )
        else:
            by_slug[slug] = (index, agent.config.name)


# --------------------------------------------------------------------------- whole case


def check_case(case: EvalCase) -> list[Violation]:
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
