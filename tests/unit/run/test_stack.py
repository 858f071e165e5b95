"""``resolve_stack``: every built-in builder on every built-in backend, decided from their flags alone."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from orchestrator.builders.builder import BUILTIN_BUILDERS, BuilderOptions, get_builder
from orchestrator.builders.claude.options import ClaudeOptions
from orchestrator.builders.prebuilt.options import PrebuiltOptions
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import BUILTIN_BACKENDS, get_backend
from orchestrator.run.config import RunConfig
from orchestrator.run.stack import builder_options, resolve_stack, select_builder

URL = "http://127.0.0.1:9"
BY_URL = {"base_url": URL}  # the static backend's own options the run was given (none unset)

#: (builder, backend) → (sandbox, build runner, toolchain n8n, toolchain claude, backend options), or the
#: error's words
TABLE: dict[tuple[str, str], tuple[str, bool, bool, bool, Mapping[str, object]] | str] = {
    ("mcp", "process"): ("none", False, True, True, {}),
    ("mcp", "docker"): ("none", False, False, True, {}),
    ("mcp", "kubernetes"): ("none", False, False, True, {}),
    ("mcp", "static"): ("none", False, False, True, BY_URL),
    ("instance-ai", "process"): ("embedded", False, True, False, {"sandbox": True}),
    ("instance-ai", "docker"): ("embedded", False, True, False, {"sandbox": True}),
    ("instance-ai", "kubernetes"): ("in-lane", False, False, False, {"sandbox": True}),
    ("instance-ai", "static"): ("theirs", False, False, False, BY_URL),
    ("prebuilt", "process"): "--prebuilt-workflows (--builder prebuilt): scores workflows that exist on one lane "
                             "someone else runs, not on --backend process: use --backend static --base-url URL",
    ("prebuilt", "docker"): "--prebuilt-workflows (--builder prebuilt): scores workflows that exist on one lane",
    ("prebuilt", "kubernetes"): "--prebuilt-workflows (--builder prebuilt): scores workflows that exist on one lane",
    ("prebuilt", "static"): ("none", False, False, False, BY_URL),
    ("remote", "process"): "--builder remote: needs a build runner next to every lane, which --backend process does not start; use --backend kubernetes",
    ("remote", "docker"): "--builder remote: needs a build runner next to every lane, which --backend docker",
    ("remote", "kubernetes"): ("none", True, False, False, {"build_runner": True}),
    ("remote", "static"): "--builder remote: needs a build runner next to every lane, which --backend static",
}


def _config(**extra: object) -> RunConfig:
    return RunConfig(lanes=1, base_url=URL, prebuilt_workflows=Path("m.json"), **extra)


def test_the_table_covers_every_builder_on_every_backend() -> None:
    assert set(TABLE) == {(b, k) for b in BUILTIN_BUILDERS for k in BUILTIN_BACKENDS}


@pytest.mark.parametrize("pair", sorted(TABLE), ids=lambda p: f"{p[0]}-on-{p[1]}")
def test_resolve_stack(pair: tuple[str, str]) -> None:
    builder, backend = get_builder(pair[0]), get_backend(pair[1])
    expected = TABLE[pair]
    if isinstance(expected, str):
        with pytest.raises(ConfigError) as info:
            resolve_stack(builder, backend, _config())
        assert str(info.value).startswith(expected)
        return
    stack = resolve_stack(builder, backend, _config())
    assert (stack.sandbox, stack.build_runner, stack.toolchain_n8n, stack.toolchain_claude,
            dict(stack.backend_options)) == expected
    assert (stack.builder, stack.backend) == (builder, backend)


def test_an_external_sandbox_replaces_the_embedded_one_and_the_toolchain_it_needs() -> None:
    for backend in ("process", "docker", "kubernetes"):
        stack = resolve_stack(get_builder("instance-ai"), get_backend(backend), _config(sandbox_url="http://127.0.0.1:5"))
        assert (stack.sandbox, dict(stack.backend_options)) == ("external", {"sandbox_url": "http://127.0.0.1:5"})
        assert stack.toolchain_n8n is (backend == "process")


def test_a_given_claude_binary_needs_no_claude_install() -> None:
    assert resolve_stack(get_builder("mcp"), get_backend("docker"), _config(claude_bin="/bin/claude")).toolchain_claude is False


def test_a_builder_on_an_existing_lane_takes_one_lane() -> None:
    with pytest.raises(ConfigError, match=r"^--builder prebuilt: scores workflows on a single lane: use --lanes 1$"):
        resolve_stack(get_builder("prebuilt"), get_backend("static"), RunConfig(lanes=2, base_url=URL))


def test_the_builder_gets_its_typed_options_from_the_config_fields_of_their_names() -> None:
    cfg = _config(delete_prebuilt_workflows=True)
    stack = resolve_stack(get_builder("prebuilt"), get_backend("static"), cfg)
    assert stack.builder_options == PrebuiltOptions.model_validate({"prebuilt_workflows": Path("m.json"),
                                                                    "delete_prebuilt_workflows": True})
    mcp = resolve_stack(get_builder("mcp"), get_backend("static"), cfg.model_copy(update={
        "build_mcp_timeout_ms": 5_000, "mcp_server": "lane", "build_max_retries": 2}))
    assert mcp.builder_options == ClaudeOptions.model_validate({"build_mcp_timeout_ms": 5_000, "mcp_server": "lane",
                                                                "build_max_retries": 2})
    # the instance-ai builder takes no option: the empty model
    assert type(resolve_stack(get_builder("instance-ai"), get_backend("static"), RunConfig(lanes=1, base_url=URL))
                .builder_options) is BuilderOptions


def test_a_bad_builder_option_is_one_line_naming_its_flag() -> None:
    class Config:
        mcp_server = ""
        build_mcp_timeout_ms = 5_000

    with pytest.raises(ConfigError, match=r"^--mcp-server: String should have at least 1 character$"):
        builder_options(get_builder("mcp"), Config())


def test_every_builder_has_a_frozen_self_describing_options_model() -> None:
    """Each builder's options model refuses what it does not know, cannot be changed once made,
    and describes every field (the help of the flag made from it)."""
    from pydantic import ValidationError

    builders = [get_builder(name) for name in BUILTIN_BUILDERS]
    undescribed = {f"{cls.name}.{name}" for cls in builders
                   for name, field in cls.options_model.model_fields.items() if not field.description}
    assert undescribed == set()
    for cls in builders:
        assert cls.options_model.model_config.get("frozen") and cls.options_model.model_config.get("extra") == "forbid"
    options = ClaudeOptions.model_validate({})
    with pytest.raises(ValidationError):
        options.mcp_server = "other"
    with pytest.raises(ValidationError, match="mcp_sever"):
        ClaudeOptions.model_validate({"mcp_sever": "x"})


def test_a_selecting_option_picks_its_builder_unless_another_is_named() -> None:
    cfg = _config()
    assert select_builder("mcp", cfg).name == "prebuilt"  # the default builder gives way
    assert select_builder("prebuilt", cfg).name == "prebuilt"
    assert select_builder("build-via-mcp", RunConfig()).name == "mcp"
    with pytest.raises(ConfigError, match="^--prebuilt-workflows: mutually exclusive with --builder instance-ai$"):
        select_builder("instance-ai", cfg)
    with pytest.raises(ConfigError, match="^--builder: unknown builder 'nope'"):
        select_builder("nope", cfg)
