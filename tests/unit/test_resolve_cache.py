"""The module-resolution cache process lanes share (``orchestrator/resolve_cache.cjs``), run
by a real Node on a small package tree: what it records, when it answers from the file, and when it
must not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.tools import need

from orchestrator.toolchain import RESOLVE_CACHE_JS

NODE = shutil.which("node")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """<root>/app/main.js requires 'dep' (a package whose main is index.js) and a local file."""
    need(NODE is not None, "node is not on PATH")
    app = tmp_path / "root" / "app"
    dep = app / "node_modules" / "dep"
    dep.mkdir(parents=True)
    (dep / "package.json").write_text(json.dumps({"name": "dep", "main": "index.js"}))
    (dep / "index.js").write_text("module.exports = 'index';\n")
    (dep / "other.js").write_text("module.exports = 'other';\n")
    (app / "local.js").write_text("module.exports = 'local';\n")
    (app / "main.js").write_text("console.log(require('dep') + ' ' + require('./local'));\n")
    return tmp_path


def _node(script: Path, cache: Path | None, root: Path, stamp: str = "install-1") -> str:
    env = {"PATH": os.environ["PATH"], "NODE_OPTIONS": f'--require "{RESOLVE_CACHE_JS}"'}
    if cache is not None:
        env |= {"N8N_EVAL_RESOLVE_CACHE": str(cache), "N8N_EVAL_RESOLVE_ROOT": str(root),
                "N8N_EVAL_RESOLVE_STAMP": stamp}
    done = subprocess.run([str(NODE), str(script)], env=env, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def _entries(cache: Path) -> dict[str, str]:
    data = json.loads(cache.read_text())
    return {k.replace("\0", " <- "): v for k, v in data["entries"].items()}


def test_a_process_records_what_it_resolved_under_the_root_when_it_exits(tree: Path) -> None:
    root, cache = tree / "root", tree / "cache.json"
    assert _node(root / "app" / "main.js", cache, root) == "index local"
    app = root / "app"
    assert _entries(cache) == {
        f"{app} <- dep": str(app / "node_modules" / "dep" / "index.js"),
        f"{app} <- ./local": str(app / "local.js"),
    }
    assert json.loads(cache.read_text())["stamp"].endswith(" install-1")  # "<node version> <install stamp>"
    assert not list(tree.glob("cache.json.*.tmp"))


def test_answers_come_from_the_file_until_the_install_stamp_changes(tree: Path) -> None:
    root, cache = tree / "root", tree / "cache.json"
    _node(root / "app" / "main.js", cache, root)
    package = root / "app" / "node_modules" / "dep" / "package.json"
    package.write_text(json.dumps({"name": "dep", "main": "other.js"}))  # what a reinstall would change
    # same install stamp: the recorded answer is used, Node is not asked again
    assert _node(root / "app" / "main.js", cache, root) == "index local"
    # a new install stamp: the old file is ignored, Node answers, and the file is rewritten
    assert _node(root / "app" / "main.js", cache, root, stamp="install-2") == "other local"
    assert json.loads(cache.read_text())["stamp"].endswith(" install-2")
    assert _entries(cache)[f"{root / 'app'} <- dep"].endswith("other.js")


def test_nothing_outside_the_root_is_recorded_and_without_a_cache_file_nothing_happens(tree: Path) -> None:
    root, cache = tree / "root", tree / "cache.json"
    elsewhere = tree / "elsewhere"
    shutil.copytree(root / "app", elsewhere)
    assert _node(elsewhere / "main.js", cache, root) == "index local"
    assert not cache.exists()  # every resolution was outside the root: nothing to keep
    assert _node(root / "app" / "main.js", None, root) == "index local"
    assert not cache.exists()
