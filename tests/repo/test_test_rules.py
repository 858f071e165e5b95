"""The suite's own rules (issue 38, "tests that never trust the clock"): a unit test never sleeps then
asserts — it polls with a deadline (``support/polling.py``) or runs on an injected clock — so
``tests/unit`` calls no ``time.sleep`` (an ``asyncio.sleep`` is a yield or the virtual clock's)."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parents[1] / "unit"


def sleeps(source: str) -> list[int]:
    """Lines of ``time.sleep(...)`` calls, or of ``sleep(...)`` imported from ``time``."""
    tree = ast.parse(source)
    from_time = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "time"
                 for a in n.names if a.name == "sleep"}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if (isinstance(fn, ast.Attribute) and fn.attr == "sleep" and isinstance(fn.value, ast.Name)
                and fn.value.id == "time") or (isinstance(fn, ast.Name) and fn.id in from_time):
            lines.append(node.lineno)
    return lines


def test_the_check_finds_both_spellings() -> None:
    assert sleeps("import time\ntime.sleep(1)\n") == [2]
    assert sleeps("from time import sleep as nap\nnap(0.1)\n") == [2]
    assert sleeps("import asyncio\nasync def f():\n    await asyncio.sleep(0)\n") == []


def test_no_unit_test_calls_time_sleep() -> None:
    found = [f"{p.relative_to(UNIT)}:{line}" for p in sorted(UNIT.rglob("*.py")) for line in sleeps(p.read_text())]
    assert found == [], f"poll with support.polling.eventually or inject a clock instead: {found}"
