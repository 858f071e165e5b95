"""The layering the architecture promises (docs/architecture.md), checked on the source itself.

Every package and top-level module of ``orchestrator/`` has a floor in :data:`LAYERS`; a unit may
import itself and any unit on a lower floor, never a sibling on its own floor nor one above. Every
import counts: at module level, inside a function, under ``if TYPE_CHECKING:``. No module may reach
itself through imports (no circle, inside a package or across). The checker is tested on a planted
package too, so it cannot pass by seeing nothing.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "orchestrator"

#: floors, lowest first: a unit imports only units on lower floors (and itself)
LAYERS: list[set[str]] = [
    # the shared ground: no stage; first what needs nothing, then what needs only redaction
    {"__init__", "errors", "redact", "ids", "domain", "procs", "plugins"},
    {"outage", "transcript", "ledger"},
    # stand-alone stages and clients: each stands on the ground only
    {"toolchain", "n8n", "cases", "allocator", "results", "scripted", "gateway"},
    {"handoff"},  # what a build hands to verification (on n8n): below both, so neither imports the other
    {"deletion", "sandbox", "compare", "verify"},  # deletion/verify: n8n; sandbox: the toolchain's Node
    {"lanes"},  # a lane may carry its Instance AI sandbox
    {"builders", "metrics"},
    {"plugin_flags"},  # the plug-ins' own flags, made from their options models (both registries)
    {"run", "cleanup"},
    {"experiments"},
    {"harnesses"},  # the seed's other harnesses: stage sets on run (and LangSmith for their experiments)
    {"cli"},
    {"__main__"},
]


# --------------------------------------------------------------------------- the checker


def module_names(root: Path) -> dict[str, Path]:
    """``orchestrator.x.y`` → its file, for every module of the package at ``root``."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that ``name`` imports (relative imports resolved; every import)."""
    found: set[str] = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - (0 if is_pkg else 1)]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def unit_of(module: str) -> str:
    """The layer unit of a module: its package under the root, or the top-level module's name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def check(root: Path, layers: list[set[str]]) -> list[str]:
    """Every problem of the package at ``root``: units with no floor, upward or sideways imports, circles."""
    modules = module_names(root)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    floor = {unit: i for i, units in enumerate(layers) for unit in units}
    problems = [f"{unit}: no floor in LAYERS" for unit in sorted({unit_of(m) for m in modules} - set(floor))]
    problems += [f"{unit}: in LAYERS but not in the package" for unit in sorted(set(floor) - {unit_of(m) for m in modules})]
    for name, targets in sorted(graph.items()):
        here = unit_of(name)
        for target in sorted(targets):
            there = unit_of(target)
            if there != here and here in floor and there in floor and floor[there] >= floor[here]:
                problems.append(f"{name} imports {target}: {there!r} is not below {here!r}")
    problems += [f"import circle: {' → '.join(group)}" for group in circles(graph)]
    return problems


# --------------------------------------------------------------------------- the package


def test_every_package_and_module_has_a_floor() -> None:
    packages = {p.parent for p in PKG.rglob("*.py")} - {PKG}
    assert all((p / "__init__.py").is_file() for p in packages)  # no namespace package hides from the tools
    units = {p.relative_to(PKG).parts[0] for p in packages} | {p.stem for p in PKG.glob("*.py")}
    assert units == set().union(*LAYERS)


def test_no_upward_import_and_no_circle() -> None:
    assert check(PKG, LAYERS) == []


#: imports the floors would allow but the architecture forbids: (importing unit, imported unit, why)
FORBIDDEN: list[tuple[str, str, str]] = [
    ("builders", "verify", "a builder never verifies: what both need is orchestrator.handoff's"),
]


def test_no_forbidden_import() -> None:
    modules = module_names(PKG)
    found = [f"{name} imports {target}: {why}" for name, path in sorted(modules.items())
             for target in sorted(imports_of(name, path, modules))
             for here, there, why in FORBIDDEN if unit_of(name) == here and unit_of(target) == there]
    assert found == []


# --------------------------------------------------------------------------- inside a plug-in package

#: each plug-in package: its own floors (its modules, or sub-packages, lowest first: what the user
#: configures at the bottom, the registered class on top, the package's face above all), and the
#: modules code elsewhere in ``orchestrator/`` may import (tests and benches may reach any module)
PLUGIN_PACKAGES: dict[str, tuple[list[set[str]], set[str]]] = {
    "orchestrator.lanes.kubernetes": (
        [{"pod_options", "api"}, {"objects", "watch"}, {"options", "namespace"}, {"lease"}, {"janitor"}, {"backend"},
         {"__init__"}],
        {"backend", "options", "janitor", "api"}),
    "orchestrator.lanes.docker": ([{"options"}, {"backend"}, {"__init__"}], {"backend", "options"}),
    "orchestrator.lanes.process": ([{"options", "launcher"}, {"backend"}, {"__init__"}], {"backend", "options"}),
    "orchestrator.lanes.static": ([{"options"}, {"backend"}, {"__init__"}], {"backend", "options"}),
    "orchestrator.builders.instance_ai": (
        [{"compaction", "credential_setup", "external_edits", "proxy_decision", "replay_seed", "run_errors",
          "scenario_tables", "user_run"}, {"stream", "user_proxy"}, {"builder"}, {"__init__"}],
        {"builder", "replay_seed", "stream", "user_proxy"}),  # the routing trial drives the same conversation
    "orchestrator.builders.claude": (
        [{"options", "prompt", "trailer"}, {"runner"}, {"build_runner", "mcp"}, {"remote"}, {"__init__"}],
        {"mcp", "remote", "options", "build_runner"}),
    "orchestrator.builders.prebuilt": ([{"options"}, {"builder"}, {"__init__"}], {"builder", "options"}),
}


def inner_unit(package: str, module: str) -> str | None:
    """The unit of ``module`` inside ``package`` (its first name below it; ``__init__`` for the
    package itself), or None when it is not in the package."""
    if module == package:
        return "__init__"
    return module[len(package) + 1:].split(".")[0] if module.startswith(package + ".") else None


def check_inside(root: Path, package: str, floors: list[set[str]], public: set[str], entry: str | None = None) -> list[str]:
    """Problems of one plug-in package: a unit with no floor, an upward or sideways import inside
    it, its registered module ``entry`` not on the top floor below its face, and an import from
    elsewhere in the package at ``root`` of a module that is not ``public``."""
    modules = module_names(root)
    floor = {unit: i for i, units in enumerate(floors) for unit in units}
    units = {u for m in modules if (u := inner_unit(package, m)) is not None}
    problems = [f"{package}.{u}: no floor in PLUGIN_PACKAGES" for u in sorted(units - set(floor))]
    problems += [f"{package}.{u}: in PLUGIN_PACKAGES but not in the package" for u in sorted(set(floor) - units)]
    if entry is not None and inner_unit(package, entry) not in floors[-2]:
        problems.append(f"{entry}: the registered module is not on the package's top floor")
    for name, path in sorted(modules.items()):
        here = inner_unit(package, name)
        for target in sorted(imports_of(name, path, modules)):
            there = inner_unit(package, target)
            if there is None:
                continue
            if here is None:
                if there not in public:
                    problems.append(f"{name} imports {target}: not the public face of {package} ({sorted(public)})")
            elif here != there and here in floor and there in floor and floor[there] >= floor[here]:
                problems.append(f"{name} imports {target}: {there!r} is not below {here!r} inside {package}")
    return problems


def test_every_plugin_is_a_package_layered_inside() -> None:
    from orchestrator.builders.builder import BUILTIN_BUILDERS
    from orchestrator.lanes.backend import BUILTIN_BACKENDS

    entries = {m.rpartition(".")[0]: m for m in (*BUILTIN_BUILDERS.values(), *BUILTIN_BACKENDS.values())}
    assert set(entries) == set(PLUGIN_PACKAGES)
    problems = [p for package, (floors, public) in sorted(PLUGIN_PACKAGES.items())
                for p in check_inside(PKG, package, floors, public, entries[package])]
    assert problems == []


def test_the_inside_checker_finds_a_sideways_import_and_a_reach_past_the_face(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, {"__init__.py": "", "lanes/__init__.py": "", "lanes/far/__init__.py": "",
                            "lanes/far/options.py": "from orchestrator.lanes.far import backend\n",
                            "lanes/far/backend.py": "from . import options, wire\n", "lanes/far/wire.py": "",
                            "lanes/far/stray.py": "", "cleanup.py": "from orchestrator.lanes.far.wire import X\n"})
    floors = [{"options", "wire"}, {"backend"}, {"__init__"}]
    assert check_inside(pkg, "orchestrator.lanes.far", floors, {"backend"}, "orchestrator.lanes.far.options") == [
        "orchestrator.lanes.far.stray: no floor in PLUGIN_PACKAGES",
        "orchestrator.lanes.far.options: the registered module is not on the package's top floor",
        "orchestrator.cleanup imports orchestrator.lanes.far.wire: not the public face of orchestrator.lanes.far "
        "(['backend'])",
        "orchestrator.lanes.far.options imports orchestrator.lanes.far.backend: 'backend' is not below 'options' "
        "inside orchestrator.lanes.far",
    ]


# --------------------------------------------------------------------------- bench/

BENCH = PKG.parent / "bench"
#: what a bench may not stand on: the commands (a bench drives the stages, and times the CLI as a process)
BENCH_NEVER = {"cli", "__main__"}


def test_bench_stands_on_the_package_and_nothing_stands_on_bench() -> None:
    modules = module_names(PKG) | module_names(BENCH)
    benches = {name: path for name, path in modules.items() if name.split(".")[0] == "bench"}
    assert len(benches) > 5  # the checker sees the benches
    problems = []
    for name, path in sorted(benches.items()):
        for target in sorted(imports_of(name, path, modules)):
            if target.split(".")[0] == "bench":
                problems.append(f"{name} imports {target}: one bench never imports another")
            elif unit_of(target) in BENCH_NEVER:
                problems.append(f"{name} imports {target}: a bench stands below the commands")
    problems += [f"{name} imports {target}" for name, path in sorted(module_names(PKG).items())
                 for target in sorted(imports_of(name, path, modules)) if target.split(".")[0] == "bench"]
    assert problems == []


# --------------------------------------------------------------------------- the checker itself


def _plant(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "orchestrator"
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


PLANTED_LAYERS: list[set[str]] = [{"__init__", "errors"}, {"n8n"}, {"lanes"}]


def test_checker_passes_a_clean_package(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, {"__init__.py": "", "errors.py": "", "n8n/__init__.py": "",
                            "n8n/rest.py": "from orchestrator.errors import X\n",
                            "lanes/__init__.py": "", "lanes/pool.py": "from ..n8n import rest\n"})
    assert check(pkg, PLANTED_LAYERS) == []


def test_checker_finds_an_upward_import_even_a_lazy_or_typing_one(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, {"__init__.py": "", "errors.py": "", "lanes/__init__.py": "", "lanes/pool.py": "",
                            "n8n/__init__.py": "",
                            "n8n/rest.py": "def f():\n    from orchestrator.lanes import pool\n",
                            "n8n/health.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                             "    from orchestrator.lanes.pool import Pool\n"})
    assert check(pkg, PLANTED_LAYERS) == [
        "orchestrator.n8n.health imports orchestrator.lanes.pool: 'lanes' is not below 'n8n'",
        "orchestrator.n8n.rest imports orchestrator.lanes.pool: 'lanes' is not below 'n8n'",
    ]


def test_checker_finds_a_circle_inside_one_package(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, {"__init__.py": "", "errors.py": "", "lanes/__init__.py": "",
                            "n8n/__init__.py": "", "n8n/a.py": "from orchestrator.n8n import b\n",
                            "n8n/b.py": "from . import c\n", "n8n/c.py": "from orchestrator.n8n.a import X\n"})
    assert check(pkg, PLANTED_LAYERS) == ["import circle: orchestrator.n8n.a → orchestrator.n8n.b → orchestrator.n8n.c"]


def test_checker_finds_a_sideways_import_and_a_unit_with_no_floor(tmp_path: Path) -> None:
    layers = [{"__init__", "errors"}, {"n8n", "cases"}, {"lanes"}]
    pkg = _plant(tmp_path, {"__init__.py": "", "errors.py": "", "lanes/__init__.py": "", "n8n/__init__.py": "",
                            "cases/__init__.py": "import orchestrator.n8n\n", "stray.py": ""})
    assert check(pkg, layers) == ["stray: no floor in LAYERS",
                                  "orchestrator.cases imports orchestrator.n8n: 'n8n' is not below 'cases'"]


# --------------------------------------------------------------------------- run/ and cli/ name no plug-in


def _plugin_names_and_modules() -> tuple[set[str], tuple[str, ...]]:
    from orchestrator.builders.builder import ALIASES, BUILTIN_BUILDERS
    from orchestrator.lanes.backend import BUILTIN_BACKENDS

    names = set(BUILTIN_BUILDERS) | set(ALIASES) | set(BUILTIN_BACKENDS)
    # every module of a plug-in's package (``lanes/kubernetes/…``, ``builders/claude/…``), not only its entry
    packages = {m.rpartition(".")[0] + "." for m in (*BUILTIN_BUILDERS.values(), *BUILTIN_BACKENDS.values())}
    modules = (*BUILTIN_BUILDERS.values(), *BUILTIN_BACKENDS.values(), *sorted(packages))
    return names, modules


#: literals that happen to spell a plug-in's name but mean a library: cli/main.py quiets these loggers
LIBRARY_LOGGERS = {("cli/main.py", "docker"), ("cli/main.py", "kubernetes"), ("cli/main.py", "mcp")}


@pytest.mark.parametrize("package", ["run", "cli"])
def test_run_and_cli_name_no_builder_or_backend(package: str) -> None:
    """Which builder or backend runs is a name the user gives; what the pair needs comes from their
    flags (``run/stack.py``). So ``run/`` and ``cli/`` neither import a plug-in nor spell its name."""
    names, plugin_modules = _plugin_names_and_modules()
    modules = module_names(PKG)
    offenders = []
    for path in sorted((PKG / package).rglob("*.py")):
        rel = str(path.relative_to(PKG))
        name = next(m for m, p in modules.items() if p == path)
        offenders += [(rel, m) for m in sorted(imports_of(name, path, modules)) if m.startswith(plugin_modules)]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and (rel, node.value) not in LIBRARY_LOGGERS:
                offenders.append((rel, f"{node.value!r} (line {node.lineno})"))
    assert offenders == []


#: a module longer than this does more than one job (issue #24)
MAX_MODULE_LINES = 700


def test_no_module_is_longer_than_the_limit() -> None:
    too_long = {str(p.relative_to(PKG)): n for p in sorted(PKG.rglob("*.py"))
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert too_long == {}, f"split these along a seam (one job per module): {too_long}"
