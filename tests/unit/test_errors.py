"""The one error tree (``orchestrator/errors.py``): every exception class the package defines is in
it, and the drawing in that module's docstring is the tree as the code has it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import orchestrator
from orchestrator import errors
from orchestrator.errors import OrchestratorError

#: defined outside the tree on purpose, and why
OUTSIDE = {"orchestrator.lanes.process.launcher.LaneGone": "a script run without importing the orchestrator"}


def exception_classes() -> dict[str, type[BaseException]]:
    """``module.Class`` → class, for every exception class a module of the package defines."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(orchestrator.__path__, "orchestrator."):
        if info.name.rpartition(".")[2] == "__main__":
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def drawn_parents() -> dict[str, str | None]:
    """Class name → the name it hangs from in the docstring's drawing (None: the root)."""
    doc = errors.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n", 2)[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = re.search(r"[A-Za-z_]\w*", line)
        assert match, line
        column = match.start()
        names = re.findall(r"[A-Za-z_]\w*", line[column:].split("  ")[0])
        while stack and stack[-1][0] >= column:
            stack.pop()
        for name in names:
            parents[name] = stack[-1][1] if stack else None
        stack.append((column, names[-1]))
    return parents


def test_every_exception_class_of_the_package_is_in_the_tree() -> None:
    classes = exception_classes()
    assert len(classes) > 40  # the walk saw the package (lanes, builders, n8n, sandbox…)
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, OrchestratorError))
    assert outside == sorted(OUTSIDE)


def test_the_docstring_draws_the_tree_as_it_is() -> None:
    parents = drawn_parents()
    classes = {name: cls for name, cls in exception_classes().items() if name not in OUTSIDE}
    assert sorted(cls.__name__ for cls in classes.values()) == sorted(parents)  # each drawn once, none missing
    for cls in classes.values():
        drawn = parents[cls.__name__]
        if drawn is None:
            assert cls is OrchestratorError
        else:
            assert drawn in [base.__name__ for base in cls.__bases__], f"{cls.__name__} hangs from {drawn}"


def test_the_drawing_reader_sees_nesting() -> None:
    """The reader of the drawing itself, on the part of the tree that nests deepest."""
    parents = drawn_parents()
    assert parents["OrchestratorError"] is None
    assert (parents["N8nRateLimited"], parents["N8nHTTPError"], parents["N8nError"]) == (
        "N8nHTTPError", "N8nError", "OrchestratorError")
    assert parents["N8nNotFound"] == "N8nHTTPError" and parents["IsolationError"] == "SandboxError"
