"""Routing cases: one ``route-<slug>.json`` per case, in the eval-case format LangTracer exports.

The labels are tags (n8n's ``routing/cases.ts``):

- ``routing`` marks the file as a routing case;
- ``bucket:<route>`` — exactly one — is the main expected route (the summary groups by it);
- ``accepts:<token>`` is another route that passes; the bucket always passes, except ``clarify``:
  a clarify case lists the questions that pass (``accepts:clarify:open``). A token may carry a
  steer: ``<route>:agent`` passes a steer toward an Agent, ``<route>:open`` any steer but workflow;
- ``after:<route>`` gives the routes that pass after the user proxy answered a question (default:
  the accepted routes without a steer).

The conversation is one user message, then at most one user turn holding only ``[stage
directions]`` (the facts the proxy answers with; such a case needs an ``after:`` tag). The case's
``seed``, ``credentials`` and the opening turn's ``attach`` set the lane and the thread up before
the turn, as for ``orchestrator run`` — on a real lane folders, projects and a replayed LangSmith
thread are restored too (n8n's in-process stub skips those cases). A case asking for the
credential-setup browser (``credentialFixture``) needs a setup this command does not do: it is
listed and skipped, as n8n lists the cases its stub cannot set up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cases import CaseIssue, CaseLoadError, EvalCase, LoadedCase, parse_case
from orchestrator.harnesses.common import json_files

ROUTES = ("agent", "workflow", "one-off", "debug", "answer", "clarify", "multi", "decline")
ACCEPT_TOKENS = (*ROUTES, "clarify:agent", "clarify:open", "answer:agent", "answer:open")
DEFAULT_CASES = Path("cases") / "routing"
_DIRECTIONS = re.compile(r"\[[^\]]*\]")


@dataclass(frozen=True)
class RoutingCase:
    id: str
    case: EvalCase
    bucket: str
    accepts: tuple[str, ...]
    after: tuple[str, ...]
    #: the [stage directions] turn for the user proxy (never sent to the agent)
    direction: str | None = None

    @property
    def user_message(self) -> str:
        """The case's opening user turn (empty without one)."""
        return self.case.conversation[0].text if self.case.conversation else ""


def _tag_values(tags: list[str], prefix: str) -> list[str]:
    return [t[len(prefix):] for t in tags if t.startswith(prefix)]


def labels(tags: list[str]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(bucket, accepts, after) from a case's tags; ``ValueError`` names the tag at fault."""
    buckets = _tag_values(tags, "bucket:")
    if len(buckets) != 1 or buckets[0] not in ROUTES:
        raise ValueError(f"needs exactly one bucket:<route> tag ({', '.join(ROUTES)}), got {buckets or 'none'}")
    bucket = buckets[0]
    tokens = _tag_values(tags, "accepts:")
    bad = [t for t in tokens if t not in ACCEPT_TOKENS]
    if bad:
        raise ValueError(f"unknown accepts:{bad[0]} (one of {', '.join(ACCEPT_TOKENS)})")
    after = _tag_values(tags, "after:")
    bad = [t for t in after if t not in ROUTES or t == "clarify"]
    if bad:
        raise ValueError(f"unknown after:{bad[0]} (a route other than clarify)")
    accepts = tokens if bucket == "clarify" or bucket in tokens else [bucket, *tokens]
    if not accepts:
        raise ValueError("a bucket:clarify case needs an accepts:<token> tag")
    default_after = [t for t in accepts if t != "clarify" and ":" not in t]
    return bucket, tuple(accepts), tuple(after or default_after)


def routing_case(loaded: LoadedCase) -> RoutingCase:
    """The routing labels and shape of a loaded case; ``ValueError`` says what is wrong."""
    case = loaded.case
    if "routing" not in case.tags:
        raise ValueError('has no "routing" tag')
    turns = case.conversation
    opener, rest = (turns[0], turns[1:]) if turns else (None, [])
    if opener is None or opener.role != "user" or len(rest) > 1 or (
            rest and (rest[0].role != "user" or _DIRECTIONS.sub("", rest[0].text).strip())):
        raise ValueError("needs one user message, then at most one user turn with only [stage directions]")
    bucket, accepts, after = labels(case.tags)
    direction = rest[0].text if rest else None
    if direction and not _tag_values(case.tags, "after:"):
        raise ValueError("a case with stage directions needs an after:<route> tag")
    return RoutingCase(loaded.slug, case, bucket, accepts, after, direction)


def needs_setup(case: EvalCase) -> bool:
    """A setup this command does not do: the credential-setup browser."""
    return case.credential_fixture is not None


def load_routing_files(paths: list[Path]) -> tuple[list[LoadedCase], list[CaseIssue]]:
    """Every ``route-*.json`` directly in each folder, sorted by name (notes or results kept next to
    the cases are not read), or each file given."""
    found, issues = json_files(paths, "route-*.json")
    loaded: list[LoadedCase] = []
    for file, raw in found:
        body = raw["case"] if isinstance(raw.get("case"), dict) else raw  # a suite export's entry, or the case
        case, problems = parse_case(body, str(file))
        if case is None:
            issues.extend(problems)
            continue
        loaded.append(LoadedCase(slug=file.stem, source=str(file), case=case))
    return loaded, issues


def routing_cases(loaded: list[LoadedCase]) -> tuple[list[RoutingCase], list[str]]:
    """The routing cases (raising one :class:`CaseLoadError` listing every bad file) and the ids of
    those that need a setup this command does not do."""
    cases: list[RoutingCase] = []
    skipped: list[str] = []
    issues: list[CaseIssue] = []
    for item in loaded:
        try:
            parsed = routing_case(item)
        except ValueError as exc:
            issues.append(CaseIssue(item.source, "tags", str(exc)))
            continue
        if needs_setup(item.case):
            skipped.append(item.slug)
        else:
            cases.append(parsed)
    if issues:
        raise CaseLoadError(issues)
    return cases, skipped


def expectation_text(accepts: tuple[str, ...]) -> str:
    """The one build expectation a routing case carries (n8n's ``routingExpectationText``), the same
    text for every trial, so LangTracer and the results match it."""
    return f"Routes to one of: {', '.join(accepts)}"
