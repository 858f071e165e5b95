"""Issue 38, "plug-ins with typed options": a plug-in's flags come from its options model
(``orchestrator/plugin_flags.py``), and neither the CLI nor the run names one of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from orchestrator.builders.builder import BUILDERS
from orchestrator.cli.main import app
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import BACKENDS
from orchestrator.plugin_flags import (
    cleanup_flags,
    cleanup_options,
    plugin_flags,
    plugin_option_names,
    secret_option_names,
)
from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import resolve

PKG = Path(__file__).resolve().parents[2] / "orchestrator"
#: what reads the run's config in cli/ and run/ (``cfg.x``, ``self.cfg.x``, ``run.config.x``…)
CONFIG_NAMES = {"cfg", "config", "base", "resolved", "checked"}


def test_every_plug_in_flag_is_a_field_of_an_options_model_with_its_help() -> None:
    flags = plugin_flags()
    assert {"base_url", "email", "password", "prebuilt_workflows", "delete_prebuilt_workflows", "mcp_server",
            "build_cwd", "build_mcp_timeout_ms"} <= set(flags)
    models = {**BACKENDS.options_models(), **BUILDERS.options_models()}
    for flag in flags.values():
        owners = [m for m in models.values() if flag.name in getattr(m, "flags", ())]
        assert owners, flag.name
        owner = owners[0]
        assert issubclass(owner, BaseModel), owner
        description = owner.model_fields[flag.name].description
        assert description, flag.name
        assert flag.help.startswith(description[:1].upper())
    assert flags["password"].secret and flags["password"].envvar == "N8N_EVAL_PASSWORD"
    assert flags["base_url"].owners == ("static backend",)
    assert set(flags["mcp_server"].owners) == {"mcp builder", "remote builder"}


def test_the_run_commands_offer_them_and_a_run_config_files_them_under_plugin_options(tmp_path: Path) -> None:
    help_text = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "250", "NO_COLOR": "1"}).output
    for flag in plugin_flags().values():
        assert flag.flag in help_text, flag.flag
    assert not set(plugin_flags()) & set(RunConfig.model_fields)  # the run config has no field of a plug-in
    cfg = RunConfig(backend="static", base_url="http://127.0.0.1:9", password="hunter2-secret", lanes=1,
                    state_dir=tmp_path)
    assert cfg.plugin_options == {"base_url": "http://127.0.0.1:9", "password": "hunter2-secret"}
    assert "password" in secret_option_names() and "hunter2-secret" not in str(cfg.public())
    run = resolve(cfg)
    assert run.backend_config.model_dump()["base_url"] == "http://127.0.0.1:9"  # the static backend took it
    with pytest.raises(ConfigError, match="^--no-such-option: extra inputs are not permitted"):
        RunConfig(no_such_option=1)
    with pytest.raises(ConfigError, match=r"^--lanes: 2 exceeds the 1 --base-url lane\(s\) given$"):
        resolve(cfg.replace(lanes=2))  # the static backend's own check, as the run is resolved


def _named(tree: ast.AST, names: set[str]) -> list[str]:
    """Where ``tree`` names a plug-in option: a ``--flag`` string, ``cfg.<option>``, a keyword."""
    flags = {"--" + n.replace("_", "-") for n in names}
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found += [f"{node.lineno}: {f}" for f in flags if re.search(re.escape(f) + r"(?![\w-])", node.value)]
        elif isinstance(node, ast.arg) and node.arg in names:  # a command's own option: def cmd(email=…)
            found.append(f"{node.lineno}: {node.arg}=")
        elif isinstance(node, ast.Attribute) and node.attr in names:
            base = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
            if base in CONFIG_NAMES:
                found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_cli_and_run_name_no_plug_in_flag() -> None:
    names = set(plugin_option_names()) - set(RunConfig.model_fields)  # a run-wide flag a plug-in reads too
    names |= set(cleanup_flags()) - {"dry_run"}  # cleanup's too (``cases push --dry-run`` is its own)
    found = {str(p.relative_to(PKG)): hits for folder in ("cli", "run") for p in sorted((PKG / folder).rglob("*.py"))
             if (hits := _named(ast.parse(p.read_text()), names))}
    assert found == {}


def test_the_check_finds_a_named_flag() -> None:
    tree = ast.parse('"""--base-url in a docstring is prose."""\nx = cfg.base_url\ny = ["--prebuilt-workflows"]\n'
                     'def cleanup(email=None): ...\n')
    assert _named(tree, {"base_url", "prebuilt_workflows", "email"}) == [
        "2: .base_url", "3: --prebuilt-workflows", "4: email="]


def test_cleanup_takes_the_backends_own_flags_from_their_cleanup_models(tmp_path: Path) -> None:
    """``orchestrator cleanup`` offers the static owner's and the Kubernetes janitor's flags, made from
    the backends' ``cleanup`` models; a bad value is one line naming the backend and the option."""
    flags = cleanup_flags()
    assert {"email", "password", "kubernetes", "namespace", "context", "grace_seconds", "lease_grace_seconds",
            "dry_run"} <= set(flags)
    assert flags["password"].secret and flags["email"].envvar == "N8N_EVAL_EMAIL"
    # a plain cleanup: the static owner only; the janitor's environment is neither read nor refused
    bad_env = {"ORCHESTRATOR_K8S_NAMESPACE": "Not_A_Name"}
    options = cleanup_options({"email": "o@example.com", "password": "pw", "kubernetes": False}, bad_env)
    assert set(options) == {"static"} and "pw" not in repr(options["static"])  # the password is a secret
    janitor = cleanup_options({"kubernetes": True}, {})["kubernetes"]
    assert janitor.asks_for_janitor() and type(janitor).has_janitor
    with pytest.raises(ConfigError, match="kubernetes backend: option 'namespace' \\(env ORCHESTRATOR_K8S_NAMESPACE\\)"):
        cleanup_options({}, bad_env, named=["kubernetes"])
    with pytest.raises(ConfigError, match="kubernetes backend: option 'grace_seconds'"):
        cleanup_options({"grace_seconds": -1.0}, {})
    result = CliRunner().invoke(app, ["cleanup", "--state-dir", str(tmp_path), "--grace-seconds", "-1"])
    assert isinstance(result.exception, ConfigError) and "grace_seconds" in str(result.exception)
