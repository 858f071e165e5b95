"""The layering the architecture promises (docs/architecture.md), checked on the source itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "orchestrator"
BUILDERS_AND_BACKENDS = (
    "orchestrator.builders.mcp_builder", "orchestrator.builders.claude_runner", "orchestrator.builders.instance_ai",
    "orchestrator.builders.prebuilt_builder",
    "orchestrator.lanes.process", "orchestrator.lanes.docker_lanes", "orchestrator.lanes.kubernetes_lanes",
    "orchestrator.lanes.static",
)
#: a package may import from itself and from the ones listed (``orchestrator.errors``, ``redact``,
#: ``ledger``, ``ids`` are the shared ground every stage stands on)
LOWER = {
    "n8n": set(),
    "lanes": {"n8n", "sandbox"},  # a lane may carry its Instance AI sandbox service
    "sandbox": {"lanes.install"},  # the sandbox runs the toolchain's Node, nothing else of lanes
    "cases": set(),
    "allocator": set(),
    "verify": {"n8n", "cases", "results"},
}
SHARED = {"errors", "redact", "ledger", "ids", "outage", "deletion", "transcript", "procs"}


def imports_of(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [n for n in names if n.startswith("orchestrator")]


def test_run_imports_no_builder_or_backend_by_name() -> None:
    offenders = [(p.name, name) for p in sorted((PKG / "run").glob("*.py")) for name in imports_of(p)
                 if name.startswith(BUILDERS_AND_BACKENDS)]
    assert offenders == []


@pytest.mark.parametrize("package", sorted(LOWER))
def test_lower_layers_do_not_import_upper_ones(package: str) -> None:
    allowed = LOWER[package] | SHARED | {package}
    offenders = []
    for path in sorted((PKG / package).rglob("*.py")):
        for name in imports_of(path):
            parts = name.split(".")
            top = parts[1] if len(parts) > 1 else ""
            if top and top not in allowed and ".".join(parts[1:3]) not in allowed:
                offenders.append((str(path.relative_to(PKG)), name))
    assert offenders == []
