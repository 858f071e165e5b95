"""Which trials and cases pass (n8n's ``routing/grade.ts``; the case rule from ``discovery/cli.ts``).

A *resolution* is a trial's route: ``{route, steer, evidence, judgeReason?, judgeError?,
questions: [earlier resolutions the user proxy answered]}``. A trial passes on an accepted token —
``<route>`` any steer, ``<route>:agent`` a steer toward an Agent (``agent`` or ``both``),
``<route>:open`` any steer but ``workflow`` (and not an undecided one); after an answered question
only an ``after`` route passes, or a further question steering to one. A trial with no route
(``none``) from a turn that did not complete (a timeout, an error) or whose judge failed is not
graded (``incomplete``). A case passes when at least 2 of 3 of its graded trials pass (other counts
keep the ratio).
"""

from __future__ import annotations

from typing import Any

from orchestrator.harnesses.routing.cases import RoutingCase

#: the user proxy answers at most this many questions in a trial
MAX_ANSWERS = 2


def token_matches(token: str, route: str, steer: str | None) -> bool:
    """Whether an accepted token (``route`` or ``route:steer``) matches the trial's route and steer;
    ``agent`` accepts an agent or both, ``open`` any steer but the workflow."""
    token_route, _, token_steer = token.partition(":")
    if route != token_route:
        return False
    if token_steer == "agent":
        return steer in ("agent", "both")
    if token_steer == "open":
        return steer is not None and steer != "workflow"
    return True


def can_reply(case: RoutingCase, resolution: dict[str, Any]) -> bool:
    """The user proxy answers a question the case accepts (a stage-direction case only)."""
    return (case.direction is not None and resolution.get("route") == "clarify"
            and any(token_matches(t, "clarify", resolution.get("steer")) for t in case.accepts))


def trial_passes(case: RoutingCase, resolution: dict[str, Any]) -> bool:
    """Whether a trial's resolution passes the case: after a question, the route must be one the case
    accepts after it; else it must match one of the case's accepted tokens."""
    route, steer = str(resolution.get("route")), resolution.get("steer")
    if resolution.get("questions"):
        return any(after == route or (route == "clarify" and after == steer) for after in case.after)
    return any(token_matches(t, route, steer) for t in case.accepts)


def incomplete_reason(resolution: dict[str, Any]) -> tuple[str, str] | None:
    """Why a trial is not graded (attribution, reason), or None when it is."""
    if resolution.get("judgeError") and resolution.get("route") in (None, "none"):
        return "verification_gap", f"not graded: {resolution['judgeError']}"
    if resolution.get("route") in (None, "none") and resolution.get("streamStatus") not in ("completed", None):
        kind = "timeout" if resolution.get("streamStatus") == "timed-out" else "framework_issue"
        return kind, f"not graded: the turn ended before a route ({resolution.get('streamStatus')})"
    return None


def label(resolution: dict[str, Any]) -> str:
    """The route for people: ``clarify`` and ``answer`` with their steer, after the answered questions."""
    route, steer = str(resolution.get("route")), resolution.get("steer") or "none"
    own = f"{route}:{steer}" if route in ("clarify", "answer") else route
    return ">".join([*(label(q) for q in resolution.get("questions") or []), own])


def case_passes(passed: int, graded: int) -> bool:
    """A case passes when at least 2/3 of its graded trials pass (and some were graded)."""
    return graded > 0 and passed * 3 >= graded * 2
