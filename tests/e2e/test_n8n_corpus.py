"""n8n's own case corpus (``N8N_CORPUS_DIR``: a directory of case files pulled from n8n-io/n8n's
``packages/@n8n/instance-ai/evaluations/data/`` — ``workflows/``, ``agents/``, ``agents-exam/``,
``agents-natural/``, or any folder of such files; never committed here).

1. Every file's load verdict equals n8n's. n8n's verdict comes from ``expected-verdicts.json`` in
   that directory when present (``{"<folder>/<file>": "accepted" | "rejected"}``); otherwise from
   the rule of n8n's loader (``utils/load-eval-cases.ts`` ``parseTestCaseFile`` with
   ``harness/schema.ts`` ``EvalTestCaseSchema``): every file n8n ships was accepted at the commit it
   was written in, and the current schema refuses only the shapes it retired — the first shape's
   ``prompt``/``scenarios``, ``buildExpectations`` (``z.never``) and the pre-union seeding keys
   (``.strict()`` after the ``seed`` union) — plus a body that is not a JSON object.
2. Every rejection of a retired shape names the key that replaced it.
3. A sample of the accepted files runs offline (scripted model, embedded sandbox,
   ``--builder instance-ai``, 2 process lanes): every case is scored and nothing is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cases import load_disk

CORPUS_ENV = "N8N_CORPUS_DIR"
CORPUS = Path(os.environ[CORPUS_ENV]) if os.environ.get(CORPUS_ENV) else None
pytestmark = pytest.mark.skipif(CORPUS is None, reason=f"{CORPUS_ENV} is not set (a directory of n8n case files)")

#: Retired top-level keys of n8n's case schema → a word the rejection must name (the replacement).
RETIRED = {
    "prompt": "conversation", "scenarios": "executionScenarios",
    "buildExpectations": "outcomeExpectations",
    "conversationSeed": "seed", "seedFile": "seed", "priorConversation": "seed", "seedThread": "seed",
}


def _files() -> list[Path]:
    assert CORPUS is not None
    return sorted(p for p in CORPUS.rglob("*.json") if p.name != "expected-verdicts.json")


def _body(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def _n8n_verdict(path: Path) -> str:
    assert CORPUS is not None
    manifest = CORPUS / "expected-verdicts.json"
    if manifest.is_file():
        verdicts = json.loads(manifest.read_text())
        key = path.relative_to(CORPUS).as_posix()
        if key in verdicts:
            return str(verdicts[key])
    body = _body(path)
    if not isinstance(body, dict) or RETIRED.keys() & body.keys():
        return "rejected"
    return "accepted"


def test_every_file_loads_as_n8n_loads_it() -> None:
    """Accepted here ⇔ accepted by n8n, file by file; the per-folder counts are printed."""
    assert CORPUS is not None
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    disagreements = []
    for path in _files():
        folder = path.parent.relative_to(CORPUS).as_posix()
        cases, issues = load_disk([path])
        ours = "accepted" if cases else "rejected"
        theirs = _n8n_verdict(path)
        rows[folder]["files"] += 1
        rows[folder]["n8n accepts"] += theirs == "accepted"
        rows[folder]["we accept"] += ours == "accepted"
        if ours != theirs:
            rows[folder]["disagreements"] += 1
            disagreements.append(f"{path.relative_to(CORPUS)}: n8n {theirs}, ours {ours}: "
                                 + "; ".join(f"{i.field}: {i.message}" for i in issues[:3]))
        body = _body(path) if theirs == "rejected" else None
        if isinstance(body, dict):
            for key in RETIRED.keys() & body.keys():
                named = [i.message for i in issues if i.field == key]
                assert named and RETIRED[key] in named[0], f"{path.name}: {key}: {named}"
    for folder, counts in sorted(rows.items()):
        print(f"{folder}: {counts['files']} files, n8n accepts {counts['n8n accepts']}, we accept "
              f"{counts['we accept']}, {counts['disagreements']} disagreement(s)")
    assert disagreements == []


@pytest.mark.n8n
@pytest.mark.slow
async def test_a_sample_of_the_accepted_corpus_runs_offline_and_is_scored(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline end to end on n8n's cases: scored means a judged verdict on a scenario or an
    expectation, or a build failure charged to the builder (``results/scoring.py``)."""
    from support.process_lanes import leftovers
    from support.tools import require

    from orchestrator.ledger import Ledger
    from orchestrator.results.model import UnitResult
    from orchestrator.results.scoring import UnitOutcome, unit_outcome
    from orchestrator.run.config import RunConfig
    from orchestrator.run.pipeline import run
    from orchestrator.toolchain import Toolchain, default_cache_dir

    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "N8N_INSTANCE_AI_MODEL_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    accepted = [p for p in _files() if load_disk([p])[0]]
    size = int(os.environ.get("N8N_CORPUS_SAMPLE", "8"))
    by_folder: dict[Path, list[Path]] = defaultdict(list)
    for p in accepted:
        by_folder[p.parent].append(p)
    sample: list[Path] = []
    while len(sample) < min(size, len(accepted)):  # round-robin over the folders
        for files in by_folder.values():
            if files and len(sample) < size:
                sample.append(files.pop(0))
    # n8n loads each folder as its own tier, so a slug may repeat across folders; one run needs unique
    # slugs: a repeated file name is staged as <folder>--<name> (symlinks in tmp_path, never copies)
    stems = Counter(p.stem for p in sample)
    staged = tmp_path / "cases"
    staged.mkdir()
    cases = []
    for p in sample:
        link = staged / (f"{p.parent.name}--{p.name}" if stems[p.stem] > 1 else p.name)
        link.symlink_to(p)
        cases.append(link)
    run_id = f"n8n-corpus-{int(time.time()) % 100000}"
    state, out = tmp_path / "state", tmp_path / "out"
    cfg = RunConfig(cases_paths=cases, backend="process", lanes=2, builder="instance-ai", model_server="scripted",
                    state_dir=state, output_dir=out, run_id=run_id)
    t0 = time.monotonic()
    outcome = await run(cfg)
    elapsed = time.monotonic() - t0
    assert outcome.ok, outcome.errors
    assert outcome.cleanup_failures == []
    assert leftovers(run_id, state) == []
    assert Ledger.for_run(run_id, state).open_entries() == []
    units = [UnitResult.model_validate(u) for u in json.loads((out / "eval-results.json").read_text())["orchestrator"]["units"]]
    scored = {UnitOutcome.passed, UnitOutcome.failed, UnitOutcome.build_failed}
    outcomes = {u.case: unit_outcome(u) for u in units}
    print(f"{len(units)} units in {elapsed:.0f} s ({len(units) / elapsed * 60:.1f} units/min): "
          + ", ".join(f"{c}={o.value}" for c, o in sorted(outcomes.items())))
    assert sorted(outcomes) == sorted(p.stem for p in cases)
    unscored = {u.case: [r.reason for r in [*u.scenarios, *u.expectations]][:2] for u in units
                if outcomes[u.case] not in scored}
    not_run = {u.case: (u.build.error or "")[:160] for u in units if outcomes[u.case] == UnitOutcome.build_failed}
    print(f"outcomes: {dict(Counter(o.value for o in outcomes.values()))}; unscored: {unscored}; "
          f"build failures: {not_run}")
    print("units per kind (scored / all): " + ", ".join(
        f"{kind} {scored_n}/{all_n}" for kind, (scored_n, all_n) in units_per_kind(units).items()))
    if keep := os.environ.get("N8N_CORPUS_KEEP"):  # the run's results, for a closer look
        shutil.copytree(out, Path(keep), dirs_exist_ok=True)
    assert unscored == {}


def units_per_kind(units: list[Any]) -> dict[str, tuple[int, int]]:
    """Rows per kind of unit — scenarios, and each expectation kind (intent rows apart from
    process) — as ``(scored, all)``: a scored row is one that is not ``incomplete``."""
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for unit in units:
        rows = [("scenario", s.verdict) for s in unit.scenarios]
        rows += [("intent" if e.text.startswith("intent") and e.text.endswith("exact-match") else e.kind, e.verdict)
                 for e in unit.expectations]
        for kind, verdict in rows:
            tally[kind][1] += 1
            tally[kind][0] += verdict.value != "incomplete"
    return {kind: (n[0], n[1]) for kind, n in sorted(tally.items())}
