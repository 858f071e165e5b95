"""The user proxy's decision: what the simulated user does now, as the proxy model answers it
(one JSON object), and the instructions that ask for it (:mod:`orchestrator.builders.instance_ai.user_proxy`)."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

#: Every proxy request's system prompt starts with this (the scripted model recognises it).
PROXY_MARKER = "[n8n-eval user proxy]"

Action = Literal["send", "answer", "approve", "deny", "stop"]
Situation = Literal["reply", "questions", "plan-review", "approval", "network", "setup", "credential"]


# ------------------------------------------------------------------------------------------------
# the decision


class ProxyDecision(BaseModel):
    """What the simulated user does now."""

    action: Action
    text: str = ""
    #: questionId (or ``<node>.<parameter>`` on a setup card) → the answer
    answers: dict[str, str] = Field(default_factory=dict)
    reason: str = ""
    #: ids of the stage directions now fulfilled (cumulative; the proxy may only add)
    directions_done: list[int] = Field(default_factory=list)
    #: ``allowUserExecution`` cases: the saved workflow the user runs before this message goes out
    run_workflow_id: str | None = None
    #: a direction has someone rename the saved workflow outside the chat before this message goes
    #: out (n8n's ``renameWorkflowTo``): the harness renames it behind the agent's back
    rename_workflow_to: str | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("answers", mode="before")
    @classmethod
    def _answers(cls, value: object) -> object:
        if isinstance(value, list):  # [{"questionId", "answer"}] is accepted too
            out = {}
            for item in value:
                if isinstance(item, dict):
                    key = item.get("questionId") or item.get("id")
                    answer = item.get("answer") or item.get("text") or item.get("customText")
                    if key is not None and answer is not None:
                        out[str(key)] = str(answer)
            return out
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
        return value


def parse_decision(text: str) -> ProxyDecision | None:
    """The decision in the first ``{`` … last ``}`` of ``text`` (fences and prose around it are
    ignored); None when there is none or it does not validate."""
    text = text or ""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        return ProxyDecision.model_validate_json(text[start : end + 1])
    except ValidationError:
        try:  # a JSON object with trailing junk inside the braces: try the shortest valid prefix
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            return ProxyDecision.model_validate(obj)
        except (ValueError, ValidationError):
            return None


SYSTEM_PROMPT = PROXY_MARKER + """ You play the USER of n8n's Instance AI assistant in an evaluation.
You follow a screenplay: the user turns say what the user wants (keep concrete values verbatim);
text in [stage directions] tells you how the user behaves and overrides your defaults; assistant
turns are only the expected flow (reference), never things that already happened.

Defaults, unless a direction covers the moment:
- answer every question the agent asks, using the screenplay's values, else inventing a plausible
  placeholder; never set up credentials;
- audit any plan or approval against the screenplay: approve when it fits, deny with a short
  correction when it misses a requirement of the script;
- when the agent finished its work and the script has more for the user to say, send the next
  user turn's words (never the stage directions themselves); when a direction holds a list,
  send one item at a time, in order, each after the previous one was built;
- stop when the script is done and the agent asked nothing.

Directions: withhold a value until the agent asks for it (then give exactly that value); refuse
and hold firm on re-ask when told so; deny network access when told so; dismiss a setup card
when a direction withholds its value.

Answer with ONE JSON object and nothing else:
{"action": "send|answer|approve|deny|stop", "text": "...", "answers": {"<questionId>": "..."},
 "reason": "why, one sentence", "directions_done": [<ids of directions now fulfilled>]}
- situation "reply" (the agent finished a run): "answer" (reply to its question) or "send" (the
  next scripted message) with the message in "text", or "stop";
- situation "questions": "answer" with one entry in "answers" per question id (an option's exact
  text, or free text), or "deny" to skip them all;
- situation "plan-review" / "approval" / "network": "approve" or "deny" (a denial's correction
  in "text");
- situation "setup": "approve" to fill the card ("answers" keyed "<node name>.<parameter>"), or
  "deny" to dismiss it.
- when "saved_workflows" is present the user may run one of them: when a direction says the user
  runs the workflow, put its id in "run_workflow_id" with the message; it is run for real before
  the message goes out.
- when a direction says the workflow is renamed outside the chat (in the editor) before the next
  message, put the new name in "rename_workflow_to" with that message; the last saved workflow is
  renamed for real before the message goes out."""


def _allowed(situation: Situation) -> list[str]:
    if situation == "reply":
        return ["answer", "send", "stop"]
    if situation == "questions":
        return ["answer", "deny"]
    return ["approve", "deny"]
