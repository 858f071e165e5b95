"""``orchestrator build-check``: the seed's ``eval:subagent`` (workflow-build checks) on the lanes."""

from __future__ import annotations

import typer

from orchestrator.cli.common import run_async
from orchestrator.cli.harness_common import console, console_hooks, default_cases, end_of_run
from orchestrator.cli.run_options import run_options
from orchestrator.harnesses import CHAT_BUILDER
from orchestrator.run.config import DEFAULT_BASELINE_PREFIX, RunConfig
from orchestrator.run.resolve import resolve

DATASET = "instance-ai-build-checks"
BASELINE_PREFIX = "build-check-baseline-"


def register(app: typer.Typer) -> None:
    @app.command("build-check")
    @run_options(builder=CHAT_BUILDER)
    def build_check(
        cfg: RunConfig,
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Two lines per unit."),
    ) -> None:
        """Build each case (default cases/build-check/, n8n's {id, prompt} fixtures or full cases) through
        the live build path and score the workflow with the binary-check suite only; builds are
        archived and deleted after scoring (--keep-workflows keeps them)."""
        from orchestrator.harnesses.build_check import build_check_stages
        from orchestrator.harnesses.build_check.harness import DEFAULT_CASES

        cfg = default_cases(cfg, DEFAULT_CASES).replace(
            verbose=verbose, dataset=cfg.dataset or DATASET,
            baseline_prefix=BASELINE_PREFIX if cfg.baseline_prefix == DEFAULT_BASELINE_PREFIX else cfg.baseline_prefix)
        cfg = resolve(cfg).config  # a flag error answers now, before the run's imports
        from orchestrator.experiments.langsmith_sync import default_hooks
        from orchestrator.harnesses.common import run_stages
        from orchestrator.results.console import summary_lines

        outcome = run_async(run_stages(cfg, build_check_stages(), [*console_hooks(verbose), *default_hooks(cfg)]))
        for line in summary_lines(outcome.results):
            console.print(line, markup=False, highlight=False)
        summary = outcome.results.summary
        if summary is not None:
            rate = f"{summary.pass_rate.rate:.0%}" if summary.pass_rate else "n/a"
            console.print(f"[bold]{outcome.run_id}[/bold]: {summary.passed_trials}/{summary.trials} build(s) pass "
                          f"every workflow check ({rate})")
        console.print(f"results: {outcome.results_path}")
        end_of_run(outcome)
