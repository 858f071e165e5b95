"""Env profiles: merge rules, includes, and the refusal of secrets in profile files."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.lanes.profiles import find_profile, parse_profile, resolve_env
from orchestrator.redact import redact

EVAL_FLAGS = {
    "E2E_TESTS": "true",
    "N8N_ENABLED_MODULES": "instance-ai,agents",
    "N8N_AI_ENABLED": "true",
    "N8N_INSTANCE_AI_EVAL_INSTANCE": "true",
}


def test_eval_profile_carries_the_eval_flags_and_no_smtp() -> None:
    env = parse_profile(find_profile("eval"))
    for key, value in EVAL_FLAGS.items():
        assert env[key] == value
    assert "N8N_INSTANCE_AI_MODEL" in env and "N8N_FEATURE_FLAG_OVERRIDES" in env
    assert not any(k.startswith("N8N_SMTP") for k in env)
    assert env["N8N_DIAGNOSTICS_ENABLED"] == "false"


def test_variant_profile_includes_eval_and_overrides_the_flag() -> None:
    env = parse_profile(find_profile("setup-panel-variant"))
    assert env["E2E_TESTS"] == "true"
    assert env["N8N_FEATURE_FLAG_OVERRIDES"] == '{"118_instance_ai_setup_overhaul":"variant"}'


def test_secret_in_a_profile_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.env"
    path.write_text("E2E_TESTS=true\nANTHROPIC_API_KEY=sk-ant-oops\n")
    with pytest.raises(ConfigError, match=r"bad\.env:2: ANTHROPIC_API_KEY looks like a secret"):
        parse_profile(path)


def test_malformed_line_and_include_cycle(tmp_path: Path) -> None:
    (tmp_path / "a.env").write_text("@include b.env\n")
    (tmp_path / "b.env").write_text("@include a.env\n")
    with pytest.raises(ConfigError, match="cycle"):
        parse_profile(tmp_path / "a.env")
    (tmp_path / "c.env").write_text("just words\n")
    with pytest.raises(ConfigError, match=r"c\.env:1: expected KEY=VALUE"):
        parse_profile(tmp_path / "c.env")


def test_unknown_profile_names_the_flag_and_lists_known() -> None:
    with pytest.raises(ConfigError, match=r"--profile: unknown profile 'nope'.*eval"):
        find_profile("nope")


def test_overrides_split_config_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("N8N_INSTANCE_AI_MODEL_API_KEY", "sk-lane-model-key-123456")
    env, secrets = resolve_env("eval", ["N8N_INSTANCE_AI_MODEL=anthropic/x", "EVAL_SLACK_ACCESS_TOKEN=xoxb-abcdef123"])
    assert env["N8N_INSTANCE_AI_MODEL"] == "anthropic/x"
    assert "EVAL_SLACK_ACCESS_TOKEN" not in env and secrets["EVAL_SLACK_ACCESS_TOKEN"] == "xoxb-abcdef123"
    assert secrets["N8N_INSTANCE_AI_MODEL_API_KEY"] == "sk-lane-model-key-123456"
    assert "sk-lane-model-key-123456" not in redact("key sk-lane-model-key-123456")
    with pytest.raises(ConfigError, match="--env: expected KEY=VALUE"):
        resolve_env("eval", ["novalue"])
