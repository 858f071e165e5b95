"""Fixtures for the docker tier: our private dockerd, the local base images and the lane image.

- ``docker_host``: ``scripts/dockerd.sh start`` once per session (stopped at the end only if this
  session started it); skips when Debian's dockerd is not installed.
- ``base_image`` / ``python_base_image``: ``lanes/base-image/build.sh`` (a no-op when the tags exist).
- ``lane_image``: the lane image by the fast path (``lanes/build-image.sh --from-cache``), tagged
  by a hash of what goes into it, so it is built once per machine and rebuilt when that changes.

Lanes of the docker tests use ports 6000–6099 (two per lane: HTTP and task broker).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orchestrator.lanes.docker.backend import label_filter
from orchestrator.lanes.labels import MANAGED_BY, MANAGED_BY_LABEL
from orchestrator.toolchain import Toolchain, default_cache_dir
from support.tools import require

REPO = Path(__file__).resolve().parents[2]
DOCKERD_SH = REPO / "scripts" / "dockerd.sh"
BASE_BUILD_SH = REPO / "lanes" / "base-image" / "build.sh"
LANE_BUILD_SH = REPO / "lanes" / "build-image.sh"
BASE_IMAGE = "local/debian:bookworm"
PYTHON_BASE_IMAGE = "local/debian-python:bookworm"
LANE_IMAGE_REPO = "n8n-eval-lane"
LANE_PORT_BASE = 6000


def _run(cmd: list[str], env: dict[str, str], what: str, timeout: float) -> str:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        pytest.fail(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    require("docker", shutil.which("dockerd") is not None and shutil.which("docker") is not None,
            "apt-get install -y docker.io")
    env = dict(os.environ)
    was_running = subprocess.run(["bash", str(DOCKERD_SH), "status"], capture_output=True, check=False).returncode == 0
    out = _run(["bash", str(DOCKERD_SH), "start"], env, "scripts/dockerd.sh start", 120)
    lines = [line for line in out.splitlines() if line.startswith("DOCKER_HOST=")]
    assert lines, f"scripts/dockerd.sh start printed no DOCKER_HOST line: {out!r}"
    host = lines[-1].split("=", 1)[1]
    try:
        yield host
    finally:
        if not was_running:
            subprocess.run(["bash", str(DOCKERD_SH), "stop"], capture_output=True, check=False)


def docker_env(host: str) -> dict[str, str]:
    return dict(os.environ, DOCKER_HOST=host, DOCKER_BUILDKIT="0")


@pytest.fixture(scope="session")
def docker_client(docker_host: str) -> Iterator[docker.DockerClient]:
    client = docker.DockerClient(base_url=docker_host, timeout=600)  # removing a 2 GB image takes a while
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def base_image(docker_host: str) -> str:
    _run(["bash", str(BASE_BUILD_SH), "debian"], docker_env(docker_host), "lanes/base-image/build.sh debian", 900)
    return BASE_IMAGE


@pytest.fixture(scope="session")
def python_base_image(docker_host: str, base_image: str) -> str:
    _run(["bash", str(BASE_BUILD_SH), "python"], docker_env(docker_host), "lanes/base-image/build.sh python", 900)
    return PYTHON_BASE_IMAGE


def lane_image_tag(tc: Toolchain) -> str:
    """A tag that changes whenever the lane image's recipe or pinned versions change."""
    digest = hashlib.sha256()
    for path in (REPO / "lanes" / "Dockerfile", LANE_BUILD_SH):
        digest.update(path.read_bytes())
    digest.update(f"{tc.n8n_version}/{tc.node_version}".encode())
    return f"{LANE_IMAGE_REPO}:test-{digest.hexdigest()[:12]}"


@pytest.fixture(scope="session")
def lane_image(docker_host: str, docker_client: docker.DockerClient, base_image: str) -> str:
    tc = Toolchain(default_cache_dir())
    require("docker", tc.n8n_ready, "the lane image needs n8n installed: run `orchestrator lanes install`")
    tag = lane_image_tag(tc)
    for image in docker_client.images.list(name=LANE_IMAGE_REPO):  # stale test builds: ~2 GB each
        for old in image.tags:
            if old.startswith(f"{LANE_IMAGE_REPO}:test-") and old != tag:
                docker_client.images.remove(old)
    _run(
        ["bash", str(LANE_BUILD_SH), "--from-cache", "--if-missing", "--tag", tag, "--base", base_image],
        dict(docker_env(docker_host), N8N_EVAL_CACHE=str(tc.cache)),
        "lanes/build-image.sh --from-cache",
        1800,
    )
    return tag


def leftovers(client: docker.DockerClient, run_id: str) -> list[str]:
    """Every container and volume still carrying our labels for ``run_id``."""
    filters: dict[str, str | list[str] | bool] = {"label": label_filter(run_id)}
    found = [f"container {c.name}" for c in client.containers.list(all=True, filters=filters)]
    found += [f"volume {v.name}" for v in client.volumes.list(filters=filters)]
    return found


def remove_leftovers(client: docker.DockerClient, run_id: str) -> None:
    """Last-resort cleanup for a failed test (the tests assert nothing was left before this runs)."""
    filters: dict[str, str | list[str] | bool] = {"label": label_filter(run_id)}
    for c in client.containers.list(all=True, filters=filters):
        c.remove(force=True, v=True)
    for v in client.volumes.list(filters=filters):
        if (v.attrs.get("Labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY:
            v.remove(force=True)
