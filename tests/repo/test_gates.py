"""The test command's gates (``scripts/test.sh``): ruff and mypy both see every Python file of the
repository, so a new folder of Python cannot slip past either (DEVELOPERS: "both must see every file")."""

from __future__ import annotations

import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".venv", "__pycache__", "node_modules", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
VALUED_FLAGS = {"--config-file", "--cache-dir"}


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if not SKIP_DIRS.intersection(p.relative_to(root).parts))


def gate_roots(script: str, tool: str) -> list[Path]:
    """The paths each ``<tool>`` call of ``script`` is given, resolved against the folder it runs in
    (a ``(cd DIR && …)`` prefix moves it)."""
    roots: list[Path] = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        at = next((i for i, w in enumerate(words) if w.endswith(f"bin/{tool}")), None)
        if at is None:
            continue
        where = REPO
        if at >= 3 and words[at - 3] in ("cd", "(cd") and words[at - 1] == "&&":
            where = REPO / words[at - 2]
        args = words[at + 1:]
        if tool == "ruff":
            args = args[1:]  # ``check``
        skip = False
        for arg in args:
            if skip:
                skip = False
            elif arg in VALUED_FLAGS:
                skip = True
            elif not arg.startswith("-") and arg != ")":
                roots.append((where / arg.rstrip(")")).resolve())
    return roots


def unseen(files: list[Path], roots: list[Path]) -> list[str]:
    return [str(f.relative_to(REPO)) for f in files
            if not any(f == r or r in f.parents for r in roots)]


def test_ruff_and_mypy_see_every_python_file() -> None:
    script = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    files = python_files(REPO)
    assert len(files) > 100 and any(f.parent.name == "tests" for f in files)
    for tool in ("ruff", "mypy"):
        roots = gate_roots(script, tool)
        assert roots, f"no {tool} call found in scripts/test.sh"
        assert unseen(files, roots) == [], f"{tool} does not see these"


def test_the_check_finds_a_file_no_gate_sees(tmp_path: Path) -> None:
    script = ".venv/bin/mypy orchestrator\n(cd tests && ../.venv/bin/mypy --config-file ../pyproject.toml .)\n"
    roots = gate_roots(script, "mypy")
    assert roots == [REPO / "orchestrator", REPO / "tests"]
    stray = REPO / "bench" / "allocator.py"
    assert unseen([REPO / "orchestrator" / "ids.py", REPO / "tests" / "conftest.py", stray], roots) == [
        "bench/allocator.py"]
