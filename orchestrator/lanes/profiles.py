"""Env profiles: ``lanes/profiles/<name>.env`` files merged with per-run overrides.

A profile is ``KEY=VALUE`` lines, ``#`` comments, and ``@include other.env`` to build on another
profile. Profiles hold configuration only: a key that looks like a secret is refused at load with
the file and line, so a key can never be committed by accident. Secrets reach lanes from the
orchestrator's own environment (:data:`SECRET_PASSTHROUGH`) and travel in ``LaneSpec.secret_env``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.redact import register_secret

#: Env vars taken from the orchestrator's environment and handed to lanes as secrets.
SECRET_PASSTHROUGH = (
    "N8N_INSTANCE_AI_MODEL_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "CONTEXT7_API_KEY",
    "INSTANCE_AI_BRAVE_SEARCH_API_KEY",
)
#: Non-secret env vars a run may forward from its own environment to every lane.
CONFIG_PASSTHROUGH = (
    "N8N_INSTANCE_AI_MODEL",
    "N8N_INSTANCE_AI_MODEL_URL",
    "N8N_INSTANCE_AI_EVAL_MODEL",
    "N8N_INSTANCE_AI_EVAL_EFFORT",
)
_SECRET_KEY = re.compile(r"(_KEY|_TOKEN|_PASSWORD|SECRET)$|(_KEY|_TOKEN|_PASSWORD|SECRET)_", re.I)
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def profile_dirs() -> list[Path]:
    """Where profiles are looked up, in order: ``$ORCHESTRATOR_PROFILES_DIR``, ``./lanes/profiles``,
    then the repository's ``lanes/profiles``."""
    dirs: list[Path] = []
    if env := os.environ.get("ORCHESTRATOR_PROFILES_DIR"):
        dirs.append(Path(env))
    dirs.append(Path.cwd() / "lanes" / "profiles")
    dirs.append(Path(__file__).resolve().parents[2] / "lanes" / "profiles")
    return dirs


def find_profile(name: str) -> Path:
    """The profile file for ``name``: a path to an ``.env`` file, or ``<name>.env`` in the first of
    :func:`profile_dirs` that has it. Raises ``ConfigError`` naming the known profiles."""
    candidate = Path(name)
    if candidate.suffix == ".env" and candidate.is_file():
        return candidate
    for d in profile_dirs():
        path = d / f"{name}.env"
        if path.is_file():
            return path
    known = sorted({p.stem for d in profile_dirs() if d.is_dir() for p in d.glob("*.env")})
    raise ConfigError(f"--profile: unknown profile {name!r}; known profiles: {', '.join(known) or 'none'}")


def parse_profile(path: Path, _seen: frozenset[Path] = frozenset()) -> dict[str, str]:
    """A profile's ``KEY=VALUE`` lines (``#`` comments, ``@include <file>`` relative to it, later keys
    win). Raises ``ConfigError`` naming the file and line for a bad line, a key that looks like a
    secret (profiles hold none) or an include cycle."""
    path = path.resolve()
    if path in _seen:
        raise ConfigError(f"{path}: @include cycle")
    env: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@include "):
            env.update(parse_profile(path.parent / line.split(None, 1)[1].strip(), _seen | {path}))
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise ConfigError(f"{path}:{lineno}: expected KEY=VALUE, got {raw!r}")
        if _SECRET_KEY.search(key):
            raise ConfigError(
                f"{path}:{lineno}: {key} looks like a secret; profiles must not hold secrets "
                "(set it in the orchestrator's environment instead)"
            )
        env[key] = value.strip()
    return env


def parse_overrides(pairs: list[str], flag: str = "--env") -> dict[str, str]:
    """``KEY=VALUE`` pairs as a dict. Raises ``ConfigError`` naming ``flag`` for a malformed pair."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _KEY.match(key):
            raise ConfigError(f"{flag}: expected KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def resolve_env(profile: str, overrides: list[str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(config env, secret env) for lanes of ``profile`` with ``--env`` overrides on top."""
    env = parse_profile(find_profile(profile))
    for key in CONFIG_PASSTHROUGH:
        if key in os.environ:
            env[key] = os.environ[key]
    secrets: dict[str, str] = {}
    for key, value in parse_overrides(overrides or []).items():
        if _SECRET_KEY.search(key):
            secrets[key] = value
        else:
            env[key] = value
    for key in SECRET_PASSTHROUGH:
        if os.environ.get(key):
            secrets.setdefault(key, os.environ[key])
    for value in secrets.values():
        register_secret(value)
    return env, secrets
