"""The --prebuilt-workflows manifest: shape checks and the i % len rotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.builders.prebuilt.builder import (
    PrebuiltBuilder,
    check_manifest_slugs,
    load_manifest,
    workflow_for,
)
from orchestrator.errors import ConfigError


def test_rotation_is_iteration_mod_len(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"a": ["W1", "W2", "W3"], "b": "W9"}')
    manifest = load_manifest(path)
    assert [workflow_for(manifest, "a", i) for i in range(5)] == ["W1", "W2", "W3", "W1", "W2"]
    assert workflow_for(manifest, "b", 4) == "W9"


@pytest.mark.parametrize("text,fragment", [
    ("[]", "must be an object"), ("{}", "must be an object"), ('{"a": [1]}', "non-empty list"),
    ('{"a": []}', "non-empty list"), ("{", "is not JSON"),
])
def test_bad_manifests_name_the_flag(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=fragment) as info:
        load_manifest(path)
    assert str(info.value).startswith("--prebuilt-workflows: ")


def test_unknown_and_missing_slugs() -> None:
    with pytest.raises(ConfigError, match="unknown case slug.*'zz'"):
        check_manifest_slugs({"zz": ["w"]}, ["a"], ["a", "b"])
    with pytest.raises(ConfigError, match="'b' have no workflow"):
        check_manifest_slugs({"a": ["w"]}, ["a", "b"], ["a", "b"])
    check_manifest_slugs({"a": ["w"]}, ["a"], ["a", "b"])


def test_the_builder_takes_its_options_through_the_builder_interface(tmp_path: Path) -> None:
    """The run hands the prebuilt builder its flags as ``BuilderSettings.options`` (its typed
    ``options_model``, taken by the stack from the config): nothing is read back from the run's folder."""
    from orchestrator.builders.builder import BuilderSettings, get_builder
    from orchestrator.builders.prebuilt.options import PrebuiltOptions
    from orchestrator.lanes.backend import get_backend
    from orchestrator.run.config import RunConfig
    from orchestrator.run.resolve import resolve
    from orchestrator.run.stack import resolve_stack

    manifest = tmp_path / "m.json"
    manifest.write_text('{"smoke-manual-code-greetings": ["W1", "W2"]}')
    cfg = RunConfig(cases_paths=[Path(__file__).resolve().parents[4] / "cases"], backend="static",
                    base_url="http://127.0.0.1:9", lanes=1, prebuilt_workflows=manifest,
                    delete_prebuilt_workflows=True)
    resolved = resolve(cfg)
    cls = get_builder(resolved.config.builder)
    options = resolve_stack(cls, get_backend(cfg.backend), cfg).builder_options
    assert options == resolved.stack.builder_options
    assert options == PrebuiltOptions.model_validate({"prebuilt_workflows": manifest, "delete_prebuilt_workflows": True})
    run_dir = tmp_path / "run"  # empty: no run.json to fall back on
    builder = cls(BuilderSettings(run_id="r", run_dir=run_dir, model="m", options=options))
    assert isinstance(builder, PrebuiltBuilder)
    assert builder.manifest == {"smoke-manual-code-greetings": ["W1", "W2"]}
    assert builder.delete_after is True
    with pytest.raises(ConfigError, match="needs --prebuilt-workflows"):
        cls(BuilderSettings(run_id="r", run_dir=run_dir, model="m"))
    assert not isinstance(resolve_stack(get_builder("mcp"), get_backend(cfg.backend), cfg).builder_options,
                          PrebuiltOptions)  # the mcp builder gets its own options, never the prebuilt ones
