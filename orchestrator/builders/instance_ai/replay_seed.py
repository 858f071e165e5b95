"""``seed.mode: "replay"``: rebuild a real conversation's seed from its LangSmith trace at run time.

The case carries only a thread id. This module fetches that thread's runs from LangSmith, rebuilds
the message log, splits it at the last user message (everything before → seed messages, that
message → the live turn), compiles the seed workflow from the build tool's captured source as of
the seed boundary, scrubs it, and returns an :class:`~orchestrator.cases.seed.InlineSeed` (what the
seed restore consumes) plus the live turn's text.

**Where the thread lives.** Reads go to ``seed.endpoint`` (else ``LANGSMITH_ENDPOINT``, else the
public API) with the ambient ``LANGSMITH_API_KEY`` (registered as a secret). The workspace is not
declared: every workspace the key reaches (``GET /api/v1/workspaces``; a key that may not list them
is tried in its default workspace) is asked, through ``x-tenant-id``, for the project
(``GET /api/v1/sessions?name=``) and the thread's root runs (``POST /api/v1/runs/query`` filtered on
``metadata.thread_id``); the first that has them is used and logged as ``[<workspace>/<project>]``.
Nothing is written to LangSmith.

**The trace shape read** (n8n Instance AI's LangSmith tracing, as in 2.41.1's
``@n8n/instance-ai/dist/tracing/langsmith-tracing.js``): one root run per user message named
``turn`` (``inputs.message``), a root ``resume: …`` per continuation after a suspend (same
message), tool runs named ``tool: <toolName>`` (or ``run_type: tool``) with the call's arguments as
``inputs`` and its result as ``outputs`` (``metadata.tool_call_id`` when present), and the
orchestrator's reply on ``agent: orchestrator`` runs' ``outputs``. A tool call seen in a ``turn``
and again in its ``resume`` is kept once, resolved (the copy with an output wins).

**Scrubbing.** Data-table rows are never reconstructed: row payloads in ``data-tables`` tool calls
are replaced by ``[redacted]`` and every row value found is redacted from the restored history
too; data tables the seed workflow references are recreated schema-only. Node credentials are
stripped from the seed workflow, and ``credentials`` keys from tool-call payloads. Scrubbing is not
guaranteed exhaustive: treat a replayed conversation as user data.

**Aged out.** Base-tier traces live ~14 days. When no workspace holds the thread (or it has no
user message), :class:`ReplayUnavailable` says so in one line; the builder reports the unit as a
framework fault, never as the agent's failure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from orchestrator.cases.model import EvalCase, Turn
from orchestrator.cases.seed import InlineSeed, ReplaySeed
from orchestrator.errors import HarnessError
from orchestrator.redact import redact, register_secret

log = logging.getLogger(__name__)

API_KEY_ENV = "LANGSMITH_API_KEY"
ENDPOINT_ENV = "LANGSMITH_ENDPOINT"
DEFAULT_ENDPOINT = "https://api.smith.langchain.com"
PAGE_SIZE = 100
MAX_PAGES = 50
REDACTED = "[redacted]"
BUILD_TOOLS = ("build-workflow", "patch-workflow")
WRITE_TOOLS = ("workspace_write_file",)
_ID_NAMESPACE = uuid.UUID("0b7a4c55-2f56-4f0e-9a53-6f0a4f8b7a11")
_ROW_KEYS = frozenset({"rows", "row", "data", "values", "items"})
_TEXT_KEYS = ("text", "output", "response", "content", "message", "result")


class ReplayUnavailable(HarnessError):
    """The replay seed cannot be resolved (trace aged out, no key, LangSmith refused): one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(redact(message).split()))


@dataclass
class ReplayResolution:
    seed: InlineSeed
    live_turn: str
    workspace: str
    project: str
    thread_id: str


@dataclass
class _Turn:
    """One user message with everything the agent did for it (its ``turn`` and ``resume`` traces)."""

    root_id: str
    message: str
    started: str
    ended: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- LangSmith reads


class LangSmithThreads:
    """The few LangSmith REST reads a replay needs (async httpx; ``x-tenant-id`` per workspace)."""

    def __init__(self, endpoint: str, api_key: str, *, timeout_s: float = 30.0) -> None:
        register_secret(api_key)
        self.endpoint = endpoint.rstrip("/")
        self._client = httpx.AsyncClient(base_url=self.endpoint, timeout=timeout_s,
                                         headers={"x-api-key": api_key, "accept": "application/json"})

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, workspace: str | None, **kwargs: Any) -> httpx.Response:
        headers = {"x-tenant-id": workspace} if workspace else {}
        try:
            return await self._client.request(method, f"/api/v1{path}", headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise ReplayUnavailable(redact(f"LangSmith at {self.endpoint} unreachable: {exc}")) from None

    async def workspaces(self) -> list[tuple[str | None, str]]:
        """``(id, display name)`` of every workspace the key reaches; ``[(None, "default")]`` when
        the key may not list them (it still works in its own workspace)."""
        answer = await self._call("GET", "/workspaces", None)
        if answer.status_code in (401,):
            raise ReplayUnavailable("LangSmith refused LANGSMITH_API_KEY (401)")
        if answer.status_code != 200:
            return [(None, "default")]
        rows = answer.json()
        rows = rows.get("workspaces", []) if isinstance(rows, dict) else rows
        found: list[tuple[str | None, str]] = [
            (str(r["id"]), str(r.get("display_name") or r.get("name") or r["id"]))
            for r in rows if isinstance(r, dict) and r.get("id")]
        return found or [(None, "default")]

    async def project_id(self, workspace: str | None, name: str) -> str | None:
        """The id of the LangSmith project named ``name``, or None when it is not found (or LangSmith
        answers anything but 200)."""
        answer = await self._call("GET", "/sessions", workspace, params={"name": name, "limit": 1})
        if answer.status_code != 200:
            return None
        rows = answer.json()
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and row.get("name") == name and row.get("id"):
                return str(row["id"])
        return None

    async def query_runs(self, workspace: str | None, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Every run matching ``body``, page by page (at most ``MAX_PAGES``). Raises
        :class:`ReplayUnavailable` when LangSmith answers a page with anything but 200."""
        runs: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = {**body, "limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})}
            answer = await self._call("POST", "/runs/query", workspace, json=page)
            if answer.status_code != 200:
                raise ReplayUnavailable(f"LangSmith runs query answered {answer.status_code}")
            data = answer.json()
            runs.extend(r for r in data.get("runs") or [] if isinstance(r, dict))
            cursor = (data.get("cursors") or {}).get("next")
            if not cursor:
                break
        return runs

    async def thread_roots(self, workspace: str | None, project: str, thread_id: str) -> list[dict[str, Any]]:
        """The root runs of thread ``thread_id`` in ``project`` (one per turn of the traced conversation)."""
        flt = f'and(eq(metadata_key, "thread_id"), eq(metadata_value, {json.dumps(thread_id)}))'
        return await self.query_runs(workspace, {"session": [project], "is_root": True, "filter": flt})

    async def trace_runs(self, workspace: str | None, project: str, trace_id: str) -> list[dict[str, Any]]:
        """Every run of trace ``trace_id`` in ``project``."""
        return await self.query_runs(workspace, {"session": [project], "trace": trace_id})


async def fetch_thread(reader: LangSmithThreads, seed: ReplaySeed) -> tuple[str, str, list[dict[str, Any]]]:
    """``(workspace name, project id, every run of the thread)`` from the first workspace holding it."""
    for workspace, label in await reader.workspaces():
        project = await reader.project_id(workspace, seed.project)
        if project is None:
            continue
        roots = await reader.thread_roots(workspace, project, seed.thread_id)
        if not roots:
            continue
        log.info("replay seed %s: [%s/%s]", seed.thread_id, label, seed.project)
        runs: dict[str, dict[str, Any]] = {}
        for root in roots:
            runs[str(root["id"])] = root
            for run in await reader.trace_runs(workspace, project, str(root.get("trace_id") or root["id"])):
                runs.setdefault(str(run["id"]), run)
        return label, project, list(runs.values())
    raise ReplayUnavailable(
        f"replay seed: thread {seed.thread_id} not found in project {seed.project!r} of any LangSmith workspace "
        "this key reaches (traces age out after ~14 days)")


# --------------------------------------------------------------------------- reconstruction


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _metadata(run: dict[str, Any]) -> dict[str, Any]:
    return _dict(_dict(run.get("extra")).get("metadata"))


def _tool_name(run: dict[str, Any]) -> str | None:
    name = str(run.get("name") or "")
    if name.startswith("tool:"):
        return name[len("tool:"):].strip()
    if run.get("run_type") == "tool":
        return str(_metadata(run).get("tool_name") or name)
    return None


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text_of(v) for v in value if not isinstance(v, dict) or v.get("type") in (None, "text"))
    if isinstance(value, dict):
        for key in _TEXT_KEYS:
            if key in value:
                return _text_of(value[key])
    return ""


def _order(run: dict[str, Any]) -> tuple[str, str]:
    return (str(run.get("start_time") or ""), str(run.get("dotted_order") or ""))


def _content_key(block: dict[str, Any]) -> str:
    return json.dumps([block.get("toolName"), block.get("input"), block.get("output")], sort_keys=True, default=str)


def rebuild_turns(runs: list[dict[str, Any]]) -> list[_Turn]:
    """The thread's user turns in order, each with its resolved tool calls and reply text."""
    roots = sorted((r for r in runs if not r.get("parent_run_id")), key=_order)
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_trace.setdefault(str(run.get("trace_id") or run["id"]), []).append(run)
    turns: list[_Turn] = []
    for root in roots:
        name = str(root.get("name") or "")
        inputs = _dict(root.get("inputs"))
        if name == "turn" or (not name.startswith("resume") and isinstance(inputs.get("message"), str)):
            turns.append(_Turn(str(root["id"]), str(inputs.get("message") or ""), str(root.get("start_time") or ""),
                               str(root.get("end_time") or root.get("start_time") or "")))
        elif not turns:
            continue  # a resume before any turn of this thread: its turn aged out first
        turn = turns[-1]
        turn.ended = str(root.get("end_time") or turn.ended)
        seen = {t["toolCallId"]: t for t in turn.tools}
        for run in sorted(by_trace.get(str(root.get("trace_id") or root["id"]), []), key=_order):
            tool = _tool_name(run)
            if tool:
                call_id = str(_metadata(run).get("tool_call_id") or run.get("id"))
                resolved = run.get("outputs") is not None and not run.get("error")
                block = {"type": "tool-call", "toolCallId": call_id, "toolName": tool,
                         "input": run.get("inputs") or {}, "state": "resolved" if resolved else "pending",
                         **({"output": run.get("outputs")} if resolved else {})}
                if call_id in seen:
                    if resolved:
                        seen[call_id].clear()
                        seen[call_id].update(block)
                    continue
                same = _content_key(block)  # a resume re-recording a resolved call under another run id
                if resolved and any(_content_key(t) == same for t in turn.tools):
                    continue
                seen[call_id] = block
                turn.tools.append(block)
            elif str(run.get("name") or "") == "agent: orchestrator":
                text = _text_of(run.get("outputs")).strip()
                if text and text not in turn.texts:
                    turn.texts.append(text)
        turn.tools = [t for t in turn.tools if t.get("state") == "resolved"]
    return [t for t in turns if t.message.strip()]


# --------------------------------------------------------------------------- scrubbing


def _row_values(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _row_values(v, out)
    elif isinstance(value, list):
        for v in value:
            _row_values(v, out)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = str(value).strip()
        if len(text) >= 3:
            out.add(text)


def _scrub_rows(value: Any, found: set[str]) -> Any:
    """Replace row payloads (``rows``/``data``/``values``… under a data-table call) by ``[redacted]``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in _ROW_KEYS and isinstance(item, (list, dict)):
                _row_values(item, found)
                out[key] = REDACTED
            else:
                out[key] = _scrub_rows(item, found)
        return out
    if isinstance(value, list):
        return [_scrub_rows(v, found) for v in value]
    return value


def _strip_credentials(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_credentials(v) for k, v in value.items() if k != "credentials"}
    if isinstance(value, list):
        return [_strip_credentials(v) for v in value]
    return value


def _redact_values(value: Any, values: list[str]) -> Any:
    if not values:
        return value
    if isinstance(value, str):
        for v in values:
            value = value.replace(v, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _redact_values(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_values(v, values) for v in value]
    return value


# --------------------------------------------------------------------------- the seed workflow


SdkCompiler = Callable[[str], dict[str, Any]]


def compile_sdk_code(code: str, *, node_bin: Path | None = None, sdk_cli: Path | None = None) -> dict[str, Any]:
    """Workflow JSON from ``@n8n/workflow-sdk`` code, with the toolchain's own SDK
    (``code-to-json``; import lines are dropped: the SDK parser refuses them)."""
    if node_bin is None or sdk_cli is None:
        from orchestrator.toolchain import Toolchain, default_cache_dir

        chain = Toolchain(default_cache_dir())
        node_bin = node_bin or chain.node_bin
        sdk_cli = sdk_cli or chain.n8n_prefix / "node_modules" / "@n8n" / "workflow-sdk" / "dist" / "cli" / "index.js"
    body = "\n".join(line for line in code.splitlines() if not re.match(r"\s*import\s.+from\s+['\"]", line))
    with tempfile.TemporaryDirectory(prefix="replay-seed-") as tmp:
        source = Path(tmp) / "workflow.ts"
        source.write_text(body, encoding="utf-8")
        done = subprocess.run([str(node_bin), str(sdk_cli), "code-to-json", str(source)], cwd=tmp,
                              capture_output=True, text=True, timeout=60, check=False)
        outputs = [p for p in Path(tmp).glob("*.json")]
        if done.returncode != 0 or len(outputs) != 1:
            first = (done.stderr or done.stdout or "no output").strip().splitlines()[:1]
            raise ReplayUnavailable(redact(f"replay seed: the captured workflow code does not compile: {' '.join(first)}"))
        workflow: dict[str, Any] = json.loads(outputs[0].read_text(encoding="utf-8"))
        return workflow


def _source_of(call: dict[str, Any], files: dict[str, str]) -> Any:
    """The captured workflow source of one build call: JSON, SDK code, or the file it built."""
    for holder in (call.get("input"), call.get("output")):
        if not isinstance(holder, dict):
            continue
        for key in ("workflow", "workflowJson", "sourceCode", "code"):
            if holder.get(key):
                return holder[key]
        path = holder.get("filePath")
        if isinstance(path, str) and path in files:
            return files[path]
    return None


def seed_workflow(turns: list[_Turn], compile_code: SdkCompiler) -> dict[str, Any] | None:
    """The workflow as of the seed boundary: the last successful build call's captured source."""
    files: dict[str, str] = {}
    last: tuple[dict[str, Any], Any] | None = None
    for turn in turns:
        for call in turn.tools:
            args = _dict(call.get("input"))
            if call["toolName"] in WRITE_TOOLS and isinstance(args.get("path") or args.get("filePath"), str):
                files[str(args.get("path") or args.get("filePath"))] = str(args.get("content") or "")
            output = _dict(call.get("output"))
            if call["toolName"] in BUILD_TOOLS and output.get("success") is True and output.get("workflowId"):
                source = _source_of(call, files)
                if source is not None:
                    last = (call, source)
    if last is None:
        return None
    call, source = last
    if isinstance(source, str):
        try:
            parsed = json.loads(source)
        except ValueError:
            parsed = compile_code(source)
        source = parsed
    if isinstance(source, dict) and isinstance(source.get("sourceCode"), dict):  # a ``*.workflow.json`` file
        source = source["sourceCode"]
    if not isinstance(source, dict):
        return None
    output = call["output"]
    return {
        "id": str(output["workflowId"]),
        "name": str(output.get("workflowName") or source.get("name") or "Replayed workflow"),
        "nodes": _strip_credentials(source.get("nodes") or []),
        "connections": source.get("connections") or {},
    }


def _data_tables(turns: list[_Turn], workflow: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Data tables the seed workflow references, schema-only (created in the trace by a tool call)."""
    if workflow is None:
        return []
    body = json.dumps(workflow)
    tables: dict[str, dict[str, Any]] = {}
    for turn in turns:
        for call in turn.tools:
            if call["toolName"] != "data-tables":
                continue
            args = _dict(call.get("input"))
            out = _dict(call.get("output"))
            table = _dict(out.get("dataTable")) or out
            table_id = table.get("id") or out.get("dataTableId")
            name = table.get("name") or args.get("name")
            if isinstance(table_id, str) and len(table_id) >= 8 and name and table_id in body:
                columns = table.get("columns") or args.get("columns") or []
                tables[table_id] = {"id": table_id, "name": str(name),
                                    "columns": [{"name": c.get("name"), "type": c.get("type", "string")}
                                                for c in columns if isinstance(c, dict) and c.get("name")]}
    return list(tables.values())


# --------------------------------------------------------------------------- the seed


def _envelope(thread_id: str, key: str, role: str, created: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": str(uuid.uuid5(_ID_NAMESPACE, f"{thread_id}:{key}")), "role": role, "type": "llm",
            "createdAt": created, "content": content}


def build_seed(thread_id: str, turns: list[_Turn], compile_code: SdkCompiler,
               live_turn_run_id: str | None = None) -> tuple[InlineSeed, str]:
    """The seed (every turn before the live one) and the live turn's text. The live turn is the
    last user message, or the one whose root run is ``live_turn_run_id`` (later turns dropped)."""
    if not turns:
        raise ReplayUnavailable(f"replay seed: thread {thread_id} has no user message left in its trace")
    at = len(turns) - 1
    if live_turn_run_id is not None:
        ids = [t.root_id for t in turns]
        if live_turn_run_id not in ids:
            raise ReplayUnavailable(f"replay seed: thread {thread_id} has no user turn with run id {live_turn_run_id}")
        at = ids.index(live_turn_run_id)
    history, live = turns[:at], turns[at]
    found: set[str] = set()
    messages: list[dict[str, Any]] = []
    for turn in history:
        messages.append(_envelope(thread_id, f"{turn.root_id}:user", "user", turn.started,
                                  [{"type": "text", "text": turn.message}]))
        blocks: list[dict[str, Any]] = []
        for call in turn.tools:
            block = dict(call)
            if block["toolName"] == "data-tables":
                block["input"] = _scrub_rows(block.get("input"), found)
                block["output"] = _scrub_rows(block.get("output"), found)
            blocks.append(_strip_credentials(block))
        blocks += [{"type": "text", "text": t} for t in turn.texts]
        if blocks:
            messages.append(_envelope(thread_id, f"{turn.root_id}:assistant", "assistant", turn.ended, blocks))
    values = sorted(found, key=len, reverse=True)
    messages = _redact_values(messages, values)
    workflow = seed_workflow(history, compile_code)
    seed = InlineSeed.model_validate({
        "mode": "inline",
        "messages": messages,
        "workflows": [workflow] if workflow else [],
        "dataTables": _data_tables(history, workflow),
    })
    return seed, _redact_values(live.message, values)


async def resolve_replay_seed(seed: ReplaySeed, *, env: dict[str, str] | None = None,
                              compile_code: SdkCompiler = compile_sdk_code) -> ReplayResolution:
    """Fetch, rebuild and scrub a replay seed. Raises :class:`ReplayUnavailable` (one line)."""
    source = env if env is not None else os.environ
    api_key = source.get(API_KEY_ENV, "").strip()
    if not api_key:
        raise ReplayUnavailable(f"replay seed: {API_KEY_ENV} is not set (needed to fetch thread {seed.thread_id})")
    endpoint = seed.endpoint or source.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
    reader = LangSmithThreads(endpoint, api_key)
    try:
        workspace, _project_id, runs = await fetch_thread(reader, seed)
    finally:
        await reader.aclose()
    # off the event loop: compiling captured SDK code runs node (~3 s)
    inline, live = await asyncio.to_thread(build_seed, seed.thread_id, rebuild_turns(runs), compile_code,
                                           seed.live_turn_run_id)
    return ReplayResolution(inline, live, workspace, seed.project, seed.thread_id)


def as_inline_case(case: EvalCase, resolution: ReplayResolution) -> EvalCase:
    """The case as a builder drives it: the rebuilt inline seed in place of the replay seed, and
    the conversation ``[<trace live turn>, *authored turns]`` (authored turns become follow-ups)."""
    live = Turn(role="user", text=resolution.live_turn)
    return case.model_copy(update={"seed": resolution.seed, "conversation": [live, *case.conversation]})


async def materialize_replay(case: EvalCase, *, env: dict[str, str] | None = None,
                             compile_code: SdkCompiler = compile_sdk_code) -> EvalCase:
    """A replay-seeded case resolved into an inline-seeded one (other cases are returned as they are).
    Raises :class:`ReplayUnavailable` (one line: a framework fault, never the builder's)."""
    if not isinstance(case.seed, ReplaySeed):
        return case
    return as_inline_case(case, await resolve_replay_seed(case.seed, env=env, compile_code=compile_code))
