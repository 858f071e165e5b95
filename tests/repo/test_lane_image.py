"""The reproducible lane image: built from a lockfile (n8n's npm tree, Debian packages by version),
tagged by a hash of its inputs (``lanes/image_tag.py``), rebuilt and pushed by the cluster workflow
only when an input changed, and referenced by digest."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.toolchain import N8N_VERSION

REPO = Path(__file__).resolve().parents[2]
LANES = REPO / "lanes"
BASE_DIGEST = "debian@sha256:" + "1" * 64


def tag(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(LANES / "image_tag.py"), "--root", str(root)]
    for a in args:
        cmd += ["--build-arg", a]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture()
def inputs(tmp_path: Path) -> Path:
    """A copy of the lane image's inputs (the build context minus what the build does not read)."""
    root = tmp_path / "lanes"
    root.mkdir()
    shutil.copy(LANES / "Dockerfile", root / "Dockerfile")
    shutil.copytree(LANES / "lock", root / "lock")
    return root


def test_the_lockfiles_pin_what_the_build_installs() -> None:
    """The npm lockfile pins the n8n the toolchain runs (exact, every package with its integrity
    hash); each Debian package has a version; the Dockerfile installs from both (npm ci)."""
    lock = json.loads((LANES / "lock/package-lock.json").read_text())
    assert lock["lockfileVersion"] == 3 and lock["packages"][""]["dependencies"] == {"n8n": N8N_VERSION}
    assert json.loads((LANES / "lock/package.json").read_text())["dependencies"] == {"n8n": N8N_VERSION}
    assert lock["packages"]["node_modules/n8n"]["version"] == N8N_VERSION
    assert all(p.get("integrity") for name, p in lock["packages"].items() if name and not p.get("link"))
    pins = [line for line in (LANES / "lock/apt-packages.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins and all(re.fullmatch(r"[a-z0-9.+-]+=[0-9][A-Za-z0-9.+~:-]*", p) for p in pins), pins
    dockerfile = (LANES / "Dockerfile").read_text()
    assert "npm24 ci --ignore-scripts" in dockerfile and "npm24 install" not in dockerfile
    assert "/tmp/lane-lock/apt-packages.txt" in dockerfile


def test_the_tag_is_stable_for_the_same_inputs_and_changes_with_any(inputs: Path, tmp_path: Path) -> None:
    first = tag(inputs, f"BASE_IMAGE={BASE_DIGEST}")
    assert first.returncode == 0, first.stderr
    t = first.stdout.strip()
    assert re.fullmatch(rf"{re.escape(N8N_VERSION)}-[0-9a-f]{{16}}", t)
    # the same inputs elsewhere, and a build argument given at its Dockerfile default: the same tag
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(inputs, elsewhere)
    assert tag(elsewhere, f"BASE_IMAGE={BASE_DIGEST}").stdout.strip() == t
    assert tag(inputs, f"BASE_IMAGE={BASE_DIGEST}", f"N8N_VERSION={N8N_VERSION}").stdout.strip() == t
    assert tag(LANES, f"BASE_IMAGE={BASE_DIGEST}").stdout.strip() == t  # the repository's own inputs
    # any input changed: another tag
    seen = {t, tag(inputs, "BASE_IMAGE=debian@sha256:" + "2" * 64).stdout.strip()}
    changes = {
        "lock/apt-packages.txt": lambda s: s.replace("make=4.3-4.1", "make=4.3-4.2"),
        "lock/package-lock.json": lambda s: s.replace('"version": "4.', '"version": "5.', 1),
        "Dockerfile": lambda s: s + "\n# a comment is an input too\n",
    }
    for name, change in changes.items():
        path = inputs / name
        before = path.read_text()
        path.write_text(change(before))
        seen.add(tag(inputs, f"BASE_IMAGE={BASE_DIGEST}").stdout.strip())
        path.write_text(before)
    assert len(seen) == 2 + len(changes)
    assert tag(inputs, f"BASE_IMAGE={BASE_DIGEST}").stdout.strip() == t  # all restored: the first tag again


def test_a_lockfile_of_another_n8n_is_refused(inputs: Path) -> None:
    bad = tag(inputs, "N8N_VERSION=1.0.0")
    assert bad.returncode == 1 and bad.stdout == ""
    assert f"pins n8n {N8N_VERSION} but the build installs 1.0.0" in bad.stderr


FAKE_DOCKER = r"""#!/bin/bash
printf '%s\n' "$*" >> "$DOCKER_LOG"
case "$1 $2 $3" in
  "buildx imagetools inspect")
    ref="$4"
    grep -qxF "$ref" "$REMOTE" || exit 1
    printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s"}\n' \
      "$(printf '%s' "$ref" | sha256sum | cut -c1-64)";;
  "image inspect --format") echo "debian@sha256:$(printf 1%.0s {1..64})";;
esac
case "$1" in
  push) echo "$2" >> "$REMOTE";;
  login) cat > /dev/null;;
esac
exit 0
"""


def test_cluster_run_rebuilds_the_lane_image_only_when_its_inputs_changed(tmp_path: Path) -> None:
    """cluster-run.yml's build step, run with a stand-in ``docker`` that records its calls and
    keeps a registry in a file: the first run builds and pushes the lane image under its content
    tag; a second run with the same inputs builds only the orchestrator image; both hand Helm the
    digests (``LANE_DIGEST``, ``ORCHESTRATOR_DIGEST``) the chart turns into ``repo@sha256:``."""
    from repo.test_workflows import WORKFLOWS, load, steps

    (build,) = [s for _, s in steps(load(WORKFLOWS / "cluster-run.yml")) if s.get("name") == "Build and push the images"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    log, remote = tmp_path / "docker.log", tmp_path / "registry"
    remote.write_text("")
    expected_tag = tag(LANES, f"BASE_IMAGE={BASE_DIGEST}").stdout.strip()

    def run() -> tuple[list[str], dict[str, str]]:
        log.write_text("")
        github_env = tmp_path / "github_env"
        github_env.write_text("")
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", DOCKER_LOG=str(log), REMOTE=str(remote),
                   GITHUB_ENV=str(github_env), REGISTRY="registry.invalid/evals", REGISTRY_USER="bot",
                   REGISTRY_PASSWORD="push-token", TAG="0123abc")
        subprocess.run(["bash", "-e", "-c", build["run"]], env=env, check=True, timeout=60, cwd=REPO)
        out = dict(line.split("=", 1) for line in github_env.read_text().splitlines())
        return log.read_text().splitlines(), out

    calls, out = run()
    lane = f"registry.invalid/evals/n8n-eval-lane:{expected_tag}"
    assert out["LANE_TAG"] == expected_tag
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", out["LANE_DIGEST"])
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", out["ORCHESTRATOR_DIGEST"]) and out["ORCHESTRATOR_DIGEST"] != out["LANE_DIGEST"]
    builds = [c for c in calls if c.startswith("build ")]
    assert len(builds) == 2 and f"--build-arg BASE_IMAGE={BASE_DIGEST} -t {lane}" in builds[1]
    assert f"push {lane}" in calls
    again, out2 = run()
    assert [c for c in again if c.startswith("build ")] == builds[:1]  # the orchestrator only
    assert not [c for c in again if c.startswith(f"push {lane}")]
    assert out2["LANE_DIGEST"] == out["LANE_DIGEST"] and out2["LANE_TAG"] == expected_tag
