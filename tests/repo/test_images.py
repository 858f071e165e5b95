"""The images: the orchestrator image (top-level Dockerfile) builds on the local python base and runs
the CLI as a non-root user with no secret baked in; the lane image is configured the same way.
(That the lane image actually serves n8n is covered by test_docker_lanes.py.)
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess

import docker
import pytest

from orchestrator.toolchain import CLAUDE_VERSION

pytest.register_assert_rewrite("support.docker_fixtures")  # it is also a plugin (below)
from support.docker_fixtures import REPO, docker_env  # noqa: E402

pytest_plugins = ["support.docker_fixtures"]  # one session-wide dockerd and lane image for every docker test file
pytestmark = [pytest.mark.docker, pytest.mark.slow]
ORCHESTRATOR_TAG = "n8n-eval-orchestrator:test"
SECRETISH = re.compile(r"(_KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)


def docker_cli(host: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], env=env or docker_env(host), capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def orchestrator_image(docker_host: str, docker_client: docker.DockerClient, python_base_image: str) -> tuple[str, str]:
    """Build the top-level Dockerfile with a fake API key in the caller's environment."""
    try:
        previous = docker_client.images.get(ORCHESTRATOR_TAG).id
    except docker.errors.ImageNotFound:
        previous = None
    canary = f"sk-ant-canary-{secrets.token_hex(12)}"
    env = dict(docker_env(docker_host), ANTHROPIC_API_KEY=canary, N8N_INSTANCE_AI_MODEL_API_KEY=canary)
    proc = docker_cli(
        docker_host, "build", "--network", "host", "--build-arg", f"BASE_IMAGE={python_base_image}",
        "-t", ORCHESTRATOR_TAG, str(REPO), timeout=1800, env=env,
    )
    assert proc.returncode == 0, "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
    if previous and previous != docker_client.images.get(ORCHESTRATOR_TAG).id:
        try:  # the build of an earlier session, now untagged: don't let them pile up
            docker_client.images.remove(previous)
        except docker.errors.APIError:
            pass
    return ORCHESTRATOR_TAG, canary


def test_orchestrator_image_runs_the_cli(docker_host: str, orchestrator_image: tuple[str, str]) -> None:
    tag, _ = orchestrator_image
    proc = docker_cli(docker_host, "run", "--rm", "--network", "host", tag, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage: orchestrator" in proc.stdout
    for command in ("run", "lanes", "cases", "compare", "cleanup"):
        assert re.search(rf"^\s*│?\s*{command}\s", proc.stdout, re.M), f"{command!r} missing from --help:\n{proc.stdout}"


def test_orchestrator_image_has_the_pinned_claude_and_the_profiles(docker_host: str, orchestrator_image: tuple[str, str]) -> None:
    tag, _ = orchestrator_image
    proc = docker_cli(docker_host, "run", "--rm", "--network", "host", "--entrypoint", "claude", tag, "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == CLAUDE_VERSION
    probe = "from orchestrator.lanes.profiles import find_profile; print(find_profile('eval'))"
    proc = docker_cli(docker_host, "run", "--rm", "--network", "host", "--entrypoint", "python", tag, "-c", probe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("/profiles/eval.env")


def test_orchestrator_image_is_non_root_without_secrets(
    docker_host: str, docker_client: docker.DockerClient, orchestrator_image: tuple[str, str]
) -> None:
    tag, canary = orchestrator_image
    proc = docker_cli(docker_host, "run", "--rm", "--network", "host", "--entrypoint", "id", tag, "-u")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() != "0"
    image = docker_client.images.get(tag)
    config = image.attrs["Config"]
    assert config["User"] not in ("", "0", "root")
    assert config["Entrypoint"] == ["orchestrator"]
    names = [item.split("=", 1)[0] for item in config["Env"]]
    assert not [n for n in names if SECRETISH.search(n)], names
    history = docker_cli(docker_host, "history", "--no-trunc", tag).stdout
    assert canary not in json.dumps(image.attrs) and canary not in history


def test_lane_image_config(docker_client: docker.DockerClient, lane_image: str) -> None:
    config = docker_client.images.get(lane_image).attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert config["User"] == "n8n"
    assert "5678/tcp" in config["ExposedPorts"]
    assert "/healthz/readiness" in " ".join(config["Healthcheck"]["Test"])
    for key, value in {
        "E2E_TESTS": "true",
        "N8N_ENABLED_MODULES": "instance-ai,agents",
        "N8N_AI_ENABLED": "true",
        "N8N_INSTANCE_AI_EVAL_INSTANCE": "true",
        "N8N_DIAGNOSTICS_ENABLED": "false",
        "N8N_PERSONALIZATION_ENABLED": "false",
    }.items():
        assert env.get(key) == value, key
    assert "N8N_LISTEN_ADDRESS" in env
    assert not [k for k in env if SECRETISH.search(k) or k.startswith("N8N_SMTP")], env
