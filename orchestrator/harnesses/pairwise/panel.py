"""The pairwise judge panel: N judges read one workflow against the example's dos and don'ts.

Rules (n8n's ``ai-workflow-builder.ee`` ``evaluators/pairwise``: ``judge-chain.ts``,
``judge-panel.ts``, ``index.ts``), our own prompt text:

- each judge lists every criterion once, as a pass or a violation; it passes (``primaryPass``)
  only with no violation, and its diagnostic score is passes / (passes + violations) (0 when it
  listed none);
- the panel passes by majority: at least ceil(N / 2) judges pass; its diagnostic is the mean of
  the judges' scores;
- feedback (the keys n8n records): ``pairwise_primary`` (1/0, ``score``, "k/N judges passed"),
  ``pairwise_diagnostic`` (``metric``), ``pairwise_judges_passed``, ``pairwise_total_passes``,
  ``pairwise_total_violations`` (``detail``), and ``judge1…judgeN`` (1/0, the violations as comment).

The judges run concurrently on the run's judge route with ``--judge-model``; a judge whose reply is
not the JSON asked for is asked again (2 attempts); a panel with a failed judge raises
:class:`PanelFailed` — n8n then keeps the row with empty feedback, a tooling gap that is left out of
the pass rate.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ModelCallError
from orchestrator.harnesses.common import json_object
from orchestrator.verify.judge import Judge

#: Must equal :data:`orchestrator.scripted.pairwise.PANEL_MARKER` (a test holds them together).
PANEL_MARKER = "[n8n-eval pairwise judge]"
ATTEMPTS = 2

SYSTEM_PROMPT = f"""{PANEL_MARKER}
You audit one n8n workflow (its JSON) against a checklist of criteria, and nothing else.
- Decide every criterion from what the JSON configures: nodes, parameters, connections. Never assume
  what is not there; a criterion the JSON cannot show is a violation, and say why.
- Each criterion goes in exactly one list. Quote the criterion as the rule, and give the node or
  parameter that is your evidence as the justification.
- Lines under [DON'T] are prohibitions: the rule holds when the workflow does not do it.
Answer with one JSON object and no other text:
{{"passes": [{{"rule": "…", "justification": "…"}}], "violations": [{{"rule": "…", "justification": "…"}}]}}"""


class PanelFailed(ModelCallError):
    """A judge of the panel gave no usable verdict."""


@dataclass
class JudgeResult:
    passes: list[dict[str, str]] = field(default_factory=list)
    violations: list[dict[str, str]] = field(default_factory=list)

    @property
    def primary_pass(self) -> bool:
        """Whether the judge found no violation."""
        return not self.violations

    @property
    def diagnostic(self) -> float:
        """The share of criteria the judge passed (0 without criteria)."""
        total = len(self.passes) + len(self.violations)
        return len(self.passes) / total if total else 0.0


def criteria_text(dos: list[str], donts: list[str]) -> str:
    """The do and don't criteria as the judges read them."""
    return "[DO]\n" + "\n".join(dos) + "\n\n[DON'T]\n" + "\n".join(donts)


def panel_prompt(dos: list[str], donts: list[str], workflow: dict[str, Any]) -> str:
    """A panel judge's user prompt: the criteria and the workflow JSON."""
    return (f"## Criteria\n{criteria_text(dos, donts)}\n\n## Workflow\n```json\n"
            f"{json.dumps(workflow, indent=1, default=str)}\n```\n\nList every criterion as a pass or a violation.")


def _items(value: Any) -> list[dict[str, str]]:
    out = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict) and isinstance(item.get("rule"), str):
            out.append({"rule": item["rule"], "justification": str(item.get("justification") or "")})
    return out


def parse_judge_reply(text: str) -> JudgeResult | None:
    """The reply's JSON object (first ``{`` to last ``}``), or None when it is not the shape asked."""
    data = json_object(text)
    if data is None or not isinstance(data.get("passes"), list) or not isinstance(data.get("violations"), list):
        return None
    return JudgeResult(_items(data["passes"]), _items(data["violations"]))


async def one_judge(judge: Judge, prompt: str) -> JudgeResult:
    """One judge's verdict, asking up to ``ATTEMPTS`` times. Raises :class:`PanelFailed` with the last
    error when no attempt gave the JSON asked for."""
    last = "no reply"
    for _ in range(ATTEMPTS):
        try:
            text = await judge.ask(SYSTEM_PROMPT, prompt)
        except Exception as exc:  # the SDK's errors (outage, timeout): the attempt failed
            last = f"{type(exc).__name__}: {exc}"
            continue
        parsed = parse_judge_reply(text)
        if parsed is not None:
            return parsed
        last = "the reply was not the JSON asked for"
    raise PanelFailed(last)


def majority(judges: int) -> int:
    """How many of ``judges`` judges must pass a workflow (half, rounded up)."""
    return math.ceil(judges / 2)


def feedback(results: list[JudgeResult]) -> list[dict[str, Any]]:
    """n8n's feedback rows for one panel (see the module doc)."""
    n = len(results)
    passed = sum(1 for r in results if r.primary_pass)
    rows: list[dict[str, Any]] = [
        {"evaluator": "pairwise", "metric": "pairwise_primary", "score": 1 if passed >= majority(n) else 0,
         "kind": "score", "comment": f"{passed}/{n} judges passed"},
        {"evaluator": "pairwise", "metric": "pairwise_diagnostic", "score": sum(r.diagnostic for r in results) / n,
         "kind": "metric"},
        {"evaluator": "pairwise", "metric": "pairwise_judges_passed", "score": passed, "kind": "detail"},
        {"evaluator": "pairwise", "metric": "pairwise_total_passes", "score": sum(len(r.passes) for r in results),
         "kind": "detail"},
        {"evaluator": "pairwise", "metric": "pairwise_total_violations",
         "score": sum(len(r.violations) for r in results), "kind": "detail"},
    ]
    for index, r in enumerate(results, start=1):
        row: dict[str, Any] = {"evaluator": "pairwise", "metric": f"judge{index}", "score": 1 if r.primary_pass else 0,
                               "kind": "detail"}
        if r.violations:
            row["comment"] = "; ".join(f"[{v['rule']}] {v['justification']}" for v in r.violations)
        rows.append(row)
    return rows


async def run_panel(judge: Judge, judges: int, dos: list[str], donts: list[str],
                    workflow: dict[str, Any]) -> list[dict[str, Any]]:
    """The panel's feedback rows; raises :class:`PanelFailed` when a judge gives no verdict."""
    prompt = panel_prompt(dos, donts, workflow)
    results = await asyncio.gather(*(one_judge(judge, prompt) for _ in range(judges)))
    return feedback(list(results))


def score(feedback_rows: list[dict[str, Any]], metric: str) -> float | None:
    """The score of ``metric`` among the feedback rows, or None when absent or not a number."""
    found = next((f for f in feedback_rows if f.get("metric") == metric), None)
    value = found.get("score") if found else None
    return float(value) if isinstance(value, (int, float)) else None
