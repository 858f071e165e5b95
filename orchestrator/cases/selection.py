"""Choosing which cases a run uses, with the reference CLI's semantics:

* ``--filter a,b`` keeps cases whose slug contains ``a`` OR ``b``;
* ``--exclude c,d`` then drops cases whose slug contains ``c`` OR ``d``;
* ``--tier t`` keeps cases whose ``datasets`` contains ``t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from orchestrator.cases.issues import CaseIssue, CaseLoadError
from orchestrator.cases.sources import LoadedCase, load_disk, load_langtracer
from orchestrator.errors import UserError

CaseSource = Literal["disk", "langtracer"]
CASE_SOURCES: tuple[str, ...] = ("disk", "langtracer")
#: Where ``--source disk`` looks when no path is given (relative to the working directory).
DEFAULT_CASES_DIR = Path("cases")


def _substrings(spec: str | None) -> list[str]:
    return [part.strip() for part in (spec or "").split(",") if part.strip()]


def select_cases(
    cases: Sequence[LoadedCase],
    *,
    filter: str | None = None,
    exclude: str | None = None,
    tier: str | None = None,
) -> list[LoadedCase]:
    """The cases a run takes, in their order: slug containing one of ``filter``'s comma-separated
    substrings (when given), none of ``exclude``'s, and in dataset ``tier`` (when given)."""
    wanted = _substrings(filter)
    unwanted = _substrings(exclude)
    tier = tier.strip() if tier else None
    selected: list[LoadedCase] = []
    for loaded in cases:
        if wanted and not any(s in loaded.slug for s in wanted):
            continue
        if any(s in loaded.slug for s in unwanted):
            continue
        if tier and tier not in loaded.case.datasets:
            continue
        selected.append(loaded)
    return selected


async def load_cases(
    source: str,
    paths: Sequence[Path] | None = None,
    suite: str | None = None,
) -> tuple[list[LoadedCase], list[CaseIssue]]:
    """Load every case from one source (no selection), checking the flag combination."""
    if source not in CASE_SOURCES:
        raise UserError(f"--source must be one of {', '.join(CASE_SOURCES)}, got {source!r}")
    if source == "langtracer":
        if not suite:
            raise UserError("--suite is required with --source langtracer")
        if paths:
            raise UserError("case PATH arguments only apply to --source disk (got --source langtracer)")
        return await load_langtracer(suite)
    if suite:
        raise UserError("--suite only applies to --source langtracer")
    return load_disk(list(paths) if paths else [DEFAULT_CASES_DIR])


async def load_selected(
    source: str = "disk",
    paths: Sequence[Path] | None = None,
    suite: str | None = None,
    filter: str | None = None,
    exclude: str | None = None,
    tier: str | None = None,
) -> list[LoadedCase]:
    """Load, validate and select. Any invalid case fails the whole load (``CaseLoadError`` lists
    every issue); a bad flag combination raises ``UserError``."""
    cases, issues = await load_cases(source, paths, suite)
    if issues:
        raise CaseLoadError(issues)
    return select_cases(cases, filter=filter, exclude=exclude, tier=tier)
