"""Push disk cases up into a LangTracer suite: create missing, update changed, leave unchanged —
the inverse of ``--source langtracer``, with the reference harness's ``eval:langtracer-push``
semantics.

Selection and validation are selective, as there: exact slugs (and ``--changed``) read only the
named files, so an unrelated invalid file never blocks a push; ``--filter`` parses only the files
whose slug matches; ``--tier`` reads every file (the tier is inside). An invalid file a selector
merely came across is a warning and skipped; a file named exactly that is invalid fails the push.

Planning is pure: :func:`plan_push` partitions the selection against the suite's membership
(``GET /api/v1/suites/:id`` → case ids by name) and its export (``GET …/export``), comparing only
the fields a case update can change (``executionScenarios``, ``tags`` and ``datasets`` are sent on
create but not compared: the export does not round-trip them, so comparing them would never
converge). A case the case-write API cannot represent is skipped with its reason: a replay seed
(rebuilt from its trace at run time, it has no durable home), seed folders, credential
descriptions.

REST (bearer ``LANGTRACER_API_KEY``): ``GET /api/v1/suites`` (slug → id), ``POST /api/v1/cases``
(create and file into the suite), ``PATCH /api/v1/cases/:id`` (update). Reads may wrap their
body in ``{"data": …}``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.cases.issues import CaseIssue
from orchestrator.cases.model import EvalCase
from orchestrator.cases.parse import parse_case_text
from orchestrator.cases.selection import _substrings
from orchestrator.cases.sources import LANGTRACER_API_KEY_ENV, LANGTRACER_URL_ENV, LoadedCase, _case_files, _slug_of
from orchestrator.errors import UserError
from orchestrator.redact import redact, register_secret

#: Disk fields compared to decide update versus unchanged.
COMPARED_KEYS: tuple[str, ...] = (
    "description", "conversation", "complexity", "triggerType", "processExpectations",
    "outcomeExpectations", "messageBudget", "credentials", "seed",
)
SET_KINDS = ("regression", "capability_gap")


# --------------------------------------------------------------------------- selection


@dataclass
class Selection:
    cases: list[LoadedCase] = field(default_factory=list)
    #: Invalid files a selector came across (skipped with a warning).
    warnings: list[CaseIssue] = field(default_factory=list)
    #: Invalid files named exactly (these fail the push).
    errors: list[CaseIssue] = field(default_factory=list)
    #: Exact slugs with no file.
    missing: list[str] = field(default_factory=list)


def changed_slugs(root: Path) -> list[str]:
    """New, untracked, staged and modified ``*.json`` files under ``root``, from git."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "."],
                             cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise UserError(f"--changed needs {root} inside a git work tree ({exc})") from None
    slugs = []
    for line in out.splitlines():
        path = line[3:].strip().split(" -> ")[-1].strip('"')
        if path.endswith(".json"):
            slugs.append(Path(path).name[: -len(".json")])
    return slugs


def select_for_push(
    paths: Sequence[Path], slugs: Sequence[str] = (), *, changed: bool = False,
    filter: str | None = None, exclude: str | None = None, tier: str | None = None,
) -> Selection:
    """The case files under ``paths`` to push: those named by ``slugs`` or changed in git
    (``changed``), narrowed by ``filter``/``exclude`` substrings (comma-separated) and ``tier``. A
    named case that does not parse is an error, another one a warning; named slugs not found are
    listed as missing. Raises ``UserError`` when no selection is given at all."""
    if not (slugs or changed or filter or tier):
        raise UserError("select cases to push: pass slugs, --changed, --filter or --tier")
    files, problems = _case_files(paths)
    selection = Selection(errors=list(problems))
    exact = set(slugs)
    if changed:
        for path in paths:
            exact.update(changed_slugs(path if path.is_dir() else path.parent))
    wanted, unwanted = _substrings(filter), _substrings(exclude)
    by_slug = {_slug_of(f): f for f in files}
    selection.missing = sorted(s for s in exact if s not in by_slug)
    for slug, path in sorted(by_slug.items()):
        named = slug in exact
        if exact and not named:
            continue
        if wanted and not any(w in slug for w in wanted):
            continue
        if any(u in slug for u in unwanted):
            continue
        case, issues = parse_case_text(path.read_text(encoding="utf-8"), str(path))
        if case is None:
            (selection.errors if named else selection.warnings).extend(issues)
            continue
        if tier and tier not in case.datasets:
            continue
        selection.cases.append(LoadedCase(slug=slug, source=str(path), case=case))
    return selection


# --------------------------------------------------------------------------- planning


def unsupported_reason(case: EvalCase) -> str | None:
    """Why the case-write API cannot hold this case, or None."""
    if case.is_replay:
        return "a replay seed is rebuilt from its LangSmith trace at run time: it has no durable home in a suite"
    inline = case.inline_seed
    if inline is not None and (inline.folders or any(w.parent_folder_id for w in inline.workflows)):
        return "seed folders (and workflows[].parentFolderId) are not stored by the case-write API"
    if any(c.description for c in case.credentials):
        return "credential descriptions are not stored by the case-write API (type, name, valid only)"
    return None


def _comparable(body: dict[str, Any]) -> dict[str, Any]:
    conversation = body.get("conversation")
    multi_turn = isinstance(conversation, list) and len(conversation) > 1
    out: dict[str, Any] = {}
    for key in COMPARED_KEYS:
        value = body.get(key)
        if value is None or value == [] or (key == "messageBudget" and not multi_turn):
            continue
        out[key] = value
    return out


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def exported_body(raw: object) -> dict[str, Any]:
    """An exported case as a disk-shaped body (text arrays joined, like the loader does)."""
    body: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
    nested = body.get("case")
    if isinstance(nested, dict):
        body = dict(nested)
    turns = []
    for turn in body.get("conversation") or []:
        if isinstance(turn, dict) and isinstance(turn.get("text"), list):
            turn = {**turn, "text": "\n".join(str(t) for t in turn["text"])}
        turns.append(turn)
    if turns:
        body = {**body, "conversation": turns}
    return body


@dataclass
class PushPlan:
    create: list[LoadedCase] = field(default_factory=list)
    update: list[tuple[int, LoadedCase]] = field(default_factory=list)
    unchanged: list[LoadedCase] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def plan_push(selected: Iterable[LoadedCase], exported: dict[str, object], ids_by_name: dict[str, int]) -> PushPlan:
    """``exported``: case name → exported body; ``ids_by_name``: the suite's members."""
    plan = PushPlan()
    for loaded in selected:
        reason = unsupported_reason(loaded.case)
        if reason:
            plan.skipped.append((loaded.slug, reason))
            continue
        case_id = ids_by_name.get(loaded.slug)
        if case_id is None:
            plan.create.append(loaded)
            continue
        existing = exported.get(loaded.slug)
        disk = _comparable(loaded.case.to_json())
        if existing is not None and _canonical(_comparable(exported_body(existing))) == _canonical(disk):
            plan.unchanged.append(loaded)
        else:
            plan.update.append((case_id, loaded))
    return plan


def create_body(loaded: LoadedCase, suite_id: int, *, set_kind: str = "regression", synthetic: bool = True) -> dict[str, Any]:
    """The ``POST /api/v1/cases`` body: disk keys renamed as the case-write API names them."""
    case = loaded.case.to_json()
    body: dict[str, Any] = {"name": loaded.slug, "setKind": set_kind, "synthetic": synthetic, "suiteId": suite_id,
                            "evalComplexity": case["complexity"], "evalTags": case["tags"]}
    for key in ("description", "conversation", "processExpectations", "outcomeExpectations", "datasets",
                "messageBudget", "seed"):
        if case.get(key) not in (None, []):
            body[key] = case[key]
    if "triggerType" in case:
        body["evalTriggerType"] = case["triggerType"]
    if case.get("executionScenarios"):
        body["scenarios"] = [{k: v for k, v in s.items() if k in ("name", "description", "dataSetup",
                                                                 "successCriteria", "requires")}
                             for s in case["executionScenarios"]]
    if case.get("credentials"):
        body["credentials"] = [{k: v for k, v in c.items() if k in ("type", "name", "valid", "blank")}
                               for c in case["credentials"]]
    return body


def update_body(create: dict[str, Any]) -> dict[str, Any]:
    """The ``PATCH /api/v1/cases/:id`` body: a create body without its create-only keys."""
    return {k: v for k, v in create.items() if k not in ("suiteId", "synthetic", "scenarios")}


# --------------------------------------------------------------------------- the suite


def _unwrap(payload: object) -> object:
    return payload["data"] if isinstance(payload, dict) and "data" in payload else payload


def _export_map(payload: object) -> dict[str, object]:
    """Case name → body, from either export shape (``files`` map or ``cases`` list)."""
    payload = _unwrap(payload)
    out: dict[str, object] = {}
    if isinstance(payload, dict) and isinstance(payload.get("files"), dict):
        for name, body in payload["files"].items():
            out[name[: -len(".json")] if name.endswith(".json") else name] = body
        return out
    entries = payload.get("cases") if isinstance(payload, dict) else payload
    for entry in entries if isinstance(entries, list) else []:
        name = entry.get("name", entry.get("slug")) if isinstance(entry, dict) else None
        if isinstance(name, str):
            out[name] = entry
    return out


@dataclass
class PushResult:
    plan: PushPlan
    suite: str
    suite_id: int
    created: list[tuple[str, int]] = field(default_factory=list)
    updated: list[tuple[str, int]] = field(default_factory=list)


async def push(
    cases: Sequence[LoadedCase], suite: str, *, dry_run: bool = False, set_kind: str = "regression",
    synthetic: bool = True, base_url: str | None = None, api_key: str | None = None, timeout: float = 30,
) -> PushResult:
    """Create or update ``cases`` in the LangTracer suite ``suite`` (slug or id) through its case-write
    API; ``dry_run`` only plans. The URL and key come from the arguments or the environment. Raises
    ``UserError`` for a bad ``set_kind``, no URL, an unknown suite, an unreachable server or a
    failing call (the status only: a body may hold case content)."""
    import httpx

    if set_kind not in SET_KINDS:
        raise UserError(f"--set-kind must be one of {', '.join(SET_KINDS)}, got {set_kind!r}")
    base_url = base_url or os.environ.get(LANGTRACER_URL_ENV)
    if not base_url:
        raise UserError(f"{LANGTRACER_URL_ENV} is not set: it is needed to push to a LangTracer suite")
    api_key = api_key if api_key is not None else os.environ.get(LANGTRACER_API_KEY_ENV)
    headers = {"Accept": "application/json"}
    if api_key:
        register_secret(api_key)
        headers["Authorization"] = f"Bearer {api_key}"
    async with httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout) as client:

        async def call(method: str, path: str, body: object = None) -> object:
            try:
                response = await client.request(method, path, json=body)
            except httpx.HTTPError as exc:
                raise UserError(redact(f"cannot reach LangTracer at {base_url}: {exc!r}")) from None
            if response.status_code >= 400:  # the body is not echoed: it may hold case content
                raise UserError(f"LangTracer {method} {path} returned {response.status_code}")
            return response.json()

        suites = _unwrap(await call("GET", "/api/v1/suites"))
        match = next((s for s in suites if isinstance(s, dict) and (s.get("slug") == suite or str(s.get("id")) == suite)),
                     None) if isinstance(suites, list) else None
        if match is None:
            known = sorted(str(s.get("slug")) for s in suites if isinstance(s, dict)) if isinstance(suites, list) else []
            raise UserError(f"--suite {suite!r} not found in LangTracer (available: {', '.join(known) or 'none'})")
        suite_id = int(match["id"])
        members = _unwrap(await call("GET", f"/api/v1/suites/{suite_id}"))
        ids = {str(c["name"]): int(c["id"]) for c in (members.get("cases") or []) if isinstance(c, dict)} \
            if isinstance(members, dict) else {}
        exported = _export_map(await call("GET", f"/api/v1/suites/{suite_id}/export"))
        result = PushResult(plan_push(cases, exported, ids), str(match.get("slug") or suite), suite_id)
        if dry_run:
            return result
        for loaded in result.plan.create:
            created = _unwrap(await call("POST", "/api/v1/cases",
                                         create_body(loaded, suite_id, set_kind=set_kind, synthetic=synthetic)))
            case_id = created.get("case", {}).get("id") if isinstance(created, dict) else None
            result.created.append((loaded.slug, int(case_id) if case_id is not None else -1))
        for case_id, loaded in result.plan.update:
            body = update_body(create_body(loaded, suite_id, set_kind=set_kind, synthetic=synthetic))
            await call("PATCH", f"/api/v1/cases/{case_id}", body)
            result.updated.append((loaded.slug, case_id))
        return result
