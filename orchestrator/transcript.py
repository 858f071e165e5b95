"""Build transcripts: one redacted JSONL file per unit, the same shape for every builder.

Every line is one entry ``{"seq", "t", "kind", …}`` (``t`` = seconds since the build started):

==================  ===============================================================================
``meta``            first line: builder, case, iteration, attempt, model
``user``            a user turn sent to the builder (``text``, ``turn``)
``assistant``       assistant text (``text``, ``agent``)
``tool_call``       ``tool``, ``call_id``, ``args``, ``agent``
``tool_result``     ``tool``, ``call_id``, ``result``, ``agent``
``tool_error``      ``tool``, ``call_id``, ``error``
``confirmation``    the agent asked for approval/answers (``request_id``, ``tool``, ``input_type``, …)
``answer``          what the harness answered (``request_id``, ``answer``)
``proxy``           a user-proxy decision (multi-turn cases): ``situation``, ``action``, ``text``,
                    ``answers``, ``reason``, ``by`` (``model`` | ``rule`` | ``fallback``), ``budget_left``
``agent``           a sub-agent was spawned (``role``, ``agent_kind``, ``target``)
``error``           an error the run reported (``message``, ``status``)
``run``             a run (one user turn) finished (``status``, ``reason``)
==================  ===============================================================================

Instance AI builds write it from the chat's event stream; ``mcp`` builds from claude's
``stream-json`` (assistant text, ``tool_use``, ``tool_result``). Every string passes through
:func:`orchestrator.redact.redact_obj`, values under credential-like keys are masked, and long
strings are cut (tool results can be ~100 kB). Process expectations are judged on
:func:`render_for_judge` of this file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.redact import MASK, redact_obj

MAX_STRING_CHARS = 8_000
_SECRET_KEYS = re.compile(r"(pass(word)?|secret|token|api[-_]?key|authorization|cookie|private[-_]?key)$", re.I)


def scrub(value: Any, *, limit: int = MAX_STRING_CHARS) -> Any:
    """Redact registered secrets, mask credential-like keys, cut long strings."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and _SECRET_KEYS.search(key) and isinstance(item, str) and item:
                out[key] = MASK
            else:
                out[key] = scrub(item, limit=limit)
        return out
    if isinstance(value, (list, tuple)):
        return [scrub(v, limit=limit) for v in value]
    if isinstance(value, str):
        text = redact_obj(value)
        return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"
    return value


class Transcript:
    """Append-only JSONL writer (mode 0600). ``path=None`` keeps entries in memory only."""

    def __init__(self, path: Path | None, *, builder: str, **meta: Any) -> None:
        self.path = path
        self.entries: list[dict[str, Any]] = []
        self._t0 = time.monotonic()
        self._fh = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            self._fh = os.fdopen(fd, "w", encoding="utf-8")
        self.add("meta", builder=builder, **meta)

    def add(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one entry of ``kind`` (fields scrubbed, None values dropped), stamped with its sequence
        number and seconds since the transcript opened, and flush it to the file; returns the entry."""
        entry = {"seq": len(self.entries), "t": round(time.monotonic() - self._t0, 3), "kind": kind}
        entry.update(scrub({k: v for k, v in fields.items() if v is not None}))
        self.entries.append(entry)
        if self._fh is not None:
            self._fh.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
            self._fh.flush()
        return entry

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- convenience -----------------------------------------------------------------------------

    def user(self, text: str, turn: int) -> None:
        """Record a user message of turn ``turn``."""
        self.add("user", text=text, turn=turn)

    def has_agent_output(self) -> bool:
        """Anything the agent said or did (a transcript with none has nothing to grade)."""
        return any(e["kind"] in ("assistant", "tool_call", "confirmation") for e in self.entries)


def transcript_path_for(request: Any, run_dir: Path) -> Path:
    """Where a build writes its transcript: ``request.transcript_path`` when the run chose one
    (``UnitSettings.transcripts_dir``), else ``<run dir>/transcripts/<case digest>.<iteration>.<attempt>.jsonl``
    so a unit always keeps one (the case has no slug of its own inside a build request)."""
    if request.transcript_path is not None:
        return Path(request.transcript_path)
    body = json.dumps(request.case.to_json(), sort_keys=True, default=str)
    digest = hashlib.sha1(body.encode()).hexdigest()[:12]
    return Path(run_dir) / "transcripts" / f"{digest}.{request.iteration}.{request.attempt}.jsonl"


def run_debug_path(transcript: Path) -> Path:
    """Where a build's captured run debug lives: beside its transcript."""
    return transcript.with_name(transcript.name.removesuffix(".jsonl") + ".run-debug.json")


def write_run_debug(transcript: Path, runs: list[dict[str, Any]]) -> Path | None:
    """Keep the build's captured run debug (redacted) beside its transcript; None when the disk refused."""
    path = run_debug_path(transcript)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(redact_obj(runs), ensure_ascii=False), encoding="utf-8")
    except OSError:
        return None
    return path


def read_transcript(path: Path | None) -> list[dict[str, Any]]:
    """The entries of a transcript file ([] when there is none); broken lines are skipped."""
    if path is None or not path.is_file():
        return []
    entries = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


def gradable(entries: list[dict[str, Any]]) -> bool:
    """Whether a transcript shows the agent doing anything (text, a tool call or a confirmation) to grade."""
    return any(e.get("kind") in ("assistant", "tool_call", "confirmation") for e in entries)


#: Instance AI's root agent: its event-stream agent ids start so (sub-agents have their own ids).
ROOT_AGENT_PREFIX = "orchestrator"


def final_narration(entries: list[dict[str, Any]]) -> str | None:
    """What the builder told the user it did: the assistant text of its last turn (after the last
    user turn), from the root agent when sub-agents spoke too. None when it said nothing.

    For Instance AI this is the chat's reply; the ``mcp`` builder passes claude's final ``result``
    text instead (the same words, without the stream's intermediate messages)."""
    start = max((i for i, e in enumerate(entries) if e.get("kind") == "user"), default=-1) + 1
    said = [e for e in entries[start:] if e.get("kind") == "assistant" and str(e.get("text") or "").strip()]
    root = [e for e in said if str(e.get("agent") or "").startswith(ROOT_AGENT_PREFIX)]
    texts = [str(e["text"]).strip() for e in (root or said)]
    return "\n\n".join(texts) or None


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + " …"


def turn_run_ids(entries: Iterable[dict[str, Any]]) -> dict[int, list[str]]:
    """The runs each user turn spans (every resume of a turn is a run of its own), by turn number."""
    turns: dict[int, list[str]] = {}
    current: int | None = None
    for e in entries:
        if e.get("kind") == "user" and isinstance(e.get("turn"), int):
            current = int(e["turn"])
            turns.setdefault(current, [])
        elif e.get("kind") == "run" and current is not None and e.get("run_id"):
            turns[current].append(str(e["run_id"]))
    return turns


def render_for_judge(entries: Iterable[dict[str, Any]], *, limit: int = 60_000, item_limit: int = 1_500,
                     turn_headers: dict[int, str] | None = None) -> str:
    """The conversation as plain text for the process-expectation judge; ``turn_headers``: a line to
    open each user turn with (its token figures, from the build's run debug)."""
    lines: list[str] = []
    for e in entries:
        kind = e.get("kind")
        if kind == "user":
            header = (turn_headers or {}).get(e["turn"]) if isinstance(e.get("turn"), int) else None
            if header:
                lines.append(header)
            lines.append(f"[user, turn {e.get('turn', '?')}] {e.get('text', '')}")
        elif kind == "assistant":
            lines.append(f"[assistant] {e.get('text', '')}")
        elif kind == "seeded":
            lines.append(f"[seeded prior context, {e.get('role', '?')}] {e.get('text', '')}")
        elif kind == "tool_call":
            lines.append(f"[tool call {e.get('tool')}] {_short(e.get('args', {}), item_limit)}")
        elif kind == "tool_result":
            lines.append(f"[tool result {e.get('tool')}] {_short(e.get('result'), item_limit)}")
        elif kind == "tool_error":
            lines.append(f"[tool error {e.get('tool')}] {_short(e.get('error'), item_limit)}")
        elif kind == "confirmation":
            what = e.get("message") or e.get("input_type") or "approval"
            questions = e.get("questions")
            extra = f" questions: {_short(questions, item_limit)}" if questions else ""
            lines.append(f"[agent asks the user ({e.get('tool')})] {what}{extra}")
        elif kind == "answer":
            lines.append(f"[user answers] {_short(e.get('answer'), item_limit)}")
        elif kind == "agent":
            lines.append(f"[sub-agent spawned] {e.get('role', '')} ({e.get('agent_kind', '')})")
        elif kind == "error":
            lines.append(f"[error] {e.get('message', '')}")
        elif kind == "run":
            lines.append(f"[run finished: {e.get('status')}]")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit // 2] + "\n… (transcript cut) …\n" + text[-limit // 2 :]


# ------------------------------------------------------------------------------------------------
# claude stream-json → transcript entries (the mcp builder)


class ClaudeStreamTranscript:
    """Feeds claude's ``stream-json`` events into a :class:`Transcript` (an ``on_event`` sink)."""

    def __init__(self, transcript: Transcript) -> None:
        self.transcript = transcript
        self._tools: dict[str, str] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        message = event.get("message") if isinstance(event.get("message"), dict) else None
        if kind == "assistant" and message:
            for block in message.get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and block.get("text"):
                    self.transcript.add("assistant", text=block["text"], agent="claude")
                elif block.get("type") == "tool_use":
                    call_id = str(block.get("id", ""))
                    self._tools[call_id] = str(block.get("name", ""))
                    self.transcript.add("tool_call", tool=block.get("name"), call_id=call_id,
                                        args=block.get("input") or {}, agent="claude")
        elif kind == "user" and message:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    call_id = str(block.get("tool_use_id", ""))
                    result = block.get("content")
                    if isinstance(result, list):
                        result = "\n".join(str(b.get("text", "")) for b in result if isinstance(b, dict))
                    entry_kind = "tool_error" if block.get("is_error") else "tool_result"
                    field = "error" if block.get("is_error") else "result"
                    self.transcript.add(entry_kind, tool=self._tools.get(call_id), call_id=call_id,
                                        **{field: result}, agent="claude")
        elif kind == "result":
            if event.get("is_error"):
                self.transcript.add("error", message=str(event.get("result") or event.get("subtype") or "error"),
                                    status=event.get("api_error_status"))
            self.transcript.add("run", status="error" if event.get("is_error") else "completed",
                                reason=event.get("subtype"), turns=event.get("num_turns"))
