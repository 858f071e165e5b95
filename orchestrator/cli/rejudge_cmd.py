"""``orchestrator rejudge RUN --judge-model M``: replay a run's verdicts on another judge model."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("rejudge")
    def rejudge_command(
        run: Path = typer.Argument(..., metavar="RUN",
                                   help="The run's output folder or its eval-results.json (judge-inputs.jsonl beside it)."),
        judge_model: str = typer.Option(..., "--judge-model", help="Judge model, e.g. anthropic/claude-sonnet-4-6."),
        output_dir: Optional[Path] = typer.Option(
            None, "--output-dir", help="Where the re-judged results go (default: RUN/rejudged-<model>)."),
    ) -> None:
        """Re-judge every scenario and outcome expectation of a run with another judge model (no rebuild)."""
        from rich.console import Console

        from orchestrator.cli.common import run_async
        from orchestrator.compare.load import load_results
        from orchestrator.compare.pr_comment import render_pr_comment, write_pr_comment
        from orchestrator.errors import UserError
        from orchestrator.results.contract import to_document
        from orchestrator.results.report_html import write_report
        from orchestrator.results.writer import JUDGE_INPUTS_FILENAME, _atomic_write
        from orchestrator.verify.judge import Judge, JudgeConfig
        from orchestrator.verify.rejudge import RejudgeOutcome, read_judge_inputs, rejudge

        folder = run if run.is_dir() else run.parent
        results_path = run / "eval-results.json" if run.is_dir() else run
        results = load_results(results_path, role="RUN")
        inputs = read_judge_inputs(folder / JUDGE_INPUTS_FILENAME)
        config = JudgeConfig.from_env(model=judge_model)
        if not config.api_key:
            raise UserError("--judge-model: ANTHROPIC_API_KEY is not set: the judge cannot be called")

        async def go() -> RejudgeOutcome:
            judge = Judge(config)
            try:
                return await rejudge(results, inputs, judge)
            finally:
                await judge.aclose()

        outcome = run_async(go())
        safe = "".join(c if c.isalnum() or c in "-._" else "-" for c in judge_model)
        out = output_dir or folder / f"rejudged-{safe}"
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--output-dir: cannot create {out}: {exc.strerror}") from None
        import json

        from orchestrator.redact import redact_obj

        _atomic_write(out / "eval-results.json", json.dumps(redact_obj(to_document(outcome.results)), indent=2) + "\n")
        write_pr_comment(out, render_pr_comment(outcome.results, no_baseline_reason="re-judged run"))
        write_report(out, outcome.results)
        console = Console(stderr=True)
        summary = outcome.results.summary
        rate = f"{summary.pass_rate.rate:.0%}" if summary and summary.pass_rate else "n/a"
        console.print(f"{outcome.calls} judge call(s) replayed on {judge_model}: {len(outcome.changed)} verdict(s) "
                      f"changed, pass rate {rate}", markup=False, highlight=False)
        for line in outcome.changed[:50]:
            console.print(f"  {line}", markup=False, highlight=False)
        console.print(f"results: {out / 'eval-results.json'}", markup=False, highlight=False)
