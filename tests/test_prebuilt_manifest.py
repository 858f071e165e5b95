"""The --prebuilt-workflows manifest: shape checks and the i % len rotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.build.prebuilt_builder import (
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
