"""Bad flags and env give ONE line on stderr — ``error: <the flag or variable>: …`` — and exit 2.

Every case runs the real ``orchestrator`` command; none needs a lane (the checks run before
anything starts), so the whole file takes seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.tools import free_port, require

REPO = Path(__file__).resolve().parents[3]
ORCH = [sys.executable, "-m", "orchestrator"]  # the real CLI of whatever venv runs the tests
CASE = "smoke-manual-set-static-fields"


def closed_port() -> int:
    """A loopback port in this suite's range (6100–6199) that nothing listens on."""
    return free_port(6100, 6200)


def run_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("ANTHROPIC_", "N8N_", "LANGSMITH_", "LANGTRACER_"))}
    cmd = [*ORCH, "run", str(REPO / "cases"), "--filter", CASE, "--model-server", "scripted",
           "--state-dir", str(tmp_path / "state"), "--output-dir", str(tmp_path / "out"), *args]
    return subprocess.run(cmd, env=base | (env or {}) | {"COLUMNS": "400"}, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *names: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    [line] = lines
    assert line.startswith("error: "), line
    for name in names:
        assert name in line, line
    return line


BAD_FLAGS = [
    (("--concurrency", "-1"), "--concurrency"),
    (("--lanes", "0"), "--lanes"),
    (("--iterations", "0"), "--iterations"),
    (("--backend", "nope"), "--backend"),
    (("--profile", "no-such-profile"), "--profile"),
    (("--env", "NOT_A_PAIR"), "--env"),
    (("--env", "=value"), "--env"),
    (("--outage-waits", "soon"), "--outage-waits"),
    (("--metrics-port", "70000"), "--metrics-port"),
    (("--model-server", "mystery"), "--model-server"),
    (("--backend", "static"), "--base-url"),
    (("--backend", "static", "--base-url", "ftp://127.0.0.1:6100"), "--base-url"),
    (("--backend", "static", "--base-url", "http://127.0.0.1:6100", "--lanes", "2"), "--lanes"),
]


@pytest.fixture(scope="module")
def bad_flag_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], tuple[Path, subprocess.CompletedProcess[str]]]:
    """Every bad-flag invocation at once (each is a few seconds of imports, mostly waiting)."""
    jobs = {args: tmp_path_factory.mktemp("cli") for args, _ in BAD_FLAGS}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {args: pool.submit(run_cli, tmp, *args) for args, tmp in jobs.items()}
        return {args: (jobs[args], f.result()) for args, f in futures.items()}


@pytest.mark.parametrize("args,flag", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flag_is_one_line_naming_it(bad_flag_runs, args: tuple[str, ...], flag: str) -> None:
    tmp_path, done = bad_flag_runs[args]
    assert_one_line_error(done, flag)
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_unreachable_static_lane_names_the_lane_and_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    line = assert_one_line_error(run_cli(tmp_path, "--backend", "static", "--base-url", url, "--lanes", "1"),
                                 "--base-url", "s0", url)
    assert "unreachable" in line


def test_bad_judge_effort_names_the_variable(tmp_path: Path) -> None:
    done = run_cli(tmp_path, env={"N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT": "extreme"})
    assert_one_line_error(done, "N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT", "extreme")


def test_uncreatable_output_dir_names_the_flag(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = subprocess.run([*ORCH, "run", str(REPO / "cases"), "--filter", CASE, "--model-server", "scripted",
                           "--state-dir", str(tmp_path / "state"), "--output-dir", str(blocker / "out")],
                          capture_output=True, text=True, timeout=60, env=os.environ | {"COLUMNS": "400"})
    assert_one_line_error(done, "--output-dir", str(blocker / "out"))


def test_unknown_run_to_resume_names_the_flag(tmp_path: Path) -> None:
    assert_one_line_error(run_cli(tmp_path, "--resume", "no-such-run"), "--resume", "no-such-run")


def test_a_torn_stored_run_to_resume_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    """A run folder whose run.json was cut short (a full disk) cannot be resumed: one line, no traceback."""
    stored = tmp_path / "state" / "runs" / "torn-run"
    stored.mkdir(parents=True)
    (stored / "run.json").write_text('{"source": "cas', encoding="utf-8")
    assert_one_line_error(run_cli(tmp_path, "--resume", "torn-run"), "--resume", "torn-run", "run.json")


def run_orch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "N8N_", "LANGSMITH_"))}
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=env | {"COLUMNS": "400"})


def test_missing_case_path_is_one_line(tmp_path: Path) -> None:
    done = run_orch(tmp_path, "run", "does/not/exist", "--model-server", "scripted",
                    "--state-dir", str(tmp_path / "state"), "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(done, "does/not/exist", "no such file")


def test_unreadable_case_file_is_one_line(tmp_path: Path) -> None:
    case = tmp_path / "case.json"
    case.write_text("{not json")
    done = run_orch(tmp_path, "run", str(case), "--model-server", "scripted",
                    "--state-dir", str(tmp_path / "state"), "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(done, str(case))


@pytest.mark.parametrize("args,names", [
    (("run", "--no-such-flag"), ("--no-such-flag", "orchestrator run --help")),
    (("run", "--iterations", "three"), ("--iterations",)),
    (("compare",), ("RESULTS",)),
    (("no-such-command",), ("no-such-command",)),
], ids=["unknown-flag", "bad-int", "missing-arg", "unknown-command"])
def test_click_usage_errors_are_one_line(tmp_path: Path, args: tuple[str, ...], names: tuple[str, ...]) -> None:
    assert_one_line_error(run_orch(tmp_path, *args), *names)


HEAVY = ("anthropic", "scipy", "kubernetes", "docker", "langsmith", "rich.progress", "orchestrator.run.pipeline")
#: What a flag error of ``run`` must not wait for: seconds of imports each (the console's progress bar is not).
SLOW = tuple(m for m in HEAVY if m != "rich.progress")


@pytest.mark.parametrize("args,heavy", [
    (["--help"], HEAVY), (["cases", "validate", str(REPO / "cases")], HEAVY),
    (["run", str(REPO / "cases"), "--model-server", "scripted", "--lanes", "0"], SLOW),
], ids=["help", "validate", "run-flag-error"])
def test_startup_commands_import_nothing_heavy(args: list[str], heavy: tuple[str, ...]) -> None:
    """Start-up and flag checking stay light: a user error answers in about a second (no SDK, no
    scipy), and this suite's many CLI error cases do not pay seconds of imports each."""
    probe = ("import sys\nfrom orchestrator.cli.main import main\n"
             f"sys.argv = ['orchestrator', *{args!r}]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {[h.split('.')[0] for h in heavy]!r} "
             f"and any(m == h or m.startswith(h + '.') for h in {heavy!r})))")
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("manifest,args,names", [
    (None, ("--delete-prebuilt-workflows",), ("--delete-prebuilt-workflows", "only with --prebuilt-workflows")),
    ({CASE: ["w1"]}, ("--delete-prebuilt-workflows", "--keep-workflows", "--backend", "static", "--base-url",
                      "http://127.0.0.1:6199", "--lanes", "1"), ("mutually exclusive", "--keep-workflows")),
    ({CASE: ["w1"]}, (), ("--prebuilt-workflows", "--backend static")),
    ({"no-such-case": ["w1"]}, ("--backend", "static", "--base-url", "http://127.0.0.1:6199", "--lanes", "1"),
     ("--prebuilt-workflows", "unknown case slug", "no-such-case")),
    ({CASE: []}, ("--backend", "static", "--base-url", "http://127.0.0.1:6199", "--lanes", "1"),
     ("--prebuilt-workflows", CASE, "non-empty list")),
    ("{broken", ("--backend", "static", "--base-url", "http://127.0.0.1:6199", "--lanes", "1"),
     ("--prebuilt-workflows", "is not JSON")),
], ids=["delete-alone", "delete-and-keep", "not-static", "unknown-slug", "empty-ids", "not-json"])
def test_prebuilt_flag_errors_are_one_line(tmp_path: Path, manifest, args, names) -> None:
    import json as _json

    extra: tuple[str, ...] = ()
    if manifest is not None:
        path = tmp_path / "manifest.json"
        path.write_text(manifest if isinstance(manifest, str) else _json.dumps(manifest))
        extra = ("--prebuilt-workflows", str(path))
    assert_one_line_error(run_cli(tmp_path, *extra, *args), *names)


def test_docker_without_dockerd_names_the_command(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--backend", "docker", env={"DOCKER_HOST": f"unix://{tmp_path}/no-dockerd.sock"})
    assert_one_line_error(done, "--backend docker", "no dockerd", "scripts/dockerd.sh start")


@pytest.mark.docker
def test_docker_missing_lane_image_names_the_build_command(tmp_path: Path) -> None:
    sock = Path("/run/n8n-eval-docker.sock")
    require("docker", sock.exists, "the private dockerd is not running: scripts/dockerd.sh start")
    from orchestrator.errors import ConfigError
    from orchestrator.lanes.docker.backend import check_lane_image

    with pytest.raises(ConfigError) as info:
        check_lane_image("n8n-eval-lane:never-built", f"unix://{sock}")
    message = str(info.value)
    assert "\n" not in message and "lane image 'n8n-eval-lane:never-built' is not on dockerd" in message
    assert message.endswith("`bash lanes/build-image.sh --from-cache --tag n8n-eval-lane:never-built`")
