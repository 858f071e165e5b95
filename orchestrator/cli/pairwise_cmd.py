"""``orchestrator pairwise``: the seed's ``eval:pairwise`` on the lanes; ``pairwise-compare`` and
``pairwise-upload`` read its folders without lanes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import positive, run_async
from orchestrator.cli.harness_common import console, end_of_run
from orchestrator.cli.run_options import run_options
from orchestrator.errors import ConfigError
from orchestrator.harnesses import CHAT_BUILDER
from orchestrator.run.config import RunConfig


def register(app: typer.Typer) -> None:
    @app.command("pairwise")
    @run_options(builder=CHAT_BUILDER, timeout_ms=1_200_000)
    def pairwise(
        cfg: RunConfig,
        examples_jsonl: Optional[Path] = typer.Option(
            None, "--examples-jsonl", help="Examples from an earlier run's results.jsonl (exampleId, prompt, dos, donts)."),
        judges: int = typer.Option(3, "--judges", help="Judges in the panel (majority vote on pairwise_primary)."),
        judge_model: str = typer.Option("claude-sonnet-4-5-20250929", "--judge-model", help="Model of the judges."),
        max_examples: Optional[int] = typer.Option(None, "--max-examples", help="Only the first N examples."),
        example_ids_file: Optional[Path] = typer.Option(
            None, "--example-ids-file", help="Only these example ids (one a line, # comments)."),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Per-example lines."),
    ) -> None:
        """Build each example (CASES: example files, default cases/pairwise/; --dataset: a LangSmith
        dataset; --examples-jsonl: an earlier results.jsonl) and score the workflow with an LLM judge
        panel against its dos and don'ts. Writes summary.json, results.jsonl, results.csv and
        workflows/ to --output-dir (default results/pairwise/<time>). --timeout-ms is the build
        budget (default 1200000). Upload to LangSmith is a separate step: orchestrator pairwise-upload."""
        from orchestrator.cli.harness_common import console_hooks
        from orchestrator.harnesses.common import internal_results, run_stages
        from orchestrator.harnesses.pairwise import examples as ex
        from orchestrator.harnesses.pairwise.harness import DEFAULT_EXPERIMENT, PairwiseSettings, pairwise_stages

        positive(judges, "--judges")
        positive(max_examples, "--max-examples")
        if examples_jsonl is not None and cfg.dataset:
            raise ConfigError("--examples-jsonl and --dataset name two example sources: give one")
        out = cfg.output_dir or Path("results") / "pairwise" / dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
        if cfg.dataset:
            loaded, label = ex.dataset_examples(cfg.dataset), cfg.dataset
        else:
            sources = [examples_jsonl] if examples_jsonl else (
                cfg.cases_paths if cfg.cases_paths != [Path("cases")] else [ex.DEFAULT_EXAMPLES])
            loaded, issues = [], []
            for source in sources:
                found, problems = ex.read_examples(source)
                loaded += [e for e in found if e.id not in {x.id for x in loaded}]
                issues += problems
            if issues:
                from orchestrator.cases import CaseLoadError

                raise CaseLoadError(issues)
            label = ", ".join(str(s) for s in sources)
        chosen = ex.select(loaded, example_ids_file, max_examples)
        if not chosen:
            raise ConfigError("no pairwise examples selected: check the example source, --example-ids-file and --max-examples")
        if cfg.build_timeout_ms is None:  # the seed's --timeout-ms is the per-example build budget
            cfg = cfg.replace(build_timeout_ms=cfg.timeout_ms)
        settings = PairwiseSettings(examples=chosen, judges=judges, judge_model=judge_model, output_dir=out,
                                    dataset=label, experiment_name=cfg.experiment_name or DEFAULT_EXPERIMENT,
                                    iterations=cfg.iterations)
        cfg = internal_results(cfg.replace(verbose=verbose))
        outcome = run_async(run_stages(cfg, pairwise_stages(settings), console_hooks(verbose) if verbose else []))
        summary_path = out / "summary.json"
        if summary_path.is_file():
            import json

            totals = json.loads(summary_path.read_text())["totals"]
            console.print(f"[bold]{outcome.run_id}[/bold]: {totals['runs']} run(s) of {totals['examples']} example(s): "
                          f"primary pass rate {totals['primaryPassRate']:.0%}, avg diagnostic "
                          f"{totals['avgDiagnostic']:.2f}, build failures {totals['buildFailures'] or 'none'}")
        console.print(f"results: {out}")
        end_of_run(outcome)

    @app.command("pairwise-compare")
    def pairwise_compare(
        a_dir: Path = typer.Option(..., "--a-dir", "--ee-dir", help="The first (baseline) pairwise folder."),
        b_dir: Path = typer.Option(..., "--b-dir", "--ia-dir", help="The second pairwise folder."),
        out: Path = typer.Option(Path("comparison.html"), "--out", help="Where the page goes."),
        a_label: Optional[str] = typer.Option(None, "--a-label", help="Name of the first side (default: its folder)."),
        b_label: Optional[str] = typer.Option(None, "--b-label", help="Name of the second side (default: its folder)."),
    ) -> None:
        """A self-contained HTML page comparing two pairwise folders prompt by prompt (the seed's
        eval:pairwise:compare): headline metrics, verdict totals, collapsed rows whose workflow
        previews render only when opened."""
        from orchestrator.harnesses.pairwise.compare import load_side, write_page

        a, b = load_side(a_dir, a_label), load_side(b_dir, b_label)
        page, rows = write_page(a, b, out)
        counts: dict[str, int] = {}
        for row in rows:
            counts[row.verdict] = counts.get(row.verdict, 0) + 1
        console.print(f"{len(rows)} prompt(s): " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        console.print(f"page: {page}")

    @app.command("pairwise-upload")
    def pairwise_upload(
        folder: Path = typer.Argument(..., help="A pairwise folder (summary.json + results.jsonl)."),
        experiment_name: Optional[str] = typer.Option(None, "--experiment-name", help="Experiment prefix "
                                                      "(default: the folder's summary.json experimentName)."),
    ) -> None:
        """Record a pairwise folder as one LangSmith experiment (LANGSMITH_API_KEY): one run per
        results.jsonl row, its feedback rows as LangSmith feedback."""
        from orchestrator.harnesses.pairwise.upload import upload_folder

        name, rows = run_async(upload_folder(folder, experiment_name))
        console.print(f"LangSmith experiment {name}: {rows} run(s)")
