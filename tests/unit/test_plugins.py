"""The plug-in registry (``orchestrator/plugins.py``) finds a plug-in through a real entry point.

A distribution is installed for the test the way pip leaves one: a ``*.dist-info`` folder with
``METADATA`` and ``entry_points.txt`` on ``sys.path``, beside the module it names. Nothing is
faked: :func:`importlib.metadata.entry_points` reads it, and the registry imports the module only
when the name is asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from orchestrator.errors import ConfigError
from orchestrator.plugins import Registry

GROUP = "orchestrator.test_plugins"


class Thing:
    """The kind of plug-in the test registry holds."""

    name: ClassVar[str] = "thing"


def _unknown(name: str, names: list[str]) -> ConfigError:
    return ConfigError(f"--thing: unknown {name!r}: choose one of {', '.join(names)}")


def install(root: Path, module: str, source: str, entry_points: dict[str, dict[str, str]]) -> None:
    """Write ``module`` and a distribution whose ``entry_points.txt`` names its objects under ``root``."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{module.replace('_', '-')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in eps.items()) + "\n"
        for group, eps in entry_points.items()))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on ``sys.path`` that installed distributions go into; its modules are forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("ep_"):
            del sys.modules[name]
    importlib.invalidate_caches()


def test_an_entry_point_is_listed_without_import_and_loaded_when_asked_for(site: Path) -> None:
    install(site, "ep_things", "class Far:\n    name = 'far'\n", {GROUP: {"far": "ep_things:Far"}})
    importlib.invalidate_caches()
    registry: Registry[Thing] = Registry("thing", GROUP, {}, unknown=_unknown)

    assert registry.names() == ["far"]
    assert "ep_things" not in sys.modules  # listing a name imports nothing

    cls = registry.get("far")
    assert cls.__module__ == "ep_things" and cls.__name__ == "Far" and cls.name == "far"
    assert registry.get("far") is cls  # loaded once, then registered
    with pytest.raises(ConfigError, match=r"^--thing: unknown 'near': choose one of far$"):
        registry.get("near")


def test_a_registered_class_wins_over_an_entry_point_of_the_same_name(site: Path) -> None:
    install(site, "ep_shadow", "raise ImportError('never imported')\n", {GROUP: {"thing": "ep_shadow:Thing"}})
    importlib.invalidate_caches()
    registry: Registry[Thing] = Registry("thing", GROUP, {}, unknown=_unknown)
    with registry.registered(Thing):
        assert registry.get("thing") is Thing and registry.names() == ["thing"]
    with pytest.raises(ImportError, match="never imported"):  # out of the block: the entry point's again
        registry.get("thing")


def test_a_third_party_lane_backend_comes_in_by_the_backends_group(site: Path) -> None:
    """The real registry and group: ``--backend far-lanes`` finds a backend another package ships."""
    from orchestrator.lanes.backend import BACKENDS, LaneBackend, get_backend

    source = ("from orchestrator.lanes.static.backend import StaticBackend\n\n"
              "class FarLanes(StaticBackend):\n    name = 'far-lanes'\n")
    install(site, "ep_far_lanes", source, {BACKENDS.group: {"far-lanes": "ep_far_lanes:FarLanes"}})
    importlib.invalidate_caches()
    try:
        assert "far-lanes" in BACKENDS.names() and "ep_far_lanes" not in sys.modules
        cls = get_backend("far-lanes")
        assert issubclass(cls, LaneBackend) and cls.__module__ == "ep_far_lanes" and not cls.owns_lanes
    finally:
        BACKENDS.unregister("far-lanes")
    assert "far-lanes" not in {c.name for c in BACKENDS.load_all()}


def test_registered_restores_what_the_name_named_before() -> None:
    registry: Registry[Thing] = Registry("thing", GROUP, {}, unknown=_unknown)

    class Other(Thing):
        pass

    registry.register(Thing)
    with registry.registered(Other):
        assert registry.get("thing") is Other
    assert registry.get("thing") is Thing
    registry.unregister("thing")
    with pytest.raises(ConfigError):
        registry.get("thing")
