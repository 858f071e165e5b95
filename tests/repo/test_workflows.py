"""The GitHub workflows: valid YAML with the keys Actions needs, only planned CLI commands and flags,
only files that exist in the repository, and no secret or user input pasted into a script.

``PLANNED_SURFACE`` is the CLI surface the team planned (sub-command → the flags it takes); the Helm
chart test checks the chart's container args against it too.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"

_RUN_FLAGS = {
    "--backend", "--lanes", "--base-url", "--profile", "--env", "--source", "--suite", "--filter", "--exclude",
    "--tier", "--iterations", "--concurrency", "--per-lane-builds", "--timeout-ms", "--build-timeout-ms",
    "--build-max-attempts", "--build-mcp-timeout-ms", "--mcp-server", "--build-cwd", "--output-dir",
    "--keep-workflows", "--experiment-name", "--dataset", "--baseline", "--baseline-prefix", "--max-cost-usd",
    "--metrics-port", "--metrics-host", "--pushgateway", "--resume", "--resume-existing", "--run-id", "--builder",
    # the model gateway (issue 37)
    "--model-gateway", "--no-model-gateway", "--model-gateway-host", "--model-gateway-port", "--model-gateway-url",
    "--concurrency-min", "--concurrency-max", "--provider-wait-s",
}
PLANNED_SURFACE: dict[str, set[str]] = {
    "lanes install": set(),
    "lanes up": {"--backend", "--count", "--profile", "--env", "--run-id", "--state-dir", "--base-url"},
    "lanes status": {"--run-id"},
    "lanes down": {"--run-id"},
    "cleanup": {"--run-id", "--backend", "--kubernetes", "--namespace", "--context", "--grace-seconds",
                "--lease-grace-seconds", "--dry-run"},
    "cases list": set(),
    "cases validate": set(),
    "run": _RUN_FLAGS,
    "compare": {"--output-dir"},
    "cost-report": {"--label", "--out"},
    "ab": {"--arm", "--arm-env", "--arm-model-url", "--arm-model-key-env", "--plan", "--effect", "--power",
           "--sequential"} | _RUN_FLAGS,
}
GLOBAL_FLAGS = {"--verbose", "-v"}
#: Paths other helpers are writing at the same time; referenced here before they land.
EXPECTED_PATHS = {"Dockerfile", "lanes/Dockerfile", "scripts/test.sh"}
_PATH_TOKEN = re.compile(
    r"(?<![\w.${-])(?:\./)?((?:scripts|lanes|helm|docs|orchestrator|tests|\.github)/[\w.-]+(?:/[\w.-]+)*|Dockerfile)"
    r"(?![\w/-])"
)
_ORCH_CMD = re.compile(r"(?:^|(?<=[\s;&|(]))orchestrator\s+[^\n;&|]*")
_SHELL_OPS = {"&&", "||", "|", ";", ">", ">>", "2>&1", "<"}


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yml"))


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


def steps(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for job_id, job in doc["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


def run_blocks(doc: dict[str, Any]) -> Iterator[str]:
    for _, step in steps(doc):
        if "run" in step:
            yield step["run"]


def logical_lines(script: str) -> list[str]:
    """Shell lines with backslash continuations joined."""
    return script.replace("\\\n", " ").splitlines()


def orchestrator_commands(script: str) -> list[list[str]]:
    """Every ``orchestrator …`` command line in a script, split into words (up to a shell operator)."""
    out = []
    for line in logical_lines(script):
        if line.lstrip().startswith("#"):
            continue
        for match in _ORCH_CMD.finditer(line):
            words = shlex.split(match.group(0), comments=True)
            for i, w in enumerate(words):
                if w in _SHELL_OPS:
                    words = words[:i]
                    break
            out.append(words)
    return out


def test_there_are_the_four_workflows_and_the_reusable_one() -> None:
    names = {p.name for p in workflow_files()}
    assert {"ci.yml", "nightly.yml", "ab-experiment.yml", "pr-evals.yml", "cluster-run.yml"} <= names


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_required_keys(path: Path) -> None:
    doc = load(path)
    assert doc.get("name")
    assert doc.get("on"), f"{path.name}: no triggers"
    assert doc.get("jobs"), f"{path.name}: no jobs"
    for job_id, job in doc["jobs"].items():
        if "uses" in job:  # a call of a reusable workflow has no steps of its own
            target = job["uses"]
            assert target.startswith("./.github/workflows/") and (REPO / target).is_file(), target
            continue
        assert job.get("runs-on"), f"{path.name}: job {job_id} has no runs-on"
        assert job.get("steps"), f"{path.name}: job {job_id} has no steps"
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), f"{path.name}: step {step} needs exactly one of run/uses"


def test_triggers() -> None:
    assert {"push", "pull_request"} <= set(load(WORKFLOWS / "ci.yml")["on"])
    nightly = load(WORKFLOWS / "nightly.yml")["on"]
    assert nightly["schedule"][0]["cron"] and "workflow_dispatch" in nightly
    ab = load(WORKFLOWS / "ab-experiment.yml")["on"]["workflow_dispatch"]["inputs"]
    assert {"control_model", "variant_model", "control_flags", "variant_flags"} <= set(ab)
    assert ab["target"]["options"] == ["runner", "cluster"]
    assert "pull_request" in load(WORKFLOWS / "pr-evals.yml")["on"]
    assert "workflow_call" in load(WORKFLOWS / "cluster-run.yml")["on"]


def test_ci_runs_the_readme_test_command() -> None:
    assert "bash scripts/test.sh" in list(run_blocks(load(WORKFLOWS / "ci.yml")))[-1]


def all_orchestrator_commands() -> list[tuple[str, list[str]]]:
    return [(p.name, words) for p in workflow_files() for script in run_blocks(load(p))
            for words in orchestrator_commands(script)]


def test_orchestrator_commands_use_the_planned_surface() -> None:
    commands = all_orchestrator_commands()
    assert len(commands) >= 5  # the scan does find them
    for file, words in commands:
        rest = [w for w in words[1:] if w not in GLOBAL_FLAGS]
        sub = " ".join(rest[:2]) if " ".join(rest[:2]) in PLANNED_SURFACE else rest[0]
        assert sub in PLANNED_SURFACE, f"{file}: `{' '.join(words)}` is not a planned sub-command"
        flags = {w.split("=", 1)[0] for w in rest if w.startswith("-") and not w.startswith("-$")}
        unknown = flags - PLANNED_SURFACE[sub] - GLOBAL_FLAGS
        assert not unknown, f"{file}: `orchestrator {sub}` has unplanned flags {sorted(unknown)}"


def test_the_workflows_run_what_they_promise() -> None:
    seen = {(f, " ".join(w[1:3])) for f, w in all_orchestrator_commands()}
    assert ("pr-evals.yml", "run --backend") in seen
    pr = [w for f, w in all_orchestrator_commands() if f == "pr-evals.yml" and w[1] == "run"][0]
    assert pr[pr.index("--backend") + 1] == "docker" and pr[pr.index("--tier") + 1] == "pr"
    ab = [w for f, w in all_orchestrator_commands() if f == "ab-experiment.yml" and w[1] == "ab"][0]
    assert ab[ab.index("--backend") + 1] == "docker"
    pr_doc = load(WORKFLOWS / "pr-evals.yml")
    assert any("gh pr comment" in r and "eval-pr-comment.md" in r for r in run_blocks(pr_doc))
    assert pr_doc["permissions"]["pull-requests"] == "write"
    assert any("GITHUB_STEP_SUMMARY" in r for r in run_blocks(load(WORKFLOWS / "ab-experiment.yml")))
    cluster = "\n".join(run_blocks(load(WORKFLOWS / "cluster-run.yml")))
    assert "helm upgrade --install" in cluster and "docker push" in cluster and "GITHUB_STEP_SUMMARY" in cluster
    assert cluster.count("docker build ") == 2


def referenced_paths(path: Path) -> set[str]:
    text = path.read_text()
    return {m.group(1).rstrip(".") for m in _PATH_TOKEN.finditer(text)}


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_referenced_repo_paths_exist(path: Path) -> None:
    refs = referenced_paths(path)
    missing = {r for r in refs if not (REPO / r).exists() and r not in EXPECTED_PATHS}
    assert not missing, f"{path.name} references missing paths {sorted(missing)}"


def test_path_scan_finds_paths() -> None:
    refs = set().union(*(referenced_paths(p) for p in workflow_files()))
    assert {"scripts/test.sh", "lanes/Dockerfile", "Dockerfile", "helm/n8n-eval-orchestrator",
            "orchestrator/toolchain.py", ".github/workflows/cluster-run.yml"} <= refs


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_no_secret_or_input_pasted_into_scripts(path: Path) -> None:
    """Secrets and user inputs reach scripts through env, never as ${{ }} inside `run:` (script injection)."""
    for script in run_blocks(load(path)):
        assert not re.search(r"\$\{\{\s*(secrets|inputs|github\.event)\.", script), script


def test_surface_parser_catches_a_bad_command() -> None:
    (words,) = orchestrator_commands('orchestrator runn --lanes 2 && echo "n8n-eval-orchestrator up"')
    assert words == ["orchestrator", "runn", "--lanes", "2"]
    assert orchestrator_commands("helm upgrade --install n8n-eval-orchestrator helm/n8n-eval-orchestrator") == []


# ---- tiers: every place that picks cases by tier picks at least one bundled case ------------------

CHART_VALUES = REPO / "helm" / "n8n-eval-orchestrator" / "values.yaml"
_TIER_PATTERNS = (
    re.compile(r"--tier[ =]+[\"']?([$\w.-]+)"),          # CLI flag (shell, README)
    re.compile(r"\brun\.tier=([$\w.-]+)"),               # helm --set run.tier=X
    re.compile(r"^[ \t]*tier:[ \t]*[\"']?([$\w.-]+)", re.M),     # YAML values (workflow values blocks, docs)
    re.compile(r"[\"']tier[\"']:\s*([^,}\n]+)"),         # a values dict built in Python
)


def tier_references(text: str, inputs: dict[str, Any] | None = None) -> list[str]:
    """Every tier a text selects; ``$TIER`` / ``os.environ["TIER"]`` resolve to the workflow input's default."""
    found: list[str] = []
    for pattern in _TIER_PATTERNS:
        for match in pattern.finditer(text):
            value = match.group(1).strip().strip("\"'")
            if "TIER" in value or "inputs.tier" in value:
                default = ((inputs or {}).get("tier") or {}).get("default")
                assert default, f"a tier comes from the workflow input `tier`, which has no default: {match.group(0)}"
                value = str(default)
            found.append(value)
    return found


def tier_sources() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for path in workflow_files():
        inputs = (load(path)["on"].get("workflow_dispatch") or {}).get("inputs") or {}
        out += [(path.name, t) for t in tier_references(path.read_text(), inputs)]
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "scripts").glob("*.sh"))]:
        out += [(path.name, t) for t in tier_references(path.read_text())]
    out.append(("values.yaml", yaml.safe_load(CHART_VALUES.read_text())["run"]["tier"]))
    return out


def bundled_tiers() -> dict[str, int]:
    from orchestrator.cases.selection import select_cases
    from orchestrator.cases.sources import load_disk

    cases, issues = load_disk([REPO / "cases"])
    assert not issues and cases
    tiers = {t for c in cases for t in c.case.datasets}
    return {t: len(select_cases(cases, tier=t)) for t in tiers}


def test_every_tier_selected_anywhere_selects_bundled_cases() -> None:
    """The nightly and A/B workflows, the chart's default, the README and docs commands: none may pick a
    tier no bundled case carries (that run exits 2 with "no cases selected")."""
    counts = bundled_tiers()
    sources = tier_sources()
    where = {f for f, _ in sources}
    assert {"nightly.yml", "ab-experiment.yml", "pr-evals.yml", "values.yaml", "README.md", "cluster.md"} <= where
    empty = sorted({(f, t) for f, t in sources if counts.get(t, 0) == 0})
    assert not empty, f"tiers that select no bundled case: {empty}; the corpus has {sorted(counts)}"
    assert dict(sources)["nightly.yml"] == "full"


def test_tier_scan_catches_a_tier_the_corpus_lacks() -> None:
    assert tier_references('orchestrator run --tier nightly && x') == ["nightly"]
    assert tier_references("run:\n  tier: ab\n") == ["ab"]
    assert tier_references('"tier": os.environ["TIER"],', {"tier": {"default": "smoke"}}) == ["smoke"]
    assert bundled_tiers().get("nightly", 0) == 0 and bundled_tiers().get("ab", 0) == 0


def test_cluster_run_creates_the_image_pull_secret_before_the_install(tmp_path: Path) -> None:
    """cluster-run.yml turns the registry credentials into a dockerconfigjson Secret (created or
    updated) before `helm upgrade --install`, which names it in imagePullSecrets; the credentials reach
    kubectl only in a file, never on a command line. The step's script runs here against a stand-in
    ``kubectl`` on PATH that records its arguments and the file it is given."""
    import base64
    import json
    import os
    import subprocess

    named = {s.get("name"): (i, s) for i, (_, s) in enumerate(steps(load(WORKFLOWS / "cluster-run.yml")))}
    pull_i, pull = named["Image pull Secret"]
    helm_i, helm_step = named["helm upgrade --install"]
    assert pull_i < helm_i
    assert "secrets.EVAL_REGISTRY_PASSWORD" in pull["env"]["PULL_PASSWORD"]
    (install,) = [line for line in logical_lines(helm_step["run"]) if "helm upgrade --install" in line]
    assert "imagePullSecrets[0].name=n8n-eval-pull" in shlex.split(install)

    bin_dir, log = tmp_path / "bin", tmp_path / "kubectl.log"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(
        "#!/bin/bash\nprintf '%s\\n' \"$*\" >> \"$KUBECTL_LOG\"\n"
        "for a in \"$@\"; do case \"$a\" in --from-file=.dockerconfigjson=*) "
        "cp \"${a#--from-file=.dockerconfigjson=}\" \"$KUBECTL_LOG.json\";; esac; done\ncat > /dev/null\n")
    (bin_dir / "kubectl").chmod(0o755)
    password = "pull-token-objects-test-0123456789"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", KUBECTL_LOG=str(log), RUNNER_TEMP=str(tmp_path),
               NAMESPACE="evals", REGISTRY="registry.invalid:5000/evals", PULL_USER="bot", PULL_PASSWORD=password)
    subprocess.run(["bash", "-e", "-c", pull["run"]], env=env, check=True, timeout=60)
    calls = log.read_text()
    assert password not in calls and "n8n-eval-pull" in calls and "--type=kubernetes.io/dockerconfigjson" in calls
    assert "apply -f -" in calls
    config = json.loads((tmp_path / "kubectl.log.json").read_text())
    assert config == {"auths": {"registry.invalid:5000": {
        "auth": base64.b64encode(f"bot:{password}".encode()).decode()}}}
    assert not (tmp_path / "pull.json").exists()  # removed once applied
