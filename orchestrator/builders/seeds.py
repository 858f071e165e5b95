"""Inline seeds restored into an Instance AI build thread (``POST /rest/instance-ai/eval/restore-thread``).

Two halves:

* :func:`plan_restore` — pure: an :class:`~orchestrator.cases.InlineSeed` becomes the restore body
  for n8n 2.41.1 (``InstanceAiEvalRestoreThreadRequest``), with every rule of the reference applied:

  - **messages** are full envelopes; ``{role, text}`` shorthand was expanded by the case model on
    the fixed ascending past slots, and the whole sequence is restamped onto those slots when the
    stamps do not ascend or one sits in the future (checked again here against ``now``). Each
    message gets a fresh id per restore (n8n stores messages under a global primary key and
    *upserts* on it, so two restores of one case would otherwise steal each other's rows). A
    ``custom`` message is stored as authored, its payload moved from ``content`` to ``data`` (where
    2.41.1 reads it; a non-list ``content`` there fails the agent's run);
  - **workflows** get fresh ids and the per-restore unique name ``<name> [seed <8 hex>]``; node
    credentials are stripped; every old id is remapped through the whole history (message content,
    tool-call args and outputs — a seeded ``build-workflow`` call's ``output.workflowId`` included —,
    agent configs, attachments). Mentions of a seeded workflow's name follow it to the unique name
    (the reference's ``remapSeedArtifactIds``, ``harness/conversation-seed.ts``): in the history's
    prose (``text`` blocks, one pass, longest name first, so "Order" never eats "Order Sync") and
    in any ``workflowName`` field, and an agent's workflow tool target (exact) — never inside
    nodes or recorded tool payloads, where a short name could hit a node; two seed workflows of
    one name are refused (a mention could not tell them apart);
  - **data tables** schema-only: ``{id, name, columns}``, never ``rows``; string row values are
    redacted out of the restored history. n8n generates a table's id, so tables are restored in a
    first call and the returned ids remapped through the rest (:meth:`RestorePlan.with_data_tables`);
  - **folders** parents first, verbatim names; n8n generates their ids and maps the seed ids itself,
    so a ``parentFolderId`` keeps the seed folder id;
  - **agents** under fresh ids (n8n creates an agent at the id given);
  - **projects**: 2.41.1's restore body has no ``projects`` key — a seed declaring one is refused
    (:class:`SeedUnsupported`) rather than run without it;
  - **priorRuns** are run after the restore through ``/eval/execute-with-llm-mock`` (sequential,
    120 s each), on the restored workflow.

* :func:`restore` / :func:`cleanup` — the lane side: evict leftovers of earlier runs, record what
  will be created in the ledger before the request, restore, run prior runs; later delete the
  seeded workflows, data tables, agents and root folders (in :func:`orchestrator.deletion.in_delete_order`).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import string
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestrator.cases import EvalCase
from orchestrator.cases.model import Attachment
from orchestrator.cases.seed import InlineSeed, SeedFolder, seed_slot
from orchestrator.deletion import delete_one, in_delete_order
from orchestrator.domain import CleanupFailure, ResourceKind
from orchestrator.errors import HarnessError
from orchestrator.ledger import Ledger
from orchestrator.n8n.errors import N8nError, N8nHTTPError, N8nNotFound
from orchestrator.n8n.instance_ai import InstanceAiChat
from orchestrator.n8n.mock_execution import EVAL_SCENARIO_HINTS_MAX
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact

log = logging.getLogger(__name__)

SEED_SUFFIX = re.compile(r" \[seed [0-9a-f]{8}\]$")
PRIOR_RUN_TIMEOUT_MS = 120_000
REDACTED = "[redacted]"
NAME_MAX = 255
_ALNUM = string.ascii_letters + string.digits
_MESSAGE_NS = uuid.UUID("6f1d0c52-3b7e-4d8a-9a43-5e0c2f9b7d11")


class SeedUnsupported(HarnessError):
    """The seed asks for something n8n 2.41.1 cannot restore (the unit is a framework fault)."""


class SeedRestoreFailed(HarnessError):
    """The restore answered, but not with what the seed needs (the unit is a framework fault)."""


def new_artifact_id() -> str:
    """A fresh id shaped like n8n's own (16 alphanumerics)."""
    return "".join(secrets.choice(_ALNUM) for _ in range(16))


def seed_name(name: str, nonce: str) -> str:
    """``name`` tagged with the seed's nonce (``<name> [seed <nonce>]``), cut so it fits n8n's limit."""
    suffix = f" [seed {nonce}]"
    return name[: NAME_MAX - len(suffix)] + suffix


def base_name(name: str) -> str | None:
    """``"X [seed 0a1b2c3d]"`` → ``"X"``; None for a name without the seed suffix."""
    match = SEED_SUFFIX.search(name)
    return name[: match.start()] if match else None


# ------------------------------------------------------------------------------------------------
# JSON rewriting


def remap_ids(value: Any, id_map: dict[str, str]) -> Any:
    """Every occurrence of an old id (as a substring of any string, longest first) → its new id."""
    if not id_map:
        return value
    text = json.dumps(value)
    for old, new in sorted(id_map.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(old, new)
    return json.loads(text)


def mention_rewriter(names: dict[str, str]) -> Callable[[str], str]:
    """One regex pass over a string, longest original name first; a replacement is never rescanned."""
    if not names:
        return lambda text: text
    pattern = re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))
    return lambda text: pattern.sub(lambda m: names.get(m.group(0), m.group(0)), text)


def rename_workflow_name_fields(value: Any, fn: Callable[[str], str]) -> Any:
    """Values under a key named ``workflowName`` (a field that by definition holds one), anywhere."""
    if isinstance(value, list):
        return [rename_workflow_name_fields(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: fn(v) if k == "workflowName" and isinstance(v, str) else rename_workflow_name_fields(v, fn)
                for k, v in value.items()}
    return value


def rename_mentions(message: dict[str, Any], fn: Callable[[str], str]) -> dict[str, Any]:
    """Workflow-name mentions in one seeded message: its prose (``text`` blocks) and ``workflowName``
    fields; nothing else."""
    named: dict[str, Any] = rename_workflow_name_fields(message, fn)  # a dict in, a dict out
    content = named.get("content")
    if isinstance(content, list):
        named["content"] = [{**b, "text": fn(b["text"])} if isinstance(b, dict) and b.get("type") == "text"
                            and isinstance(b.get("text"), str) else b for b in content]
    return named


def rename_agent_workflow_tools(config: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """An agent's workflow tool addresses its workflow by display name: exact lookup."""
    tools = config.get("tools")
    if not isinstance(tools, list):
        return config
    return {**config, "tools": [{**t, "workflow": names[t["workflow"]]} if isinstance(t, dict) and t.get("type") == "workflow"
                                and t.get("workflow") in names else t for t in tools]}


def redact_values(value: Any, secrets_: Iterable[str]) -> Any:
    """Every occurrence of one of ``secrets_`` inside any JSON string → ``[redacted]``."""
    words = sorted({s for s in secrets_ if len(s) >= 2}, key=len, reverse=True)
    if not words:
        return value
    pattern = re.compile("|".join(re.escape(w) for w in words))

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str):
            return pattern.sub(REDACTED, v)
        return v

    return walk(value)


def strip_credentials(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes without their ``credentials`` (the thread's credential pin owns the credential view)."""
    return [{k: v for k, v in node.items() if k != "credentials"} for node in nodes]


def row_values(seed: InlineSeed) -> list[str]:
    """String values of every authored data-table row (never restored; redacted from history)."""
    out: list[str] = []
    for table in seed.data_tables:
        for row in getattr(table, "rows", None) or (table.model_extra or {}).get("rows") or []:
            if isinstance(row, dict):
                out.extend(v for v in row.values() if isinstance(v, str))
    return out


# ------------------------------------------------------------------------------------------------
# messages


def _stamp(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def stamps_need_restamp(stamps: list[datetime], now: datetime) -> bool:
    """Whether seeded messages' timestamps must be rewritten: not strictly ascending, or some in the
    future."""
    ascending = all(a < b for a, b in zip(stamps, stamps[1:], strict=False))
    return not ascending or any(s > now for s in stamps)


def restamped(stamps: list[datetime], now: datetime) -> list[datetime]:
    """The authored stamps, or — when they do not ascend or one is in the future — every message on
    the fixed slots (array order kept; never one entry alone)."""
    return [seed_slot(i) for i in range(len(stamps))] if stamps_need_restamp(stamps, now) else list(stamps)


def message_envelopes(seed: InlineSeed, nonce: str, now: datetime) -> list[dict[str, Any]]:
    """The seed's messages as n8n stores them: ids unique to this restore (from ``nonce``), timestamps
    ascending and in the past, a custom message's payload under ``data``."""
    stamps = restamped([m.created_at for m in seed.messages], now)
    out = []
    for message, stamp in zip(seed.messages, stamps, strict=True):
        body = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        body["id"] = str(uuid.uuid5(_MESSAGE_NS, f"{nonce}:{message.id}"))
        body["createdAt"] = _stamp(stamp)
        if message.type == "custom" and "content" in body:
            # 2.41.1 stores a custom message's payload under ``data`` and skips a message without
            # ``content`` when it walks content blocks (an object there fails the run)
            content = body.pop("content")
            body.setdefault("data", content if isinstance(content, dict) else {"content": content})
        out.append(body)
    return out


# ------------------------------------------------------------------------------------------------
# the plan


def folders_parents_first(folders: list[SeedFolder]) -> list[SeedFolder]:
    """Folders ordered so that every parent precedes its children (declared order otherwise)."""
    pending, done, out = list(folders), set(), []
    while pending:
        index = next((i for i, f in enumerate(pending) if f.parent_folder_id is None or f.parent_folder_id in done), None)
        if index is None:  # a cycle the case model would have refused; keep the rest as declared
            out.extend(pending)
            break
        folder = pending.pop(index)
        done.add(folder.id)
        out.append(folder)
    return out


@dataclass
class RestorePlan:
    """What one restore sends; ids are this restore's, names carry its ``[seed <nonce>]``."""

    nonce: str
    workflow_ids: dict[str, str]  # seed id → lane id
    workflow_names: dict[str, str]  # seed id → lane name
    agent_ids: dict[str, str]
    base_names: list[str]  # seed workflow names (for eviction)
    root_folder_names: list[str]
    folders: list[dict[str, Any]]
    data_tables: list[dict[str, Any]]
    workflows: list[dict[str, Any]]
    agents: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    prior_runs: list[tuple[str, str]]  # (lane workflow id, hints)
    agent_names: dict[str, str] = field(default_factory=dict)

    @property
    def id_map(self) -> dict[str, str]:
        """Seed id -> lane id of every restored workflow and agent (to rewrite references in prompts)."""
        return {**self.workflow_ids, **self.agent_ids}

    def data_tables_body(self, thread_id: str) -> dict[str, Any]:
        """The request body that creates the seed's data tables for ``thread_id`` (names made unique)."""
        return {"threadId": thread_id, "messages": [], "dataTables": self.data_tables, "uniquifyNames": True}

    def body(self, thread_id: str) -> dict[str, Any]:
        """The restore body (data tables go in their own first call: see :meth:`with_data_tables`)."""
        body: dict[str, Any] = {"threadId": thread_id, "messages": self.messages}
        if self.folders:
            body["folders"] = self.folders
        if self.workflows:
            body["workflows"] = self.workflows
        if self.agents:
            body["agents"] = self.agents
        return body

    def with_data_tables(self, table_ids: dict[str, str]) -> None:
        """Remap the seed data-table ids to the ones n8n generated, through workflows, agents and history."""
        self.workflows = remap_ids(self.workflows, table_ids)
        self.agents = remap_ids(self.agents, table_ids)
        self.messages = remap_ids(self.messages, table_ids)

    def attachment(self, attach: Attachment, project_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The opening turn's ``attachments`` (and ``context`` for a setup-panel Execute hand-off),
        as the editor sends them, with this restore's ids."""
        if attach.workflow is not None:
            wf = self.workflow_ids[attach.workflow]
            item: dict[str, Any] = {"type": "workflow", "id": wf, "name": self.workflow_names[attach.workflow]}
            context = {"source": "setup-panel-execute", "workflowId": wf} if attach.source == "setup-panel-execute" else None
            return [item], context
        agent = self.agent_ids[attach.ref]
        item = {"type": "agent", "id": agent, "projectId": project_id}
        if attach.ref in self.agent_names:
            item["name"] = self.agent_names[attach.ref]
        return [item], None


def plan_restore(seed: InlineSeed, *, nonce: str | None = None, now: datetime | None = None,
                 new_id: Callable[[], str] = new_artifact_id) -> RestorePlan:
    """The pure restore plan of an inline seed (see the module doc for every rule)."""
    if seed.projects:
        raise SeedUnsupported("seed.projects cannot be restored on n8n 2.41.1 (its /eval/restore-thread "
                              "body has no `projects` key)")
    nonce = nonce or secrets.token_hex(4)
    now = now or datetime.now(UTC)
    declared = [w.name for w in seed.workflows]
    twice = next((n for i, n in enumerate(declared) if n in declared[:i]), None)
    if twice is not None:
        raise SeedUnsupported(f'the seed declares two workflows named "{twice}": a mention in the history could not '
                              "tell them apart once the names are made unique")
    workflow_ids = {w.id: new_id() for w in seed.workflows}
    workflow_names = {w.id: seed_name(w.name, nonce) for w in seed.workflows}
    agent_ids = {a.id: new_id() for a in seed.agents}
    names = {w.name: workflow_names[w.id] for w in seed.workflows}
    id_map = {**workflow_ids, **agent_ids}
    hidden = row_values(seed)

    mentions = mention_rewriter(names)

    workflows = []
    for w in seed.workflows:
        body: dict[str, Any] = {"id": workflow_ids[w.id], "name": workflow_names[w.id],
                                "nodes": remap_ids(strip_credentials(w.nodes), id_map),
                                "connections": remap_ids(w.connections, id_map)}
        if w.parent_folder_id is not None:
            body["parentFolderId"] = w.parent_folder_id
        extra = w.model_extra or {}
        if extra.get("published") is True:
            body["published"] = True
        workflows.append(body)
    folders = []
    for f in folders_parents_first(seed.folders):
        item: dict[str, Any] = {"id": f.id, "name": f.name}
        if f.parent_folder_id is not None:
            item["parentFolderId"] = f.parent_folder_id
        folders.append(item)
    tables = [{"id": t.id, "name": t.name, "columns": [{"name": c.get("name"), "type": c.get("type")} for c in t.columns]}
              for t in seed.data_tables]
    agents = []
    for a in seed.agents:
        raw = a.model_dump(mode="json", by_alias=True, exclude_none=True)
        raw["id"] = agent_ids[a.id]
        raw["config"] = redact_values(rename_agent_workflow_tools(remap_ids(raw["config"], id_map), names), hidden)
        agents.append(raw)
    messages = [redact_values(rename_mentions(m, mentions), hidden)
                for m in remap_ids(message_envelopes(seed, nonce, now), id_map)]
    return RestorePlan(
        nonce=nonce, workflow_ids=workflow_ids, workflow_names=workflow_names, agent_ids=agent_ids,
        base_names=[w.name for w in seed.workflows],
        root_folder_names=[f.name for f in seed.folders if f.parent_folder_id is None],
        folders=folders, data_tables=tables, workflows=workflows, agents=agents, messages=messages,
        prior_runs=[(workflow_ids[r.workflow], r.hints or "") for r in seed.prior_runs],
        agent_names={a.id: a.config.name for a in seed.agents},
    )


def message_text(message: dict[str, Any]) -> str:
    """A stored message's text: its string content, or its text blocks joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


# ------------------------------------------------------------------------------------------------
# eviction (pure selection)


def leftover_workflows(rows: Iterable[dict[str, Any]], base_names: Iterable[str], keep: set[str]) -> list[str]:
    """Ids of workflows named ``<base> [seed xxxxxxxx]`` for one of ``base_names``, not in ``keep``
    (what this run itself created and still uses). Names without the suffix are never touched."""
    bases = set(base_names)
    return [str(r["id"]) for r in rows
            if str(r.get("id")) not in keep and base_name(str(r.get("name") or "")) in bases]


def leftover_root_folders(rows: Iterable[dict[str, Any]], names: Iterable[str], keep: set[str]) -> list[str]:
    """Ids of ROOT folders whose name is one of ``names`` (verbatim), not in ``keep``."""
    wanted = set(names)
    out = []
    for r in rows:
        parent = r.get("parentFolderId", r.get("parentFolder"))
        if parent not in (None, "", "0") or str(r.get("id")) in keep:
            continue
        if r.get("name") in wanted:
            out.append(str(r["id"]))
    return out


# ------------------------------------------------------------------------------------------------
# the lane side


@dataclass
class SeedRestore:
    """What one build restored (kept by the builder on its attempt; ``workflow_ids`` are the lane ids
    of the seeded workflows, which leak detection treats as the build's own)."""

    plan: RestorePlan
    thread_id: str
    workflow_ids: set[str] = field(default_factory=set)
    agent_ids: set[str] = field(default_factory=set)
    folder_ids: list[str] = field(default_factory=list)
    data_table_ids: list[str] = field(default_factory=list)
    restored_messages: int = 0
    prior_run_executions: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)


class SeedDeleter:
    """Deletes seeded artifacts of one project (folders and tables are addressed through it)."""

    def __init__(self, session: N8nSession, project_id: str) -> None:
        self.session = session
        self.project_id = project_id

    async def delete_workflow(self, workflow_id: str) -> bool:
        """Delete the workflow; False when it was already gone."""
        return await self.session.delete_workflow(workflow_id)

    async def delete_folder(self, folder_id: str) -> bool:
        """Delete the folder; False when it was already gone."""
        path = f"/rest/projects/{self.project_id}/folders/{folder_id}"
        done = await self.session._gone_ok(lambda: self.session.call("DELETE", path, safe=True))
        return done is not None

    async def delete_data_table(self, table_id: str) -> bool:
        """Delete the data table; False when it was already gone."""
        path = f"/rest/projects/{self.project_id}/data-tables/{table_id}"
        done = await self.session._gone_ok(lambda: self.session.call("DELETE", path, safe=True))
        return done is not None

    async def delete_agent(self, agent_id: str) -> bool:
        """Delete the agent; False when it was already gone."""
        path = f"/rest/projects/{self.project_id}/agents/v2/{agent_id}"
        done = await self.session._gone_ok(lambda: self.session.call("DELETE", path, safe=True))
        return done is not None

    async def delete_credential(self, credential_id: str) -> bool:
        """Delete the credential; False when it was already gone."""
        return await self.session.delete_credential(credential_id)

    async def delete_user(self, user_id: str, transfer_to_project_id: str | None = None) -> bool:
        return await self.session.delete_user(user_id, transfer_to_project_id)

    async def delete_thread(self, thread_id: str) -> bool:
        return await self.session.delete_thread(thread_id)


PROJECT_SCOPED = frozenset({ResourceKind.folder.value, ResourceKind.data_table.value, ResourceKind.agent.value})


def deleter_for(session: N8nSession, kind: str, meta: dict[str, Any]) -> Any:
    """The deleter for one ledger entry: folders, data tables and agents are addressed through
    their project (``meta["project"]``); everything else through the session itself."""
    project = meta.get("project")
    if kind in PROJECT_SCOPED and isinstance(project, str) and project:
        return SeedDeleter(session, project)
    return session


async def list_root_folders(session: N8nSession, project_id: str) -> list[dict[str, Any]]:
    """The folders at the root of ``project_id`` (the first 500)."""
    params = {"filter": json.dumps({"parentFolderId": "0"}), "take": 500}
    data = await session.get(f"/rest/projects/{project_id}/folders", params=params)
    rows = data.get("data") if isinstance(data, dict) else data
    return [r for r in rows or [] if isinstance(r, dict)]


async def evict_leftovers(owner: N8nSession, project_id: str, plan: RestorePlan, ledger: Ledger, lane: str) -> list[str]:
    """Delete leftovers of earlier runs: seed-suffixed workflows with a seeded base name and root
    folders named like a seeded root folder (with their contents), anywhere on the lane — every
    build has its own project, so a crashed run's leftovers sit in another one. What this run has
    open in its ledger (a sibling iteration's live seed) is never touched."""
    keep = {e.id for e in ledger.open_entries() if e.lane == lane}
    evicted: list[str] = []
    if plan.base_names:
        rows = await owner.list_workflows()
        for wf in leftover_workflows(rows, plan.base_names, keep):
            if await owner.delete_workflow(wf):
                evicted.append(f"workflow {wf}")
    if plan.root_folder_names:
        for project in await _projects(owner, project_id):
            deleter = SeedDeleter(owner, project)
            try:
                folders = await list_root_folders(owner, project)
            except N8nNotFound:  # another build's member was deleted since the listing, its project with it
                continue
            for folder in leftover_root_folders(folders, plan.root_folder_names, keep):
                await _delete_folder_contents(owner, project, folder)
                if await deleter.delete_folder(folder):
                    evicted.append(f"folder {folder}")
    for item in evicted:
        log.info("%s: evicted seed leftover %s", lane, item)
    return evicted


async def _projects(owner: N8nSession, project_id: str) -> list[str]:
    """Every project on the lane (the owner sees all; each build has its own member's project, so a
    crashed run's folder lives in another one), the thread's first."""
    try:
        data = await owner.get("/rest/projects")
    except N8nError:
        return [project_id]
    rows = data.get("data") if isinstance(data, dict) else data
    others = [str(r["id"]) for r in rows or [] if isinstance(r, dict) and r.get("id") and str(r["id"]) != project_id]
    return [project_id, *others]


async def _delete_folder_contents(owner: N8nSession, project_id: str, folder_id: str) -> None:
    """A folder delete archives what it holds into the root: delete its workflows first."""
    params = {"filter": json.dumps({"projectId": project_id, "parentFolderId": folder_id}), "includeFolders": "false"}
    try:
        data = await owner.get("/rest/workflows", params=params)
    except N8nError:
        return
    rows = data.get("data") if isinstance(data, dict) else data
    for row in rows or []:
        if isinstance(row, dict) and row.get("resource", "workflow") == "workflow" and row.get("id"):
            await owner.delete_workflow(str(row["id"]))


async def restore(owner: N8nSession, project_id: str, thread_id: str, plan: RestorePlan, ledger: Ledger,
                  *, lane: str, user: str) -> SeedRestore:
    """Evict leftovers, restore the seed into the thread, run its prior runs. Everything is in the
    ledger before it is used (ids chosen here before the request; ids n8n chose as soon as known).
    Raises :class:`N8nError` / :class:`SeedRestoreFailed` when the restore cannot be done."""
    result = SeedRestore(plan, thread_id)
    # an earlier attempt of this build (a provider-outage retry) restored into its own thread: its
    # copies go first, or the agent would find two "X [seed …]" workflows
    failures = await cleanup(ledger, owner, project_id, lane=lane, user=user)
    if failures:
        raise SeedRestoreFailed(f"an earlier attempt's seed could not be removed: {failures[0]}")
    result.evicted = await evict_leftovers(owner, project_id, plan, ledger, lane)
    chat = InstanceAiChat(owner)
    meta = {"user": user, "project": project_id, "seed": plan.nonce}
    for wf in plan.workflow_ids.values():
        ledger.created("workflow", wf, lane=lane, source="seed", **meta)
    for agent in plan.agent_ids.values():
        ledger.created("agent", agent, lane=lane, source="seed", **meta)
    if plan.data_tables:
        answer = await chat.restore_thread(plan.data_tables_body(thread_id))
        new_ids = [str(x) for x in answer.get("dataTableIds") or []]
        for table in new_ids:
            ledger.created("data_table", table, lane=lane, **meta)
        result.data_table_ids = new_ids
        if len(new_ids) != len(plan.data_tables):
            raise SeedRestoreFailed(f"restore created {len(new_ids)} of {len(plan.data_tables)} data tables")
        plan.with_data_tables({t["id"]: new for t, new in zip(plan.data_tables, new_ids, strict=True)})
    answer = await chat.restore_thread(plan.body(thread_id))
    for folder in answer.get("folderIds") or []:
        ledger.created("folder", str(folder), lane=lane, **meta)
        result.folder_ids.append(str(folder))
    result.workflow_ids = set(plan.workflow_ids.values())
    result.agent_ids = {str(a) for a in answer.get("agentIds") or []}
    result.restored_messages = int(answer.get("restored") or 0)
    declared = {new: old for old, new in plan.workflow_ids.items()}
    for wf, hints in plan.prior_runs:
        # sequential, in declared order, 120 s each; a failing run is the point (logged, never fatal),
        # a run that leaves no execution record is the harness's failure
        run = await owner.execute_with_llm_mock(wf, scenario_hints=hints[:EVAL_SCENARIO_HINTS_MAX] or None,
                                                timeout_ms=PRIOR_RUN_TIMEOUT_MS)
        if await owner.get_execution(run.execution_id) is None:
            raise SeedRestoreFailed(f"prior run of seeded workflow {declared[wf]} left no execution record")
        outcome = "succeeded" if run.success else "failed (" + "; ".join(run.errors)[:200] + ")"
        log.info("%s: prior run of seeded workflow %s (%s): %s", lane, declared[wf], wf, outcome)
        result.prior_run_executions.append(run.execution_id)
    return result


def restore_error(exc: BaseException) -> str:
    """A failed restore's message for the build result: redacted, at most 1,000 characters."""
    if isinstance(exc, N8nHTTPError):
        return redact(f"seed restore failed: HTTP {exc.status}: {exc.message}")[:1000]
    return redact(f"seed restore failed: {exc}")[:1000]


async def cleanup(ledger: Ledger, session: N8nSession, project_id: str, *, lane: str, user: str) -> list[CleanupFailure]:
    """Delete every seeded artifact this user's builds left open (workflows, agents, data tables,
    then root folders — the order is :func:`orchestrator.deletion.in_delete_order`'s), and every
    Agent its builds created (they live in the user's project, like the seeds). Only root folders
    are deleted: their subfolders go with them."""
    deleter = SeedDeleter(session, project_id)
    kinds = {ResourceKind.workflow.value, ResourceKind.agent.value, ResourceKind.data_table.value, ResourceKind.folder.value}
    project_scoped = (ResourceKind.folder.value, ResourceKind.data_table.value, ResourceKind.agent.value)
    entries = [e for e in ledger.open_entries() if e.lane == lane and e.kind in kinds
               and e.meta.get("user") == user and (e.kind in project_scoped or e.meta.get("source") == "seed")]
    failures = []
    for entry in in_delete_order(entries):
        if failure := await delete_one(ledger, deleter, entry.kind, entry.id, lane):
            failures.append(failure)
    return failures


def seeded_transcript(transcript: Any, plan: RestorePlan) -> None:
    """The restored history joins the transcript marked as seeded prior context."""
    for message in plan.messages:
        if message.get("type") == "custom":
            continue
        transcript.add("seeded", role=message.get("role"), text=message_text(message), content=message.get("content"))


def opening_attachment(case: EvalCase, seed: SeedRestore | None, project_id: str) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None]:
    """What the opening message attaches, as n8n's chat takes it (items, context), with seed ids mapped
    to the restored ones; (None, None) when the case attaches nothing or no seed was restored."""
    attach = case.opening_attachment
    if attach is None or seed is None:
        return None, None
    items, context = seed.plan.attachment(attach, project_id)
    return items, context
