"""Case-loading throughput: generate N valid cases of varied archetypes into a temp directory,
load and validate them with the disk loader, and report cases/second (plus the in-memory
validation rate, which excludes file I/O and JSON decoding).

    .venv/bin/python bench/load_cases.py [--count 5000]

Not a test; a figure to watch when the schema or its rules change.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.cases import load_disk, parse_case


def _base(i: int) -> dict[str, Any]:
    return {
        "description": f"Generated case {i}",
        "conversation": [{"role": "user", "text": f"Build workflow number {i} that returns {i} in a Code node."}],
        "complexity": ("simple", "medium", "complex")[i % 3],
        "tags": ["bench", f"group-{i % 7}"],
        "datasets": ["full"] if i % 5 else ["pr", "full"],
        "outcomeExpectations": [f"The workflow returns {i}."],
    }


def plain(i: int) -> dict[str, Any]:
    case = _base(i)
    case["triggerType"] = "manual"
    case["executionScenarios"] = [
        {"name": "happy-path", "description": "run", "dataSetup": "nothing external", "successCriteria": f"outputs {i}"}
    ]
    return case


def behaviour(i: int) -> dict[str, Any]:
    case = _base(i)
    case["conversation"] += [
        {"role": "assistant", "text": "I'll need a channel."},
        {"role": "user", "text": ["[Only if asked, say #bench.", f"Then ask for change {i}.]"]},
    ]
    case["processExpectations"] = ["The agent asked for the channel before building."]
    case["messageBudget"] = 5
    return case


def credentials(i: int) -> dict[str, Any]:
    case = _base(i)
    case["credentials"] = [
        {"type": "slackApi", "name": "Team Slack", "description": " team workspace "},
        {"type": "slackApi", "name": "Personal Slack"},
    ]
    return case


def seeded(i: int) -> dict[str, Any]:
    case = _base(i)
    wf = f"benchWf{i:08d}"
    case["conversation"][0]["attach"] = {"workflow": wf}
    case["seed"] = {
        "mode": "inline",
        "messages": [
            {"role": "user", "text": "Earlier we agreed on the layout."},
            {"role": "assistant", "text": "Noted."},
            {"id": f"m-{i}", "role": "assistant", "type": "llm", "createdAt": "2025-02-01T00:00:00Z",
             "content": [{"type": "text", "text": "built it"}, {"type": "tool-call", "output": {"workflowId": wf}}]},
        ],
        "folders": [
            {"id": f"benchFo{i:08d}", "name": "Bench"},
            {"id": f"benchFc{i:08d}", "name": "Child", "parentFolderId": f"benchFo{i:08d}"},
        ],
        "workflows": [{"id": wf, "name": f"Bench {i}", "parentFolderId": f"benchFc{i:08d}",
                       "nodes": [{"name": "Manual Trigger", "type": "n8n-nodes-base.manualTrigger"}], "connections": {}}],
        "agents": [{"id": f"benchAg{i:08d}", "config": {"name": f"Agent {i}", "skills": [{"id": "s1"}]},
                    "skills": {"s1": {"name": "Skill", "instructions": "Be brief."}}}],
        "priorRuns": [{"workflow": wf, "hints": "HTTP 500"}],
    }
    return case


def replay(i: int) -> dict[str, Any]:
    case = _base(i)
    del case["conversation"]
    case["seed"] = {"mode": "replay", "threadId": f"thread-{i}"}
    return case


ARCHETYPES: list[Callable[[int], dict[str, Any]]] = [plain, behaviour, credentials, seeded, replay]


def generate(count: int) -> list[dict[str, Any]]:
    return [ARCHETYPES[i % len(ARCHETYPES)](i) for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000)
    args = parser.parse_args()
    bodies = generate(args.count)

    started = time.perf_counter()
    for index, body in enumerate(bodies):
        case, issues = parse_case(body, f"mem-{index}")
        assert case is not None, issues
    in_memory = time.perf_counter() - started

    with tempfile.TemporaryDirectory(prefix="bench-cases-") as tmp:
        directory = Path(tmp)
        for index, body in enumerate(bodies):
            (directory / f"bench-{index:05d}.json").write_text(json.dumps(body))
        started = time.perf_counter()
        cases, issues = load_disk([directory])
        from_disk = time.perf_counter() - started
    assert not issues, issues[:3]
    assert len(cases) == args.count

    print(f"archetypes: {', '.join(f.__name__ for f in ARCHETYPES)}")
    print(f"disk loader: {args.count} cases in {from_disk:.2f} s = {args.count / from_disk:,.0f} cases/s")
    print(f"in-memory validation: {args.count} cases in {in_memory:.2f} s = {args.count / in_memory:,.0f} cases/s")


if __name__ == "__main__":
    main()
