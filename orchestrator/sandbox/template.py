"""The workspace npm template: one real ``npm install`` per n8n version, reused read-only by every sandbox.

n8n's builder writes ``/home/user/workspace/package.json`` (``tsx``, ``typescript``,
``@n8n/workflow-sdk``, ``@types/node``, versions taken from the installed n8n) and runs
``npm install --ignore-scripts --no-audit --no-fund --prefer-online`` there. A sandbox has no
network, so the template installs exactly that ``package.json`` once, from the registry, into
``<cache>/sandbox-template-<n8n version>/node_modules``. Each sandbox then sees every top-level
entry of that ``node_modules`` bind-mounted read-only into its own (writable) ``node_modules``,
beside a writable copy of npm's hidden lockfile and ``.bin`` links: npm finds the tree already
satisfied and answers "up to date" offline, without writing into the template.

The ``package.json`` is read from the installed n8n itself (``PACKAGE_JSON`` of its
``sandbox-setup`` module), so a new n8n version gets a matching template without code changes.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import SandboxError
from orchestrator.toolchain import Log, Toolchain

#: What n8n 2.41.1 writes (read from its dist); used only when the dist cannot be evaluated.
FALLBACK_PACKAGE_JSON: dict[str, object] = {
    "name": "sandbox-workspace",
    "private": True,
    "dependencies": {"tsx": "*", "typescript": "7.0.2", "@n8n/workflow-sdk": "0.34.0"},
    "devDependencies": {"@types/node": "24.10.1"},
}
SETUP_MODULE = "node_modules/@n8n/instance-ai/dist/workspace/sandbox-setup.js"
#: npm as the sandbox runs it (the system npm's CLI, run by Node 24).
NPM_CLI_CANDIDATES = (Path("/usr/lib/node_modules/npm/bin"), Path("/usr/share/nodejs/npm/bin"))
#: Top-level entries of ``node_modules`` copied (writable) instead of bind-mounted.
COPIED_ENTRIES = (".bin", ".package-lock.json")


class TemplateError(SandboxError, RuntimeError):
    """The template could not be prepared; the message names the step and its log."""


@dataclass(frozen=True)
class SandboxTemplate:
    """A prepared template: ``node_modules`` to mount and a ``bin`` folder with ``npm``/``npx`` shims."""

    root: Path

    @property
    def node_modules(self) -> Path:
        return self.root / "node_modules"

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def marker(self) -> Path:
        return self.root / ".installed"

    def ready(self) -> bool:
        """Whether the template was installed completely."""
        return self.marker.exists() and self.node_modules.is_dir() and (self.bin_dir / "npm").exists()

    def package_json(self) -> dict[str, object]:
        package: dict[str, object] = json.loads((self.root / "package.json").read_text())
        return package

    def mounted_entries(self) -> list[str]:
        """Top-level ``node_modules`` entries each sandbox gets as a read-only bind mount."""
        return sorted(e.name for e in self.node_modules.iterdir() if e.name not in COPIED_ENTRIES)

    def npm_cli_dir(self) -> Path:
        """The folder of npm's CLI the template was made with."""
        return Path((self.root / "npm-cli-dir").read_text().strip())


def template_dir(toolchain: Toolchain) -> Path:
    """Where the npm template for the toolchain's n8n version lives."""
    return toolchain.cache / f"sandbox-template-{toolchain.n8n_version}"


def workspace_package_json(toolchain: Toolchain) -> dict[str, object]:
    """The ``package.json`` the installed n8n writes into a sandbox workspace."""
    script = f"process.stdout.write(require({json.dumps(str(toolchain.n8n_prefix / SETUP_MODULE))}).PACKAGE_JSON)"
    try:
        out = subprocess.run(
            [str(toolchain.node_bin), "-e", script], cwd=toolchain.n8n_prefix, capture_output=True, timeout=60,
            check=True,
        ).stdout
        parsed = json.loads(out)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        return dict(FALLBACK_PACKAGE_JSON)
    return parsed if isinstance(parsed, dict) else dict(FALLBACK_PACKAGE_JSON)


def find_npm_cli() -> Path:
    """The folder of npm's ``npm-cli.js``. Raises :class:`TemplateError` when npm is not installed."""
    for d in NPM_CLI_CANDIDATES:
        if (d / "npm-cli.js").exists():
            return d
    npm = shutil.which("npm")
    if npm:
        real = Path(os.path.realpath(npm))
        if real.name == "npm-cli.js":
            return real.parent
    raise TemplateError("npm's CLI (npm-cli.js) was not found: install npm (apt-get install npm)")


def _write_shims(tpl: SandboxTemplate, toolchain: Toolchain, npm_cli: Path) -> None:
    tpl.bin_dir.mkdir(parents=True, exist_ok=True)
    for name, script in (("npm", "npm-cli.js"), ("npx", "npx-cli.js")):
        shim = tpl.bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{toolchain.node_bin}" "{npm_cli / script}" "$@"\n')
        shim.chmod(0o755)
    (tpl.root / "npm-cli-dir").write_text(str(npm_cli))


def ensure_template(toolchain: Toolchain, log: Log = print) -> SandboxTemplate:
    """Prepare (once, under an flock) and return the template for ``toolchain``'s n8n version."""
    tpl = SandboxTemplate(template_dir(toolchain))
    if tpl.ready():
        return tpl
    if not toolchain.n8n_ready():
        raise TemplateError(f"n8n {toolchain.n8n_version} is not installed in {toolchain.cache}")
    tpl.root.parent.mkdir(parents=True, exist_ok=True)
    with (tpl.root.parent / f".sandbox-template-{toolchain.n8n_version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tpl.ready():
            return tpl
        npm_cli = find_npm_cli()
        staging = tpl.root.with_name(tpl.root.name + ".staging")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        pkg = workspace_package_json(toolchain)
        (staging / "package.json").write_text(json.dumps(pkg, indent=2) + "\n")
        log(f"preparing the sandbox npm template for n8n {toolchain.n8n_version} in {tpl.root}")
        env = dict(os.environ, PATH=toolchain.node_path_env(), npm_config_update_notifier="false")
        cmd = [
            str(toolchain.node_bin), str(npm_cli / "npm-cli.js"), "install", "--ignore-scripts", "--no-audit",
            "--no-fund", "--loglevel=error", "--cache", str(staging / ".npm-cache"),
        ]
        with (staging / "install.log").open("wb") as out:
            proc = subprocess.run(cmd, cwd=staging, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            tail = (staging / "install.log").read_text(errors="replace").splitlines()[-15:]
            raise TemplateError(f"npm install of the sandbox template failed (exit {proc.returncode}):\n" + "\n".join(tail))
        shutil.rmtree(staging / ".npm-cache", ignore_errors=True)
        _write_shims(SandboxTemplate(staging), toolchain, npm_cli)
        shutil.rmtree(tpl.root, ignore_errors=True)
        staging.rename(tpl.root)
        tpl.marker.write_text(json.dumps({"n8n": toolchain.n8n_version, "package.json": pkg}) + "\n")
    return tpl
