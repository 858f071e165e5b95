"""The user proxy: an LLM that plays the user of a multi-turn case from the case's screenplay.

A case is a *screenplay*: ``user`` turns (what the user says, plus ``[stage directions]`` — how the
user behaves, never spoken) and ``assistant`` turns (the expected flow, reference for the proxy
only). :func:`conversation_driver` picks how a build talks to the agent:

- **single-prompt** (one user turn, no assistant turn): :class:`AutoApprove` — the prompt is sent and
  every confirmation is auto-approved (:func:`~orchestrator.builders.instance_ai.builder.answer_confirmation`
  semantics, passed in), no model call;
- **multi-turn**: :class:`UserProxy`. It sends the opening turn (its stage directions stripped),
  then after every finished run decides what the user does next (answer the agent's free-text
  question, send the next scripted turn, keep going through a list, or stop) and answers every
  confirmation the agent raises (``ask-user`` questions, plan reviews, approvals, setup cards).
  Follow-up messages (every chat message after the opening) are capped by ``messageBudget``
  (default 5), as the reference's ``UserProxyLlm.decideFollowUp`` counts them.

Deterministic gates that never reach the model (as the reference harness does it):

- network-access prompts (``domainAccess`` / ``webSearch`` cards: fetch-url, web-search) are
  granted — unless a stage direction is still pending, then the model decides (which is what makes
  "deny the web search" reachable);
- credential slots are deferred unless a pending direction engages credentials ("don't defer it,
  set it up now"); an engaged slot selects the case's credential of that type (the one a direction
  names when there are several), and when the card offers none and the case declared none, a real
  credential is created first (the reference's ``manual`` action with zero candidates,
  ``UserProxyLlm.createCredential``): the type's template, added to the thread's pinned credentials
  with its connection test resolved as passing;
- the message budget: once spent, the conversation stops.

The model is called through the ``anthropic`` SDK: model ``N8N_INSTANCE_AI_EVAL_MODEL`` (default
``N8N_INSTANCE_AI_MODEL``, then ``anthropic/claude-sonnet-4-6``; the ``anthropic/`` prefix is
stripped for the SDK), effort ``N8N_INSTANCE_AI_EVAL_EFFORT`` (default ``medium``), on the run's
model route (the scripted server when offline). It answers one JSON object, :class:`ProxyDecision`,
parsed from the first ``{`` to the last ``}`` of its text. Every decision — the model's and the
deterministic ones — is a ``proxy`` entry in the transcript (``action``, ``text``, ``reason``,
``by``: ``model`` | ``rule`` | ``fallback``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.builders.instance_ai.proxy_decision import (
    PROXY_MARKER,
    SYSTEM_PROMPT,
    Action,
    ProxyDecision,
    Situation,
    _allowed,
    parse_decision,
)
from orchestrator.cases import EvalCase, strip_director_notes
from orchestrator.errors import ConfigError
from orchestrator.gateway.attribution import attribution_hook
from orchestrator.redact import redact, register_secret
from orchestrator.results.usage import record_model_call
from orchestrator.transcript import Transcript

__all__ = ["PROXY_MARKER", "AutoApprove", "ConversationDriver", "ProxyConfig", "ProxyDecision", "UserProxy",
           "conversation_driver", "fallback_answer", "parse_decision", "questions_body"]

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)

DEFAULT_PROXY_MODEL = "anthropic/claude-sonnet-4-6"
DEFAULT_EFFORT = "medium"
#: Effort → extended-thinking budget (tokens), as the judge maps it.
EFFORT_BUDGET = {"low": 0, "medium": 2048, "high": 4096, "xhigh": 8192, "max": 16000}
#: Follow-up messages of a multi-turn case without ``messageBudget`` (the opening is not counted:
#: the reference's ``DEFAULT_MESSAGE_BUDGET``, ``utils/user-proxy/index.ts``).
DEFAULT_MESSAGE_BUDGET = 5
#: How much of one agent message (and of a confirmation summary, ×3) the proxy is shown.
MAX_TEXT_CHARS = 4_000


_CREDENTIAL_ENGAGE = re.compile(
    r"(don'?t|do not|never)\s+defer|set (?:it|them|the credential) up now|engage|select(?:ing)? the .{0,40}credential|"
    r"connect (?:my|the|it)", re.I)
_CREDENTIAL_WORDS = re.compile(r"credential|oauth|connect|account|setup card|set up", re.I)


# ------------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class ProxyConfig:
    model: str = DEFAULT_PROXY_MODEL
    effort: str = DEFAULT_EFFORT
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    attempts: int = 2
    attempt_timeout_s: float = 120.0

    @classmethod
    def from_env(cls, *, api_key: str | None, base_url: str | None, lane_env: Mapping[str, str] | None = None,
                 environ: Mapping[str, str] | None = None) -> ProxyConfig:
        """The reference's variables; ``N8N_INSTANCE_AI_MODEL`` is also looked up in the lanes' env
        (the run sets it there for the lanes' agent)."""
        env = os.environ if environ is None else environ
        lanes = lane_env or {}
        effort = env.get("N8N_INSTANCE_AI_EVAL_EFFORT") or DEFAULT_EFFORT
        if effort not in EFFORT_BUDGET:
            raise ConfigError(f"N8N_INSTANCE_AI_EVAL_EFFORT: {effort!r} is not one of {', '.join(EFFORT_BUDGET)}")
        model = (env.get("N8N_INSTANCE_AI_EVAL_MODEL") or env.get("N8N_INSTANCE_AI_MODEL")
                 or lanes.get("N8N_INSTANCE_AI_MODEL") or DEFAULT_PROXY_MODEL)
        register_secret(api_key)
        return cls(model=model, effort=effort, api_key=api_key, base_url=base_url)

    @property
    def api_model(self) -> str:
        return self.model.split("/", 1)[1] if self.model.startswith("anthropic/") else self.model


# ------------------------------------------------------------------------------------------------
# the screenplay


@dataclass(frozen=True)
class Direction:
    index: int
    turn: int
    text: str


@dataclass(frozen=True)
class Screenplay:
    """The case as the proxy reads it: spoken user turns, directions, assistant reference turns."""

    opening: str
    turns: list[dict[str, Any]]  # {"turn", "role", "says"|"reference", "directions": [indices]}
    directions: list[Direction]
    spoken: list[str]  # the later user turns' spoken words, in order (what "send the next turn" sends)
    budget: int

    @classmethod
    def of(cls, case: EvalCase) -> Screenplay:
        """The screenplay of ``case``: spoken user turns (notes stripped), directions, assistant references."""
        turns: list[dict[str, Any]] = []
        directions: list[Direction] = []
        spoken: list[str] = []
        for number, turn in enumerate(case.conversation):
            if turn.role == "assistant":
                turns.append({"turn": number, "role": "assistant", "reference": turn.text})
                continue
            says = strip_director_notes(turn.text).strip()
            ids = []
            for note in turn.director_notes:
                directions.append(Direction(len(directions), number, note))
                ids.append(directions[-1].index)
            turns.append({"turn": number, "role": "user", "says": says, "directions": ids})
            if number > 0 and says:
                spoken.append(says)
        opening = strip_director_notes(case.opening_prompt()).strip() if case.conversation else ""
        return cls(opening, turns, directions, spoken, case.message_budget or DEFAULT_MESSAGE_BUDGET)

    def to_json(self) -> list[dict[str, Any]]:
        out = []
        for t in self.turns:
            item = dict(t)
            if "directions" in item:
                item["directions"] = [{"id": i, "text": self.directions[i].text} for i in item["directions"]]
            out.append(item)
        return out


# ------------------------------------------------------------------------------------------------
# drivers


class ConversationDriver(Protocol):
    """How a build converses: the opening message, what follows each finished run, the answer to
    each confirmation."""

    def opening(self) -> str: ...

    async def next_message(self) -> str | None: ...

    def take_user_run(self) -> str | None: ...

    def take_external_edit(self) -> str | None: ...

    async def answer(self, payload: dict[str, Any]) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


class AutoApprove:
    """Single-prompt cases: the user turns in order (only the one), every confirmation approved."""

    def __init__(self, turns: list[str], approve: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self._turns = list(turns)
        self._approve = approve
        self._next = 1

    def opening(self) -> str:
        return self._turns[0] if self._turns else ""

    async def next_message(self) -> str | None:
        if self._next >= len(self._turns):
            return None
        self._next += 1
        return self._turns[self._next - 1]

    def take_user_run(self) -> str | None:
        return None

    def take_external_edit(self) -> str | None:
        return None

    async def answer(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self._approve(payload)

    async def aclose(self) -> None:
        return None


def is_network_prompt(payload: dict[str, Any]) -> bool:
    """Whether a confirmation asks for network access (a domain or web search)."""
    return bool(payload.get("domainAccess") or payload.get("webSearch"))


def situation_of(payload: dict[str, Any]) -> Situation:
    """What a confirmation asks: network access, setup, a credential, questions, a plan review or approval."""
    if is_network_prompt(payload):
        return "network"
    if payload.get("setupRequests"):
        return "setup"
    if payload.get("credentialRequests"):
        return "credential"
    input_type = payload.get("inputType") or "approval"
    if input_type == "questions" and payload.get("questions"):
        return "questions"
    if input_type == "plan-review":
        return "plan-review"
    return "approval"


class UserProxy:
    """Multi-turn cases: see the module doc. One instance per build attempt (it holds the state)."""

    def __init__(self, case: EvalCase, config: ProxyConfig, transcript: Transcript, *,
                 credential_ids: Mapping[str, list[str]] | None = None,
                 credential_names: Mapping[str, str] | None = None,
                 approve: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 create_credential: Callable[[str], Awaitable[str | None]] | None = None,
                 client: anthropic.AsyncAnthropic | None = None) -> None:
        self.play = Screenplay.of(case)
        self.config = config
        self.transcript = transcript
        self.credential_ids = dict(credential_ids or {})
        self.credential_names = dict(credential_names or {})  # id → name
        self._approve = approve
        self._create_credential = create_credential
        self.created_credentials: dict[str, str] = {}  # type → id, created on an engaged card
        self._client = client
        self._own_client = client is None
        self.sent: list[str] = []
        self.allow_user_execution = bool(case.allow_user_execution)
        self._user_run: str | None = None
        self._rename: str | None = None
        self.done: set[int] = set()
        self.model_calls = 0
        self._mark = 0  # transcript position of the last message sent

    # -- state ------------------------------------------------------------------------------------

    @property
    def pending(self) -> list[Direction]:
        return [d for d in self.play.directions if d.index not in self.done]

    @property
    def budget_left(self) -> int:
        """Follow-ups still allowed (the opening turn is not one)."""
        return self.play.budget - max(0, len(self.sent) - 1)

    def _client_or_new(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            import anthropic  # seconds to import: loaded by the first proxy call, not by every CLI start

            hooks = {"request": [attribution_hook("proxy")]}  # the model gateway counts it to the unit (issue 37)
            self._client = anthropic.AsyncAnthropic(api_key=self.config.api_key or "unset", base_url=self.config.base_url,
                                                    max_retries=0, timeout=self.config.attempt_timeout_s,
                                                    http_client=anthropic.DefaultAsyncHttpxClient(event_hooks=hooks))
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.close()
            self._client = None

    def _record(self, situation: Situation, decision: ProxyDecision, by: str, **extra: Any) -> None:
        self.transcript.add("proxy", situation=situation, action=decision.action, text=decision.text or None,
                            answers=decision.answers or None, reason=decision.reason or None, by=by,
                            pending_directions=[d.index for d in self.pending] or None,
                            budget_left=self.budget_left, **extra)

    def _send(self, text: str) -> str:
        self.sent.append(text)
        self._mark = len(self.transcript.entries)
        return text

    # -- the conversation ---------------------------------------------------------------------------

    def opening(self) -> str:
        return self._send(self.play.opening)

    async def next_message(self) -> str | None:
        """After a finished run: the next chat message, or None to stop."""
        if self.budget_left <= 0:
            decision = ProxyDecision(action="stop", reason=f"messageBudget reached ({self.play.budget} follow-ups)")
            self._record("reply", decision, "rule", budget=self.play.budget)
            return None
        details: dict[str, Any] = {"agent_said": self._agent_since_last_message()}
        if self.allow_user_execution:
            details["saved_workflows"] = self.saved_workflows()
        decision = await self._decide("reply", details)
        if decision.action in ("send", "answer") and decision.text.strip():
            text = strip_director_notes(decision.text).strip()  # a stage direction is never spoken
            if text:
                self._user_run = decision.run_workflow_id if self.allow_user_execution else None
                self._rename = (decision.rename_workflow_to or "").strip() or None
                extra = {"run_workflow_id": self._user_run} if self._user_run else {}
                self._record("reply", decision, self._by, **extra, **({"rename_workflow_to": self._rename}
                                                                        if self._rename else {}))
                return self._send(text)
        if decision.action != "stop":
            decision = decision.model_copy(update={"action": "stop", "reason": (decision.reason + " (no message to send)").strip()})
        self._record("reply", decision, self._by)
        return None

    def saved_workflows(self) -> list[dict[str, Any]]:
        """The workflows this conversation saved (successful ``build-workflow`` results), in order."""
        out: dict[str, dict[str, Any]] = {}
        for e in self.transcript.entries:
            result = e.get("result")
            if e.get("kind") == "tool_result" and e.get("tool") == "build-workflow" and isinstance(result, dict) \
                    and result.get("success") is True and isinstance(result.get("workflowId"), str):
                out[result["workflowId"]] = {"id": result["workflowId"], "name": result.get("workflowName")}
        return list(out.values())

    def take_user_run(self) -> str | None:
        """The workflow the user runs before the message :meth:`next_message` just returned goes out."""
        run, self._user_run = self._user_run, None
        return run

    def take_external_edit(self) -> str | None:
        """The name the last saved workflow gets outside the chat before that message goes out."""
        rename, self._rename = self._rename, None
        return rename

    async def answer(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The body for ``POST /confirm/:requestId``."""
        situation = situation_of(payload)
        if situation == "network" and not self.pending:
            decision = ProxyDecision(action="approve", reason="network access is granted without asking (no direction pending)")
            self._record(situation, decision, "rule")
            return self._network_body(payload, approved=True)
        if situation in ("credential", "setup"):
            await self._create_missing_credentials(payload)
        if situation == "credential":
            return self._credential_card(payload)
        if situation == "setup":
            deferred = self._setup_deferral(payload)
            if deferred is not None:
                return deferred
        decision = await self._decide(situation, {"request": _summary(payload)})
        self._record(situation, decision, self._by, tool=payload.get("toolName"))
        return self._body(situation, payload, decision)

    # -- bodies -----------------------------------------------------------------------------------

    @staticmethod
    def _network_body(payload: dict[str, Any], *, approved: bool) -> dict[str, Any]:
        if approved:  # web search reuses domain access's approval shape (n8n tryInfrastructureResponse)
            return {"kind": "domainAccessApprove", "domainAccessAction": "allow_all"}
        if payload.get("domainAccess"):
            return {"kind": "domainAccessDeny"}
        return {"kind": "approval", "approved": False}

    def _body(self, situation: Situation, payload: dict[str, Any], decision: ProxyDecision) -> dict[str, Any]:
        approved = decision.action in ("approve", "answer", "send")
        if situation == "network":
            return self._network_body(payload, approved=approved)
        if situation == "questions":
            return questions_body(payload, decision)
        if situation == "setup":
            return self._setup_body(payload, decision) if approved else _dismiss_setup(payload)
        if situation == "plan-review":
            if approved:
                return {"kind": "approval", "approved": True}
            return {"kind": "approval", "approved": False, "userInput": decision.text or "That plan misses what I asked for."}
        if payload.get("inputType") == "resource-decision":
            return {"kind": "resourceDecision", "resourceDecision": "allowOnce" if approved else "denyOnce"}
        if approved:
            base = self._approve(payload) if self._approve else {"kind": "approval", "approved": True}
            if payload.get("inputType") == "text" and decision.text:
                base = {"kind": "approval", "approved": True, "userInput": decision.text}
            return base
        body: dict[str, Any] = {"kind": "approval", "approved": False}
        if decision.text:
            body["userInput"] = decision.text
        return body

    def _engaged(self) -> Direction | None:
        for d in self.pending:
            if _CREDENTIAL_WORDS.search(d.text) and _CREDENTIAL_ENGAGE.search(d.text):
                return d
        return None

    def _pick_credential(self, ctype: str, candidates: list[dict[str, Any]], direction: Direction) -> str | None:
        """The candidate a direction names, else the only one (the case's own first)."""
        named = [c for c in candidates if isinstance(c, dict) and c.get("name") and _chosen_in(direction.text, str(c["name"]))]
        if len(named) == 1:
            return str(named[0]["id"])
        ids = [str(c["id"]) for c in candidates if isinstance(c, dict) and c.get("id")]
        if len(ids) == 1:
            return ids[0]
        mine = self.credential_ids.get(ctype) or []
        named_mine = [i for i in mine if self.credential_names.get(i) and _chosen_in(direction.text, self.credential_names[i])]
        if len(named_mine) == 1:
            return named_mine[0]
        return mine[0] if len(mine) == 1 else None

    async def _create_missing_credentials(self, payload: dict[str, Any]) -> None:
        """An engaged card that offers no credential of a type the case did not declare: create one
        (the user fills the New Credential modal), so the card can select it."""
        engaged = self._engaged()
        if engaged is None or self._create_credential is None:
            return
        for req in (payload.get("credentialRequests") or []) + (payload.get("setupRequests") or []):
            if not isinstance(req, dict) or not isinstance(req.get("credentialType"), str):
                continue
            ctype = req["credentialType"]
            if req.get("existingCredentials") or self.credential_ids.get(ctype):
                continue
            cid = await self._create_credential(ctype)
            if cid is None:
                continue
            self.created_credentials[ctype] = cid
            self.credential_ids[ctype] = [cid]
            self._record("credential", ProxyDecision(action="approve", answers={ctype: cid},
                                                     reason=f"direction {engaged.index} engages a card that offers no "
                                                            f"{ctype} credential: one was created"), "rule")

    def _credential_card(self, payload: dict[str, Any]) -> dict[str, Any]:
        engaged = self._engaged()
        chosen: dict[str, str] = {}
        if engaged is not None:
            for req in payload.get("credentialRequests") or []:
                if isinstance(req, dict) and isinstance(req.get("credentialType"), str):
                    pick = self._pick_credential(req["credentialType"], req.get("existingCredentials") or [], engaged)
                    if pick:
                        chosen[req["credentialType"]] = pick
        if chosen and engaged is not None:
            self.done.add(engaged.index)
            decision = ProxyDecision(action="approve", reason=f"direction {engaged.index} engages the credential card",
                                     answers=chosen, directions_done=sorted(self.done))
            self._record("credential", decision, "rule")
            return {"kind": "credentialSelection", "credentials": chosen}
        reason = ("credentials are deferred by default" if engaged is None
                  else f"direction {engaged.index} engages, but no matching credential exists on the card")
        self._record("credential", ProxyDecision(action="deny", reason=reason), "rule")
        return {"kind": "credentialSelection", "credentials": {}}  # n8n tryInfrastructureResponse: nothing picked

    def _setup_deferral(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Credential-only setup cards are deferred (skipped) without the model unless engaged."""
        requests = [r for r in payload.get("setupRequests") or [] if isinstance(r, dict)]
        credential_only = all(r.get("credentialType") and not _open_parameters(r) for r in requests)
        if not credential_only:
            return None
        engaged = self._engaged()
        if engaged is None:
            self._record("setup", ProxyDecision(action="deny", reason="credential slots are deferred by default"), "rule",
                         tool=payload.get("toolName"))
            return _dismiss_setup(payload)
        decision = ProxyDecision(action="approve", reason=f"direction {engaged.index} engages the credential slot")
        body = self._setup_body(payload, decision, engaged=engaged)
        if body.get("nodeCredentials"):
            self.done.add(engaged.index)
        self._record("setup", decision.model_copy(update={"directions_done": sorted(self.done)}), "rule",
                     tool=payload.get("toolName"))
        return body

    def _setup_body(self, payload: dict[str, Any], decision: ProxyDecision, engaged: Direction | None = None) -> dict[str, Any]:
        engaged = engaged or self._engaged()
        node_credentials: dict[str, dict[str, str]] = {}
        node_parameters: dict[str, dict[str, Any]] = {}
        skipped: list[str] = []
        for req in payload.get("setupRequests") or []:
            if not isinstance(req, dict) or not isinstance(req.get("node"), dict):
                continue
            node = str(req["node"].get("name", ""))
            ctype = req.get("credentialType")
            if isinstance(ctype, str) and ctype:
                pick = self._pick_credential(ctype, req.get("existingCredentials") or [], engaged) if engaged else None
                if pick:
                    node_credentials.setdefault(node, {})[ctype] = pick
                elif not _open_parameters(req):
                    skipped.append(node)
            for param in _open_parameters(req):
                value = decision.answers.get(f"{node}.{param}")
                if value is not None:
                    node_parameters.setdefault(node, {})[param] = value
        body: dict[str, Any] = {"kind": "setupWorkflowApply"}
        if node_credentials:
            body["nodeCredentials"] = node_credentials
        if node_parameters:
            body["nodeParameters"] = node_parameters
        if skipped:
            body["skippedNodes"] = sorted(set(skipped))
        return body

    # -- the model --------------------------------------------------------------------------------

    _by = "model"

    def _agent_since_last_message(self) -> list[dict[str, Any]]:
        return _view(self.transcript.entries[self._mark:])

    def _prompt(self, situation: Situation, details: dict[str, Any]) -> str:
        doc = {
            "screenplay": self.play.to_json(),
            "pending_directions": [{"id": d.index, "text": d.text} for d in self.pending],
            "directions_done": sorted(self.done),
            "sent_messages": self.sent,
            "script_turns_not_yet_sent": [s for s in self.play.spoken if s not in self.sent],
            "conversation": _view(self.transcript.entries),
            "situation": situation,
            **details,
            "allowed_actions": _allowed(situation),
            "budget": {"follow_ups_sent": max(0, len(self.sent) - 1), "limit": self.play.budget},
        }
        text = json.dumps(doc, ensure_ascii=False, default=str)
        return ("Decide what the user does now. The state, as JSON:\n```json\n" + text + "\n```\n"
                "Answer with the one JSON object described in your instructions.")

    async def _decide(self, situation: Situation, details: dict[str, Any]) -> ProxyDecision:
        import anthropic  # (for its errors) loaded by the client

        prompt = self._prompt(situation, details)
        last_error = ""
        for attempt in range(max(1, self.config.attempts)):
            try:
                text = await self._ask(prompt)
            except (TimeoutError, anthropic.APIError) as exc:
                last_error = redact(f"{type(exc).__name__}: {exc}")[:300]
                log.warning("user proxy attempt %d failed: %s", attempt + 1, last_error)
                continue
            decision = parse_decision(text)
            if decision is None:
                last_error = "the proxy's reply was not the JSON decision asked for"
                continue
            if decision.action not in _allowed(situation):
                last_error = f"action {decision.action!r} is not allowed for {situation}"
                continue
            self.done.update(i for i in decision.directions_done if 0 <= i < len(self.play.directions))
            self._by = "model"
            return decision
        self._by = "fallback"
        fallback: Action = "stop" if situation == "reply" else ("answer" if situation == "questions" else "approve")
        return ProxyDecision(action=fallback, reason=f"proxy unavailable, default taken: {last_error}")

    async def _ask(self, prompt: str) -> str:
        kwargs: dict[str, Any] = {}
        budget = EFFORT_BUDGET.get(self.config.effort, 0)
        if budget:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        started = time.monotonic()
        self.model_calls += 1
        msg = await asyncio.wait_for(
            self._client_or_new().messages.create(
                model=self.config.api_model, max_tokens=budget + 2048, system=SYSTEM_PROMPT,
                messages=[{"role": "user", "content": prompt}], **kwargs),
            timeout=self.config.attempt_timeout_s)
        record_model_call("user-proxy", self.config.model, getattr(msg, "usage", None), effort=self.config.effort,
                          duration_s=time.monotonic() - started, stop_reason=getattr(msg, "stop_reason", None))
        return "".join(getattr(b, "text", "") for b in msg.content)


# ------------------------------------------------------------------------------------------------
# helpers


def fallback_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """A plain ``approval`` carrying the same yes/no, for a lane that refused the specific answer
    (a denial must never turn into an approval on the retry)."""
    if answer.get("kind") == "approval":
        return answer
    denied = answer.get("kind") in ("domainAccessDeny", "planDeny") or (
        answer.get("kind") == "questions" and all(a.get("skipped") for a in answer.get("answers") or []))
    return {"kind": "approval", "approved": not denied}


def _chosen_in(direction: str, name: str) -> bool:
    """The direction names ``name`` as the one to pick (not only as the one to avoid: "…, not 'Sales Teams'")."""
    text, needle = direction.lower(), name.lower()
    start = text.find(needle)
    while start >= 0:
        before = text[max(0, start - 12):start]
        if not re.search(r"\b(not|never|avoid|instead of)\W*$", before) and "n't" not in before:
            return True
        start = text.find(needle, start + 1)
    return False


def _open_parameters(request: dict[str, Any]) -> list[str]:
    issues = request.get("parameterIssues")
    names = list(issues) if isinstance(issues, dict) else []
    for param in request.get("editableParameters") or []:
        if isinstance(param, dict) and param.get("required") and param.get("name") not in names:
            names.append(str(param["name"]))
    return names


def _dismiss_setup(payload: dict[str, Any]) -> dict[str, Any]:
    """Dismiss the whole card: ``approved: false`` is what ``setup-workflow`` reads as "User skipped
    workflow setup for now" (``workflows.tool.js`` on 2.41.1; a ``setupWorkflowApply`` always
    resumes with ``approved: true``)."""
    return {"kind": "approval", "approved": False}


def questions_body(payload: dict[str, Any], decision: ProxyDecision) -> dict[str, Any]:
    """An ``ask-user`` answer: an option when the proxy's answer names one, else free text."""
    answers = []
    for q in payload.get("questions") or []:
        if not isinstance(q, dict):
            continue
        qid = str(q.get("id", ""))
        options = [str(o) for o in q.get("options") or []]
        if decision.action == "deny":
            answers.append({"questionId": qid, "selectedOptions": [], "skipped": True})
            continue
        said = decision.answers.get(qid) or (decision.text if len(payload.get("questions") or []) == 1 else "") or ""
        picked = [o for o in options if o.lower() == said.strip().lower()] or \
                 [o for o in options if said and o.lower() in said.lower()][:1]
        answer: dict[str, Any] = {"questionId": qid, "selectedOptions": picked}
        if not picked:
            answer["customText"] = said or "Use your best judgement and sensible defaults."
        answers.append(answer)
    return {"kind": "questions", "answers": answers}


def _summary(payload: dict[str, Any]) -> dict[str, Any]:
    keys = ("toolName", "message", "inputType", "introMessage", "questions", "tasks", "planItems", "domainAccess",
            "webSearch", "resourceName", "args")
    out = {k: payload[k] for k in keys if payload.get(k) not in (None, "", [], {})}
    if payload.get("setupRequests"):
        out["setupCards"] = [{"node": (r.get("node") or {}).get("name"), "credentialType": r.get("credentialType"),
                              "existingCredentials": [c.get("name") for c in r.get("existingCredentials") or []],
                              "openParameters": _open_parameters(r)}
                             for r in payload["setupRequests"] if isinstance(r, dict)]
    text = json.dumps(out, default=str)
    return out if len(text) <= MAX_TEXT_CHARS * 3 else {"toolName": payload.get("toolName"), "message": payload.get("message")}


def _view(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the user sees it (messages, questions, what got built)."""
    out: list[dict[str, Any]] = []
    for e in entries:
        kind = e.get("kind")
        if kind == "user":
            out.append({"from": "user", "text": e.get("text", "")})
        elif kind == "assistant":
            out.append({"from": "agent", "text": str(e.get("text", ""))[:MAX_TEXT_CHARS]})
        elif kind == "tool_call":
            out.append({"from": "agent", "tool": e.get("tool")})
        elif kind == "tool_result" and e.get("tool") == "build-workflow":
            raw = e.get("result")
            result: dict[str, Any] = raw if isinstance(raw, dict) else {}
            out.append({"from": "agent", "built": result.get("workflowName") or result.get("workflowId"),
                        "success": result.get("success")})
        elif kind == "confirmation":
            out.append({"from": "agent", "asks": e.get("message") or e.get("input_type"), "questions": e.get("questions")})
        elif kind == "proxy" and e.get("situation") != "reply":
            out.append({"from": "user", "decided": e.get("action"), "text": e.get("text"), "answers": e.get("answers")})
    return out


def conversation_driver(case: EvalCase, config: ProxyConfig | Callable[[], ProxyConfig], transcript: Transcript, *,
                        turns: list[str], approve: Callable[[dict[str, Any]], dict[str, Any]],
                        credential_ids: Mapping[str, list[str]] | None = None,
                        credential_names: Mapping[str, str] | None = None,
                        create_credential: Callable[[str], Awaitable[str | None]] | None = None) -> AutoApprove | UserProxy:
    """:class:`AutoApprove` for a single-prompt case, else a :class:`UserProxy`."""
    if case.is_single_prompt:
        return AutoApprove(turns, approve)
    cfg = config() if callable(config) else config
    return UserProxy(case, cfg, transcript, credential_ids=credential_ids, credential_names=credential_names,
                     approve=approve, create_credential=create_credential)
