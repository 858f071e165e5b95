"""Pairwise examples: a prompt with its dos and don'ts, from a local file or a LangSmith dataset.

Shapes read (each example becomes a single-prompt eval case whose slug is the example id):

- a JSON list in LangSmith's example shape (n8n's ``data/pairwise/local.json``):
  ``[{"id", "inputs": {"prompt", "evals" | "context": {"dos", "donts"}}}]``;
- a ``results.jsonl`` of an earlier pairwise run (``--examples-jsonl``): rows with ``exampleId``,
  ``prompt``, ``dos``, ``donts``; repeated ids (one row per iteration) are read once;
- a LangSmith dataset (``--dataset``), criteria under ``inputs.evals`` or ``inputs.context`` as
  n8n's ``loadExamples`` reads both layouts.

``--example-ids-file`` keeps the ids it lists (one a line, ``#`` comments), ``--max-examples`` the
first N, in that order (n8n's ``main``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.cases import CaseIssue, CaseLoadError, LoadedCase, parse_case
from orchestrator.cases.issues import FILE_FIELD
from orchestrator.errors import UserError

#: n8n's criteria when an example has none (``evaluateSingleGeneration``)
DEFAULT_DOS = "Follow the user prompt accurately"
DEFAULT_DONTS = "Do not add unnecessary complexity"
DEFAULT_DATASET = "instance-ai-builder-from-plans"
DEFAULT_EXAMPLES = Path("cases") / "pairwise"


@dataclass(frozen=True)
class Example:
    id: str
    prompt: str
    dos: str | None = None
    donts: str | None = None


def _criteria(inputs: dict[str, Any]) -> dict[str, Any]:
    for key in ("evals", "context"):
        if isinstance(inputs.get(key), dict):
            return dict(inputs[key])
    return {}


def example_of(raw: Any) -> Example | None:
    """One example from either shape; None when it has no id or no prompt."""
    if not isinstance(raw, dict):
        return None
    if isinstance(raw.get("inputs"), dict):
        inputs = raw["inputs"]
        crit = _criteria(inputs)
        ident, prompt = raw.get("id"), inputs.get("prompt")
    else:
        crit = raw
        ident, prompt = raw.get("exampleId", raw.get("id")), raw.get("prompt")
    if not isinstance(ident, str) or not ident or not isinstance(prompt, str) or not prompt.strip():
        return None
    return Example(ident, prompt, crit.get("dos") if isinstance(crit.get("dos"), str) else None,
                   crit.get("donts") if isinstance(crit.get("donts"), str) else None)


def read_examples(path: Path) -> tuple[list[Example], list[CaseIssue]]:
    """A ``.jsonl`` (one row a line) or ``.json`` (a list) file, or every such file in a folder."""
    files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl")) if path.is_dir() else [path]
    examples: list[Example] = []
    issues: list[CaseIssue] = []
    seen: set[str] = set()
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            issues.append(CaseIssue(str(file), FILE_FIELD, f"cannot read: {exc.strerror or exc}"))
            continue
        try:
            rows = ([json.loads(line) for line in text.splitlines() if line.strip()] if file.suffix == ".jsonl"
                    else json.loads(text))
        except ValueError as exc:
            issues.append(CaseIssue(str(file), FILE_FIELD, f"not JSON: {exc}"))
            continue
        for index, row in enumerate(rows if isinstance(rows, list) else [rows]):
            example = example_of(row)
            if example is None:
                issues.append(CaseIssue(f"{file}#{index}", FILE_FIELD, "an example needs an id and a prompt"))
            elif example.id not in seen:  # results.jsonl: one row per iteration
                seen.add(example.id)
                examples.append(example)
    return examples, issues


def dataset_examples(name: str) -> list[Example]:
    """The examples of a LangSmith dataset (``LANGSMITH_API_KEY``; the run's endpoint)."""
    import os

    from orchestrator.experiments.langsmith_sync import API_KEY_ENV, ENDPOINT_ENV, make_client

    key = os.environ.get(API_KEY_ENV)
    if not key:
        raise UserError(f"--dataset {name}: LangSmith needs {API_KEY_ENV} (or pass a local file: --examples-jsonl)")
    client = make_client(key, os.environ.get(ENDPOINT_ENV) or None)
    try:
        rows = list(client.list_examples(dataset_name=name))
    except Exception as exc:  # the SDK's errors are many; any is one line naming the dataset
        raise UserError(f"--dataset {name}: cannot read it from LangSmith: {type(exc).__name__}: {exc}") from None
    return [e for e in (example_of({"id": str(r.id), "inputs": r.inputs or {}}) for r in rows) if e is not None]


def criteria_lines(text: str | None) -> list[str]:
    """The non-blank lines of a criteria text, stripped."""
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def criteria(example: Example) -> tuple[list[str], list[str]]:
    """The example's dos and don'ts, one per line (n8n's defaults when it has none); a don't is
    worded as n8n words it, ``DO NOT …``, unless it already says so."""
    donts = [line if line.lower().startswith(("do not", "don't")) else f"DO NOT {line}"
             for line in criteria_lines(example.donts or DEFAULT_DONTS)]
    return criteria_lines(example.dos or DEFAULT_DOS), donts


def as_case(example: Example, source: str) -> LoadedCase:
    """The example as a single-prompt eval case: its criteria are the outcome expectations, which
    the panel judges."""
    dos, donts = criteria(example)
    body = {"conversation": [{"role": "user", "text": example.prompt}], "complexity": "medium",
            "tags": ["pairwise"], "outcomeExpectations": [*dos, *donts]}
    case, issues = parse_case(body, source)
    if case is None:
        raise CaseLoadError(issues)
    return LoadedCase(slug=example.id, source=source, case=case)


def select(examples: list[Example], ids_file: Path | None, max_examples: int | None) -> list[Example]:
    """The examples to run: those listed in ``ids_file`` (one id a line, ``#`` comments) if given, then
    the first ``max_examples``. Raises ``UserError`` naming the flag when the file cannot be read."""
    if ids_file is not None:
        try:
            wanted = [s.strip() for s in ids_file.read_text(encoding="utf-8").splitlines()]
        except OSError as exc:
            raise UserError(f"--example-ids-file: cannot read {ids_file}: {exc.strerror}") from None
        keep = {s for s in wanted if s and not s.startswith("#")}
        examples = [e for e in examples if e.id in keep]
    return examples[:max_examples] if max_examples is not None else examples
