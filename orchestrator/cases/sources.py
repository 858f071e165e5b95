"""Where cases come from: files on disk, or a LangTracer suite export.

Disk
    A directory contributes every ``*.json`` directly inside it (sorted by name); a file is read
    whatever its name. The slug is the file name without ``.json``.

LangTracer
    ``GET {LANGTRACER_URL}/api/v1/suites/<suite>/export`` with ``Authorization: Bearer
    {LANGTRACER_API_KEY}``. The export shape we read::

        {"suite": {"id": 7, "slug": "baseline", ...},
         "cases": [{"name": "<slug>", ...case body keys...}, ...]}

    Tolerated variants: a bare top-level list of entries; ``slug`` instead of ``name``; the body
    nested under ``"case"`` instead of inline. Like the reference normalizer, each body is
    whitelisted down to the keys the case schema knows (LangTracer adds ``id``, ``suiteId``,
    timestamps, …) — except that retired keys (``buildExpectations`` and the pre-union seeding
    keys) are kept, so such a case fails the pull by name instead of silently running unseeded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:  # imported where a suite is pulled: disk-only commands start faster without it
    import httpx

from orchestrator.cases.issues import FILE_FIELD, JSON_FIELD, ROOT_FIELD, CaseIssue
from orchestrator.cases.model import EvalCase
from orchestrator.cases.parse import decode_json, parse_case, parse_case_text
from orchestrator.errors import UserError
from orchestrator.redact import redact, register_secret

LANGTRACER_URL_ENV = "LANGTRACER_URL"
LANGTRACER_API_KEY_ENV = "LANGTRACER_API_KEY"
_TRANSIENT_STATUS = frozenset({502, 503, 504})


@dataclass(frozen=True)
class LoadedCase:
    slug: str
    source: str  # a file path, or "langtracer:<suite>/<name>"
    case: EvalCase


# --------------------------------------------------------------------------- disk


def _case_files(paths: Sequence[Path], pattern: str = "*.json") -> tuple[list[Path], list[CaseIssue]]:
    """The files directly in each folder whose name matches ``pattern`` (sorted), and each file given."""
    files: list[Path] = []
    issues: list[CaseIssue] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.glob(pattern) if p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            issues.append(CaseIssue(str(path), FILE_FIELD, "no such file or directory"))
    return files, issues


def _slug_of(path: Path) -> str:
    return path.name[: -len(".json")] if path.name.endswith(".json") else path.name


def load_disk(paths: Sequence[Path]) -> tuple[list[LoadedCase], list[CaseIssue]]:
    """Load and validate every case under ``paths``; returns the valid cases and every issue."""
    files, issues = _case_files(paths)
    loaded: list[LoadedCase] = []
    seen: dict[str, str] = {}
    for path in files:
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            issues.append(CaseIssue(source, FILE_FIELD, f"cannot read file: {exc}"))
            continue
        case, file_issues = parse_case_text(text, source)
        if case is None:
            issues.extend(file_issues)
            continue
        slug = _slug_of(path)
        if slug in seen:
            if seen[slug] != source:
                message = f"duplicate slug {slug!r} (also loaded from {seen[slug]})"
                issues.append(CaseIssue(source, ROOT_FIELD, message))
            continue
        seen[slug] = source
        loaded.append(LoadedCase(slug=slug, source=source, case=case))
    return loaded, issues


# --------------------------------------------------------------------------- langtracer

_CASE_KEYS: frozenset[str] = frozenset(
    field.alias or name for name, field in EvalCase.model_fields.items()
)


def _entries(payload: object) -> list[object] | None:
    if isinstance(payload, list):
        return payload
    if isinstance(payload, dict) and isinstance(cases := payload.get("cases"), list):
        return cases
    return None


def _entry_body(entry: dict[str, Any]) -> dict[str, Any]:
    body = entry["case"] if isinstance(entry.get("case"), dict) else entry
    return {key: value for key, value in body.items() if key in _CASE_KEYS}


def parse_export(payload: object, suite: str) -> tuple[list[LoadedCase], list[CaseIssue]]:
    """Validate a suite export (see the module docstring for its shape)."""
    entries = _entries(payload)
    if entries is None:
        message = "export is neither a list of cases nor an object with a 'cases' list"
        return [], [CaseIssue(f"langtracer:{suite}", JSON_FIELD, message)]
    loaded: list[LoadedCase] = []
    issues: list[CaseIssue] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        name = entry.get("name", entry.get("slug")) if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(name, str) or not name.strip():
            message = "a suite case needs a non-empty name (its slug)"
            issues.append(CaseIssue(f"langtracer:{suite}/#{index}", "name", message))
            continue
        source = f"langtracer:{suite}/{name}"
        if name in seen:
            issues.append(CaseIssue(source, "name", f"duplicate case name {name!r} in the suite"))
            continue
        seen.add(name)
        case, case_issues = parse_case(_entry_body(entry), source)
        if case is None:
            issues.extend(case_issues)
        else:
            loaded.append(LoadedCase(slug=name, source=source, case=case))
    return loaded, issues


def _is_transient(exc: BaseException) -> bool:
    import httpx

    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in _TRANSIENT_STATUS


async def _get_export(
    url: str, headers: dict[str, str], timeout: float, attempts: int
) -> httpx.Response:
    import httpx
    from tenacity import (
        AsyncRetrying,
        retry_if_exception,
        stop_after_attempt,
        wait_exponential,
    )

    async with httpx.AsyncClient(timeout=timeout) as client:
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.5, max=4),
            retry=retry_if_exception(_is_transient),
            reraise=True,
        ):
            with attempt:
                response = await client.get(url, headers=headers)
                if response.status_code in _TRANSIENT_STATUS:
                    response.raise_for_status()
                return response
    raise AssertionError("unreachable")  # pragma: no cover


async def load_langtracer(
    suite: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = 30,
    attempts: int = 3,
) -> tuple[list[LoadedCase], list[CaseIssue]]:
    """Pull and validate a LangTracer suite. Transport or HTTP failures raise ``UserError``;
    invalid cases come back as issues."""
    base_url = base_url or os.environ.get(LANGTRACER_URL_ENV)
    if not base_url:
        raise UserError(f"{LANGTRACER_URL_ENV} is not set: it is needed for --source langtracer")
    api_key = api_key if api_key is not None else os.environ.get(LANGTRACER_API_KEY_ENV)
    if not suite.strip():
        raise UserError("--suite must name a LangTracer suite (slug or numeric id)")
    headers = {"Accept": "application/json"}
    if api_key:
        register_secret(api_key)
        headers["Authorization"] = f"Bearer {api_key}"
    url = f"{base_url.rstrip('/')}/api/v1/suites/{quote(suite, safe='')}/export"
    import httpx

    try:
        response = await _get_export(url, headers, timeout, attempts)
    except httpx.HTTPStatusError as exc:
        response = exc.response
    except httpx.HTTPError as exc:
        message = f"cannot reach LangTracer at {LANGTRACER_URL_ENV}={base_url}: {exc!r}"
        raise UserError(redact(message)) from None
    except ValueError as exc:  # an unusable URL
        message = f"{LANGTRACER_URL_ENV}={base_url} is not a usable URL: {exc}"
        raise UserError(redact(message)) from None
    if response.status_code in (401, 403):
        raise UserError(
            f"LangTracer refused the suite export ({response.status_code}): "
            f"check {LANGTRACER_API_KEY_ENV}"
        )
    if response.status_code == 404:
        raise UserError(f"--suite {suite!r}: LangTracer has no such suite (404 from {redact(url)})")
    if response.status_code >= 400:
        body = redact(response.text[:200])
        raise UserError(f"LangTracer suite export failed with HTTP {response.status_code}: {body}")
    payload, issues = decode_json(response.text, f"langtracer:{suite}")
    if issues:
        return [], issues
    return parse_export(payload, suite)
