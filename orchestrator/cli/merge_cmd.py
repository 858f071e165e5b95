"""``orchestrator merge``: the seed's ``merge-results`` (sharded runs into one result and one experiment)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import run_async
from orchestrator.cli.harness_common import console
from orchestrator.ledger import default_state_dir
from orchestrator.run.config import DEFAULT_BASELINE_PREFIX


def register(app: typer.Typer) -> None:
    @app.command("merge")
    def merge_command(
        shards: Optional[list[Path]] = typer.Argument(None, help="The shards' eval-results.json files."),
        input_dir: Optional[Path] = typer.Option(None, "--input-dir", help="Also every eval-results.json under it."),
        output_dir: Path = typer.Option(Path("results") / "merged", "--output-dir", help="Where the merged files go."),
        upload_experiment: bool = typer.Option(False, "--upload-experiment", help="Record the merged units as one "
                                               "LangSmith experiment and compare it with the newest baseline."),
        dataset: Optional[str] = typer.Option(None, "--dataset", help="LangSmith dataset (the shards')."),
        baseline_prefix: str = typer.Option(DEFAULT_BASELINE_PREFIX, "--baseline-prefix",
                                            help="LangSmith baseline experiment prefix."),
        experiment_name: Optional[str] = typer.Option(None, "--experiment-name", help="Experiment name (LangSmith)."),
        baseline: Optional[Path] = typer.Option(None, "--baseline", help="A baseline eval-results.json to compare with."),
        state_dir: Path = typer.Option(default_state_dir(), "--state-dir", help="Where the LangSmith upload keeps its state."),
    ) -> None:
        """Merge the eval-results.json of sharded runs (disjoint cases) into one eval-results.json and
        eval-pr-comment.md, every figure computed again from the units."""
        from orchestrator.harnesses.merge.merge import merge, shard_paths
        from orchestrator.harnesses.merge.upload import finish

        merged = merge(shard_paths(list(shards or []), input_dir))
        for warning in [*merged.missing, *merged.warnings]:
            console.print(f"[yellow]{warning}[/yellow]")
        prefix = baseline_prefix if baseline_prefix.endswith("-") else f"{baseline_prefix}-"
        errors = run_async(finish(merged, output_dir, upload=upload_experiment, dataset=dataset, baseline_prefix=prefix,
                                  experiment_name=experiment_name, baseline=baseline, state_dir=state_dir))
        summary = merged.results.summary
        assert summary is not None
        rate = f"{summary.pass_rate.rate:.0%}" if summary.pass_rate else "n/a"
        console.print(f"merged {len(merged.shards)} shard(s): {len({u.case for u in merged.results.units})} case(s), "
                      f"{summary.units_finished}/{summary.units_total} units, pass rate {rate} "
                      f"({summary.passed_trials}/{summary.trials} trials)")
        console.print(f"results: {output_dir / 'eval-results.json'}")
        for error in errors:
            console.print(f"[red]error:[/red] {error}")
        if errors:
            raise typer.Exit(1)
