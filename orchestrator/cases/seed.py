"""The ``seed`` slot: history and artifacts restored into the build thread before the live turn.

One slot, two modes (a discriminated union on ``mode``):

* ``inline`` — authored in the case body: prior ``messages`` plus the ``workflows``, ``dataTables``,
  ``agents``, ``folders`` and ``projects`` they reference, and ``priorRuns`` (executions staged
  before the live turn).
* ``replay`` — only a LangSmith ``threadId``; the harness rebuilds the thread at run time and the
  trace supplies the live turn.

Messages may be written as ``{role, text}`` shorthand; it is expanded into a full envelope stamped
on fixed, ascending slots in the past (never derived from the clock, so loading is reproducible).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, StrictBool, field_validator, model_validator

from orchestrator.cases.base import CaseModel, OpenModel
from orchestrator.cases.issues import Violation, raise_violations
from orchestrator.cases.rules import agent_slug

#: The seed id remap refuses to rewrite shorter ids safely.
MIN_ARTIFACT_ID_LENGTH = 8
MAX_SEED_FOLDERS = 20
PRIOR_RUN_HINTS_MAX = 2000
#: Id prefix of a folder the loader declares for a ``workflows[].folder`` name.
NAMED_FOLDER_PREFIX = "seedfolder-"
FOLDER_NAME_MAX_LENGTH = 128

#: Fixed timestamp slots for seeded messages: message ``i`` sits at ``base + i * step``.
SEED_SLOT_BASE = datetime(2024, 1, 1, tzinfo=UTC)
SEED_SLOT_STEP = timedelta(minutes=1)
SHORTHAND_MESSAGE_TYPE = "llm"


def seed_slot(index: int) -> datetime:
    """The ``createdAt`` of the ``index``-th seeded message: one minute apart from a fixed base, so
    seeded threads sort the same on every run."""
    return SEED_SLOT_BASE + index * SEED_SLOT_STEP


def _artifact_id(value: str) -> str:
    if len(value) < MIN_ARTIFACT_ID_LENGTH:
        raise ValueError(
            f"id {value!r} is shorter than {MIN_ARTIFACT_ID_LENGTH} characters "
            "(the seed id remap refuses short ids)"
        )
    return value


def _folder_name(value: str) -> str:
    if not value.strip():
        raise ValueError("folder name must not be blank")
    if value != value.strip():
        raise ValueError("folder name must be trimmed (no leading or trailing whitespace)")
    if "/" in value:
        raise ValueError("folder name cannot contain '/' (it separates folderPath segments)")
    if len(value) > FOLDER_NAME_MAX_LENGTH:
        raise ValueError(f"folder name is longer than {FOLDER_NAME_MAX_LENGTH} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("folder name must not contain control characters")
    return value


def _folder_id_tail(parent: str | None, name: str) -> str:
    """A stable id tail for a folder named in a seed workflow (its path, slugged)."""
    import hashlib

    path = f"{parent or ''}/{name}"
    return hashlib.sha1(path.encode()).hexdigest()[:10]


ArtifactId = Annotated[str, AfterValidator(_artifact_id)]
FolderName = Annotated[str, AfterValidator(_folder_name)]
NonEmptyStr = Annotated[str, Field(min_length=1)]


class SeedWorkflow(OpenModel):
    id: ArtifactId
    name: NonEmptyStr
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    connections: dict[str, Any] = Field(default_factory=dict)
    #: A ``seed.folders[].id``; omitted → the project root.
    parent_folder_id: str | None = None
    #: A folder given by name (``a/b`` nests): the loader turns it into a ``seed.folders`` entry
    #: (reusing a declared folder of that name and parent) and sets ``parentFolderId``.
    folder: str | None = Field(default=None, min_length=1)


class SeedDataTable(OpenModel):
    """Created schema-only (no rows) on the lane."""

    id: ArtifactId
    name: NonEmptyStr
    columns: list[dict[str, Any]] = Field(default_factory=list)


class AgentSkillRef(OpenModel):
    type: str = "skill"
    id: NonEmptyStr


class AgentConfig(OpenModel):
    name: NonEmptyStr
    skills: list[AgentSkillRef] = Field(default_factory=list)


class AgentSkill(OpenModel):
    name: str | None = None
    description: str | None = None
    instructions: str | None = None


class SeedAgent(OpenModel):
    id: ArtifactId
    config: AgentConfig
    #: Skill bodies keyed by the id ``config.skills[].id`` refers to.
    skills: dict[str, AgentSkill] = Field(default_factory=dict)


class SeedFolder(CaseModel):
    id: ArtifactId
    name: FolderName
    parent_folder_id: str | None = None


class SeedProject(OpenModel):
    id: ArtifactId
    name: NonEmptyStr


class PriorRun(CaseModel):
    """A run of a seeded workflow staged before the live turn; ``hints`` steer its mocks."""

    #: A seed workflow's id, or its name when that name is unique in the seed (resolved to the id
    #: at load).
    workflow: NonEmptyStr
    #: None when omitted (n8n refuses an empty string, so a dump must not write one)
    hints: str | None = None

    @field_validator("hints", mode="before")
    @classmethod
    def _hints(cls, value: object) -> object:
        if isinstance(value, str) and not 1 <= len(value) <= PRIOR_RUN_HINTS_MAX:
            raise ValueError(f"hints must be 1 to {PRIOR_RUN_HINTS_MAX} characters (omit it for no hints)")
        return value


class SeedMessage(OpenModel):
    """A stored thread message. Only the envelope is checked; content blocks and unknown keys are
    kept as authored. A ``custom`` message is stored but never rendered, so it may omit ``role``
    and carry any content."""

    id: NonEmptyStr
    type: NonEmptyStr
    role: Literal["user", "assistant"] | None = None
    created_at: datetime
    content: Any = None

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        try:
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        except OverflowError:
            raise ValueError("createdAt is out of the representable range") from None

    @model_validator(mode="after")
    def _envelope(self) -> SeedMessage:
        raise_violations(check_seed_message(self))
        return self


def _is_shorthand(item: object) -> bool:
    if not isinstance(item, dict) or set(item) != {"role", "text"}:
        return False
    text = item["text"]
    return item["role"] in ("user", "assistant") and (
        isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text))
    )


SHORTHAND_FORM = "the {role, text} shorthand takes role 'user' or 'assistant' and text as a string or an array of strings"

_JSON_KINDS = {str: "a string", int: "a number", float: "a number", bool: "true/false", dict: "an object",
               list: "an array", type(None): "null"}


def shorthand_violations(item: object, index: int) -> list[Violation]:
    """What is wrong with a ``{role, text}`` near-miss (exactly those two keys, not valid shorthand),
    each located at the offending line (``text.N``) and naming the shorthand form."""
    if not isinstance(item, dict) or set(item) != {"role", "text"} or _is_shorthand(item):
        return []
    found: list[Violation] = []
    if item["role"] not in ("user", "assistant"):
        found.append(Violation((index, "role"), f"role is {item['role']!r}: {SHORTHAND_FORM}"))
    text = item["text"]
    if isinstance(text, list):
        for n, line in enumerate(text):
            if not isinstance(line, str):
                kind = _JSON_KINDS.get(type(line), type(line).__name__)
                found.append(Violation((index, "text", n), f"line {n} is {kind}, not a string: {SHORTHAND_FORM}"))
    elif not isinstance(text, str):
        kind = _JSON_KINDS.get(type(text), type(text).__name__)
        found.append(Violation((index, "text"), f"text is {kind}: {SHORTHAND_FORM}"))
    return found


def expand_shorthand(item: dict[str, Any], index: int) -> dict[str, Any]:
    """A shorthand seed message (``role`` and ``text``) as the full message n8n stores, with a stable
    id and timestamp from its position ``index``."""
    text = item["text"] if isinstance(item["text"], str) else "\n".join(item["text"])
    return {
        "id": f"seed-message-{index + 1:04d}",
        "role": item["role"],
        "type": SHORTHAND_MESSAGE_TYPE,
        "createdAt": seed_slot(index).isoformat().replace("+00:00", "Z"),
        "content": [{"type": "text", "text": text}],
    }


def _stamps_in_order(messages: list[SeedMessage], now: datetime) -> bool:
    stamps = [m.created_at for m in messages]
    ascending = all(earlier < later for earlier, later in zip(stamps, stamps[1:], strict=False))
    return ascending and all(stamp <= now for stamp in stamps)


class InlineSeed(CaseModel):
    mode: Literal["inline"]
    messages: list[SeedMessage] = Field(default_factory=list)
    workflows: list[SeedWorkflow] = Field(default_factory=list)
    data_tables: list[SeedDataTable] = Field(default_factory=list)
    agents: list[SeedAgent] = Field(default_factory=list)
    folders: list[SeedFolder] = Field(default_factory=list, max_length=MAX_SEED_FOLDERS)
    projects: list[SeedProject] = Field(default_factory=list)
    prior_runs: list[PriorRun] = Field(default_factory=list)
    #: The seeded history belongs to an earlier session: restored into a thread of its own, and the
    #: live turn opens a new thread (the seeded artifacts stay on the instance).
    session_boundary: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def _named_folders(cls, data: object) -> object:
        """Turn ``workflows[].folder`` names into declared folders, so the restore creates them."""
        if not isinstance(data, dict) or not isinstance(data.get("workflows"), list):
            return data
        if not any(isinstance(w, dict) and isinstance(w.get("folder"), str) for w in data["workflows"]):
            return data
        folders = [dict(f) for f in data.get("folders") or [] if isinstance(f, dict)]
        by_path: dict[tuple[str | None, str], str] = {
            (f.get("parentFolderId"), f["name"]): f["id"] for f in folders
            if isinstance(f.get("name"), str) and isinstance(f.get("id"), str)
        }
        workflows = []
        for item in data["workflows"]:
            name = item.get("folder") if isinstance(item, dict) else None
            if isinstance(name, str) and name.strip() and item.get("parentFolderId") is None:
                parent: str | None = None
                for part in (p.strip() for p in name.split("/") if p.strip()):
                    key = (parent, part)
                    if key not in by_path:
                        by_path[key] = f"{NAMED_FOLDER_PREFIX}{_folder_id_tail(parent, part)}"
                        folders.append({"id": by_path[key], "name": part, "parentFolderId": parent})
                    parent = by_path[key]
                item = {**item, "parentFolderId": parent}
            workflows.append(item)
        return {**data, "workflows": workflows, "folders": folders}

    @field_validator("messages", mode="before")
    @classmethod
    def _expand_shorthand(cls, value: object) -> object:
        if not isinstance(value, list):
            return value
        raise_violations([v for i, m in enumerate(value) for v in shorthand_violations(m, i)])
        return [expand_shorthand(m, i) if _is_shorthand(m) else m for i, m in enumerate(value)]

    @field_validator("messages")
    @classmethod
    def _restamp(cls, messages: list[SeedMessage]) -> list[SeedMessage]:
        """Keep authored stamps only if the whole sequence ascends and sits in the past;
        otherwise move every message onto the fixed slots, preserving array order."""
        if not _stamps_in_order(messages, datetime.now(UTC)):
            for index, message in enumerate(messages):
                message.created_at = seed_slot(index)
        return messages

    @model_validator(mode="after")
    def _cross_references(self) -> InlineSeed:
        raise_violations(check_inline_seed(self))
        for run in self.prior_runs:  # names → ids, so the restore keys on one thing
            run.workflow = prior_run_target(self, run.workflow) or run.workflow
        return self

    def workflow_ids(self) -> set[str]:
        return {w.id for w in self.workflows}

    def agent_ids(self) -> set[str]:
        return {a.id for a in self.agents}


class ReplaySeed(CaseModel):
    mode: Literal["replay"]
    thread_id: NonEmptyStr
    project: NonEmptyStr = "instance-ai"
    #: Pins the LangSmith host the source trace lives on.
    endpoint: str | None = None
    #: Pins which user turn is sent live (its LangSmith run id).
    live_turn_run_id: NonEmptyStr | None = None

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            parts = urlsplit(value)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"endpoint must be an http(s) URL, got {value!r}")
        return value


Seed = Annotated[InlineSeed | ReplaySeed, Field(discriminator="mode")]

__all__ = [
    "AgentConfig",
    "AgentSkill",
    "AgentSkillRef",
    "InlineSeed",
    "PriorRun",
    "ReplaySeed",
    "Seed",
    "SeedAgent",
    "SeedDataTable",
    "SeedFolder",
    "SeedMessage",
    "SeedProject",
    "SeedWorkflow",
    "seed_slot",
]


# --------------------------------------------------------------------------- seed messages


def check_seed_message(message: SeedMessage) -> list[Violation]:
    """Rules one seed message must keep beyond its schema (a role unless ``custom``, a list of typed
    content blocks); empty when it keeps them."""
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
    """Rules an inline seed must keep across its parts: it carries something, artifact ids are unique,
    references (folders, prior runs, agent skills) resolve, folders have no cycle and agent names do
    not collide; empty when it keeps them."""
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
