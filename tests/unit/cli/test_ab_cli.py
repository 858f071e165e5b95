"""``orchestrator ab`` flag validation: one-line errors naming the flag, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli import ab_cmd
from orchestrator.errors import ConfigError
from orchestrator.experiments.ab import Arm, arm_config, parse_arms
from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import resolve

REPO = Path(__file__).resolve().parents[3]


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:  # keeps ``ab`` a sub-command, as in the real CLI
        pass

    ab_cmd.register(app)
    return app


@pytest.mark.parametrize(("args", "flag", "words"), [
    (["--arm", "control=m1"], "--arm", "at least 2 arms"),
    ([], "--arm", "at least 2 arms"),
    (["--arm", "control", "--arm", "variant=m2"], "--arm", "NAME=MODEL"),
    (["--arm", "control=", "--arm", "variant=m2"], "--arm", "NAME=MODEL"),
    (["--arm", "=m1", "--arm", "variant=m2"], "--arm", "NAME=MODEL"),
    (["--arm", "a=m1", "--arm", "a=m2"], "--arm", "declared twice"),
    (["--arm", "a b=m1", "--arm", "v=m2"], "--arm", "arm name"),
    (["--arm", "a/x=m1", "--arm", "v=m2"], "--arm", "arm name"),
    (["--arm", "a=m1", "--arm", "v=m2", "--arm-env", "w=K=V"], "--arm-env", "names no declared arm"),
    (["--arm", "a=m1", "--arm", "v=m2", "--arm-env", "v"], "--arm-env", "ARM=KEY=VALUE"),
    (["--arm", "a=m1", "--arm", "v=m2", "--arm-env", "v=NOEQUALS"], "--arm-env", "KEY=VALUE"),
    (["--arm", "a=m1", "--arm", "v=m2", "--arm-env", "v=1BAD=x"], "--arm-env", "KEY=VALUE"),
    (["--arm", "a=m1", "--arm", "v=m2", "--mode", "mixed"], "--mode", "separate or interleaved"),
    (["--arm", "a=m1", "--arm", "v=m2", "--mode", "interleaved"], "--mode interleaved", "not supported yet"),
    (["--arm", "a=m1", "--arm", "v=m2", "--lanes", "0"], "--lanes", "≥ 1"),
    (["--arm", "a=m1", "--arm", "v=m2", "--outage-waits", "x"], "--outage-waits", "seconds"),
    (["--arm", "a=m1", "--arm", "v=m2", "--resume-existing"], "--resume-existing", "needs --run-id"),
])
def test_flag_errors(args: list[str], flag: str, words: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["ab", *args, "--state-dir", str(tmp_path / "s"),
                                         "--output-dir", str(tmp_path / "o")])
    assert isinstance(result.exception, ConfigError), result.output
    message = str(result.exception)
    assert message.startswith(flag) and words in message and "\n" not in message
    assert not (tmp_path / "o").exists() and not (tmp_path / "s").exists()  # nothing started


def test_error_is_one_line_on_the_real_entry_point(tmp_path: Path) -> None:
    """Through ``main()``'s UserError handling: ``error: …`` on one line, exit 2, no traceback."""
    code = ("import typer, sys; from orchestrator.cli import ab_cmd; from orchestrator.cli import main as m; "
            "ab_cmd.register(m.app) if 'ab' not in [c.name for c in m.app.registered_commands] else None; m.main()")
    done = subprocess.run([sys.executable, "-c", code, "ab", "--arm", "a=m1", "--arm", "v=m2", "--arm-env", "x=K=V",
                           "--state-dir", str(tmp_path / "s")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["error: --arm-env: 'x' names no declared arm (declared: a, v)"]


def test_arms_and_arm_env_parse() -> None:
    flags = 'N8N_FEATURE_FLAG_OVERRIDES={"118_instance_ai_setup_overhaul":"variant"}'
    arms = parse_arms(["control=anthropic/claude-sonnet-4-6", "variant=anthropic/claude-sonnet-4-6"],
                      [f"variant={flags}", "control=N8N_X=1"])
    assert [(a.name, a.model, a.env) for a in arms] == [
        ("control", "anthropic/claude-sonnet-4-6", ["N8N_X=1"]),
        ("variant", "anthropic/claude-sonnet-4-6", [flags]),
    ]


def test_arm_config_sets_lane_env_build_model_experiment_and_output(tmp_path: Path) -> None:
    base = RunConfig(env=["N8N_SHARED=1"], build_model="claude-opus-4-8", state_dir=tmp_path)
    flags = 'N8N_FEATURE_FLAG_OVERRIDES={"f":"variant"}'
    anthropic = arm_config(base, Arm("control", "anthropic/claude-sonnet-4-6"), ab_id="ab-1", experiment_name="exp",
                           output_root=tmp_path / "out")
    openai = arm_config(base, Arm("variant", "openai/gpt-5.5", [flags]), ab_id="ab-1", experiment_name="exp",
                        output_root=tmp_path / "out")
    assert anthropic.env == ["N8N_SHARED=1", "N8N_INSTANCE_AI_MODEL=anthropic/claude-sonnet-4-6"]
    assert anthropic.build_model == "claude-sonnet-4-6"
    assert openai.env == ["N8N_SHARED=1", "N8N_INSTANCE_AI_MODEL=openai/gpt-5.5", flags]
    assert openai.build_model == "claude-opus-4-8"  # the builder is claude: non-Anthropic arms keep it
    assert (anthropic.run_id, openai.run_id) == ("ab-1-control", "ab-1-variant")
    assert (anthropic.experiment_name, openai.experiment_name) == ("exp-control", "exp-variant")
    assert openai.output_dir == tmp_path / "out" / "variant"
    assert base.env == ["N8N_SHARED=1"] and base.run_id is None  # the base is not touched


def test_secret_arm_env_is_registered_and_masked(tmp_path: Path) -> None:
    from orchestrator.redact import redact

    secret = "sk-variant-only-0123456789"
    (arm_a, arm_v) = parse_arms(["a=m1", "v=m2"], [f"v=OPENAI_API_KEY={secret}"])
    assert arm_v.env == [f"OPENAI_API_KEY={secret}"]
    assert redact(", ".join(arm_v.env)) == "OPENAI_API_KEY=***"


def test_a_non_anthropic_arm_needs_a_builder_it_can_drive() -> None:
    from orchestrator.errors import ConfigError
    from orchestrator.experiments.ab import check_arms_for_builder

    arms = [Arm("control", "anthropic/claude-sonnet-4-6"), Arm("variant", "openai/gpt-5.5")]
    with pytest.raises(ConfigError, match=r"^--arm variant=openai/gpt-5.5: the mcp builder builds with claude"):
        check_arms_for_builder(arms, "mcp")
    check_arms_for_builder(arms, "instance-ai")  # the lanes' own agent takes any provider's model
    check_arms_for_builder(arms[:1], "mcp")


@pytest.mark.parametrize(("args", "flag", "words"), [
    (["--arm", "a=anthropic/m", "--arm", "v=custom/m"], "--arm v=custom/m", "--arm-model-url v=<"),
    (["--arm", "a=m1", "--arm", "v=m2", "--arm-model-url", "w=http://127.0.0.1:1"], "--arm-model-url",
     "names no declared arm"),
    (["--arm", "a=m1", "--arm", "v=m2", "--arm-model-url", "v=ftp://127.0.0.1:1"], "--arm-model-url",
     "not an http(s) URL"),
    (["--arm", "a=m1", "--arm", "v=m2", "--arm-model-url", "v"], "--arm-model-url", "ARM=URL"),
    (["--arm", "a=m1", "--arm", "v=m2", "--arm-model-url", "v=http://127.0.0.1:1", "--arm-model-url",
      "v=http://127.0.0.1:2"], "--arm-model-url", "given twice"),
    (["--arm", "a=m1", "--arm", "v=custom/m", "--arm-model-url", "v=http://127.0.0.1:1",
      "--arm-model-key-env", "v=AB_TEST_UNSET_KEY_VAR"], "--arm-model-key-env", "AB_TEST_UNSET_KEY_VAR"),
    (["--arm", "a=anthropic/m", "--arm", "v=anthropic/n", "--arm-model-url", "v=http://127.0.0.1:1",
      "--builder", "mcp"], "--arm-model-url v=", "--builder instance-ai"),
])
def test_model_url_and_key_flag_errors(args: list[str], flag: str, words: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AB_TEST_UNSET_KEY_VAR", raising=False)
    test_flag_errors(args, flag, words, tmp_path)


def test_ab_builds_with_instance_ai_unless_told_otherwise() -> None:
    from orchestrator.cli import run_cmd

    def default_builder(register, name: str) -> object:
        app = typer.Typer()

        @app.callback()
        def _root() -> None:
            pass

        register(app)
        command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
        return next(p.default for p in command.params if p.name == "builder")

    assert default_builder(ab_cmd.register, "ab") == "instance-ai"
    assert default_builder(run_cmd.register, "run") == "mcp"  # `orchestrator run` keeps mcp


def test_an_arms_model_url_and_model_win_over_the_scripted_routes_defaults(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.run.model_route import SCRIPTED_API_KEY, ModelRoute
    from orchestrator.run.provision import lane_spec

    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-arm-key-0123456789")
    for var in ("N8N_INSTANCE_AI_MODEL", "N8N_INSTANCE_AI_MODEL_URL", "N8N_INSTANCE_AI_MODEL_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    base = RunConfig(state_dir=tmp_path, builder="instance-ai")
    control, variant, other = parse_arms(
        ["control=anthropic/claude-sonnet-4-6", "variant=custom/local-1", "other=openai/gpt-5.5"],
        model_url_specs=["variant=http://127.0.0.1:9/route/v"])
    scripted = ModelRoute("scripted", "http://127.0.0.1:7", "scripted-key-0000")
    real = ModelRoute("real", None, "sk-ant-real-0000000")

    def spec(arm: Arm, route: ModelRoute):
        return lane_spec(resolve(arm_config(base, arm, ab_id="ab-1", experiment_name="e", output_root=tmp_path)), route)

    c = spec(control, scripted)  # no URL of its own: the scripted server, under the arm's route tag
    assert (c.env["N8N_INSTANCE_AI_MODEL"], c.env["N8N_INSTANCE_AI_MODEL_URL"]) == (
        "anthropic/claude-sonnet-4-6", "http://127.0.0.1:7/route/control")
    v = spec(variant, scripted)  # its own URL and model win over the route's defaults
    assert (v.env["N8N_INSTANCE_AI_MODEL"], v.env["N8N_INSTANCE_AI_MODEL_URL"]) == (
        "custom/local-1", "http://127.0.0.1:9/route/v")
    assert v.secret_env["N8N_INSTANCE_AI_MODEL_API_KEY"] == SCRIPTED_API_KEY
    o = spec(other, real)  # a real route: the provider's key from the orchestrator's env, by prefix
    assert o.env["N8N_INSTANCE_AI_MODEL"] == "openai/gpt-5.5" and "N8N_INSTANCE_AI_MODEL_URL" not in o.env
    assert o.secret_env["N8N_INSTANCE_AI_MODEL_API_KEY"] == "sk-openai-arm-key-0123456789"
    assert "N8N_INSTANCE_AI_MODEL_API_KEY" not in spec(variant, real).secret_env  # custom/: no key unless named
