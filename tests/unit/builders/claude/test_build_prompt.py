"""The build prompt: opening turn verbatim, later user turns without director notes, the trailer ask."""

from __future__ import annotations

from orchestrator.builders.claude.prompt import TRAILER_INSTRUCTION, build_prompt
from orchestrator.cases import EvalCase


def _case(**body) -> EvalCase:
    base = {"complexity": "simple", "tags": ["t"], "outcomeExpectations": ["works"]}
    return EvalCase.model_validate({**base, **body})


def test_single_prompt_is_sent_verbatim_with_the_trailer_instruction() -> None:
    prompt = build_prompt(_case(conversation=[{"role": "user", "text": "Post [x] to Slack #growth daily."}]))
    assert prompt.startswith("Post [x] to Slack #growth daily.")
    assert prompt.rstrip().endswith(TRAILER_INSTRUCTION)


def test_follow_ups_drop_director_notes_and_assistant_turns() -> None:
    case = _case(conversation=[
        {"role": "user", "text": "Build a digest."},
        {"role": "assistant", "text": "Which channel?"},
        {"role": "user", "text": ["Use #ops.", "[Only say this if the agent asks where to post.]"]},
    ])
    prompt = build_prompt(case)
    assert "Which channel?" not in prompt
    assert "- Use #ops." in prompt
    assert "Only say this" not in prompt and "[" not in prompt.split("Build a digest.")[1].split(TRAILER_INSTRUCTION)[0]


def test_attached_workflow_is_named_by_its_per_run_id() -> None:
    case = _case(
        conversation=[{"role": "user", "text": "", "attach": {"workflow": "seedWorkflow01"}}],
        seed={"mode": "inline", "messages": [], "workflows": [{"id": "seedWorkflow01", "name": "Broken", "nodes": [], "connections": {}}]},
    )
    prompt = build_prompt(case, id_map={"seedWorkflow01": "RealId123"})
    assert "workflow RealId123 open in the editor" in prompt
    assert "seedWorkflow01" not in prompt
