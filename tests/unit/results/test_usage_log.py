"""N8N_INSTANCE_AI_EVAL_USAGE_LOG: one JSON line per judge call; per-unit totals for harnessUsagePerRun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.results.usage import USAGE_LOG_ENV, record_model_call, usage_meter
from orchestrator.scripted.scripts import judge, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.verify.judge import (
    EXPECTATION_SYSTEM,
    Judge,
    JudgeConfig,
    expectation_prompt,
)


async def test_each_judge_call_appends_one_line_and_is_metered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "usage.jsonl"
    monkeypatch.setenv(USAGE_LOG_ENV, str(log))
    with ScriptedModelServer(judge(verdict_list(True))) as srv:
        j = Judge(JudgeConfig(api_key="sk-ant-usage-test-000000", base_url=srv.base_url, effort="low", backoff_s=0,
                              model="anthropic/claude-sonnet-4-6"))
        try:
            with usage_meter() as meter:
                for _ in range(2):
                    await j.judge(EXPECTATION_SYSTEM, expectation_prompt({"nodes": []}, ["a", "b"]), 2)
        finally:
            await j.aclose()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 2
    first = lines[0]
    assert first["agent"] == "judge" and first["model"] == "anthropic/claude-sonnet-4-6" and first["effort"] == "low"
    for key in ("inputTokens", "uncachedInputTokens", "outputTokens", "reasoningTokens", "durationMs", "stopReason"):
        assert key in first
    assert first["inputTokens"] >= first["uncachedInputTokens"] >= 0
    [row] = meter.rows()
    assert (row.agent, row.calls) == ("judge", 2)
    assert row.input_tokens == sum(line["inputTokens"] for line in lines)
    assert row.output_tokens == sum(line["outputTokens"] for line in lines)


def test_cache_split_and_no_log_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(USAGE_LOG_ENV, raising=False)
    with usage_meter() as meter:
        record_model_call("judge", "m", {"input_tokens": 10, "cache_read_input_tokens": 90,
                                         "cache_creation_input_tokens": 5, "output_tokens": 7})
    [row] = meter.rows()
    assert (row.input_tokens, row.uncached_input_tokens, row.output_tokens) == (105, 10, 7)
    assert not list(tmp_path.iterdir())
