"""Results on a full disk: a tiny tmpfs as the output dir (a real ENOSPC), filled before the run.

The run must say clearly which file it cannot write and why, stop starting builds, keep what it
has in ``units.jsonl`` (state dir, another disk) and still tear its process lane down.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.tools import need

from .helpers import CASES, ORCH, SMOKE_CASES, ModelDesk, assert_nothing_left, jsonl, model_env, unique

pytestmark = [pytest.mark.n8n, pytest.mark.claude, pytest.mark.slow]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "full"
    mount.mkdir()
    need(os.geteuid() == 0 and shutil.which("mount") is not None, "a tmpfs mount needs root and mount(8)")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True)
    need(made.returncode == 0, f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        out = mount / "results"
        out.mkdir()  # the output dir itself exists; no file content will fit
        fd = os.open(mount / "ballast", os.O_WRONLY | os.O_CREAT)
        try:  # fill it to the last byte
            while os.write(fd, b"\0" * 512):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
        yield out
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_full_results_disk_is_a_clear_error_and_lanes_still_go(model: ModelDesk, full_disk: Path, tmp_path: Path) -> None:
    run_id = unique("diskfull")
    state = tmp_path / "state"
    out = full_disk
    done = subprocess.run(
        [*ORCH, "run", str(CASES), "--filter", ",".join(SMOKE_CASES[:2]), "--lanes", "1", "--per-lane-builds", "1",
         "--model-server", "real", "--state-dir", str(state), "--output-dir", str(out), "--run-id", run_id,
         "--outage-waits", "0.2,0.2"],
        env=model_env(model) | {"COLUMNS": "400"}, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors and all("No space left on device" in e for e in errors), done.stderr
    assert any(str(out / "eval-results.json") in e for e in errors)
    units = jsonl(state / "runs" / run_id / "units.jsonl")  # the state dir kept every finished unit
    assert [u["build"]["status"] for u in units] == ["ok", "skipped"], done.stderr  # no new build after the failure
    assert not (out / "eval-results.json").exists()
    assert_nothing_left(run_id, state)
