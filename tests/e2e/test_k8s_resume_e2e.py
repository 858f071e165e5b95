"""A killed orchestrator pod's run taken over and finished, end to end (issue #35's acceptance): the
real ``orchestrator run`` (and ``orchestrator ab``) with ``--backend kubernetes``, on the loopback fake
API server enforcing the Roles of a real render of the chart, with the chart's env; the lane pods'
URL points at one real n8n process lane (no container runs here), builds by the real claude CLI on
the scripted model. The first process is SIGKILLed once a unit finished; a second one — another
pod of the same Job: other POD_NAME/UID, same run id, same state volume, ``--resume-existing`` —
takes the run over (waits out the old Lease, removes the old pod's lanes), finishes it and tears
down: not one API request refused, no lane object left.

Our own behaviour (n8n's harness has no cluster runner and no resume).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from repo.test_helm_chart import AB_VALUES, RELEASE, container, cron, one, render
from support.k8s_fake_api import FakeApiServer
from support.k8s_fake_rbac import authorizer
from support.lanes import StartedLane
from support.process_lanes import REPO, offline_env, run_and_sweep

from orchestrator.lanes.kubernetes import objects as k8s
from orchestrator.lanes.process.backend import labelled_processes

pytestmark = [pytest.mark.n8n, pytest.mark.claude, pytest.mark.slow]

NS = "evals"
TOKEN = "token-orchestrator"
CASES = "smoke-manual-code-greetings,smoke-manual-set-static-fields"
PODS = {"old": ("orch-old", "aaaaaaaa-0000-4000-8000-0000000000a1"), "new": ("orch-new", "bbbbbbbb-0000-4000-8000-0000000000b2")}
JOB = {"JOB_NAME": "n8n-eval-orchestrator-ab-1", "JOB_UID": "dddddddd-0000-4000-8000-0000000000d3"}


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.is_file() else []


def _kubeconfig(server: FakeApiServer, path: Path) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server.url}'}}}}]\n"
        f"contexts: [{{name: fake, context: {{cluster: fake, user: sa, namespace: {NS}}}}}]\n"
        f"users: [{{name: sa, user: {{token: {TOKEN}}}}}]\n")
    return path


def _env(template: dict[str, Any], pod: str, kubeconfig: Path, lane: StartedLane) -> dict[str, str]:
    """The chart's env for this pod (downward API filled in), the kubeconfig of its account, and the
    lanes' URL: the one real n8n."""
    chart = {e["name"]: e["value"] for e in container(template)["env"] if "value" in e and e["name"] != "HOME"}
    name, uid = PODS[pod]
    env = {k: v for k, v in offline_env().items() if not k.startswith(("KUBERNETES_", "ORCHESTRATOR_", "POD_", "JOB_"))}
    return {**env, **chart, "POD_NAME": name, "POD_NAMESPACE": NS, "POD_UID": uid, **JOB,
            "KUBECONFIG": str(kubeconfig), "ORCHESTRATOR_K8S_URL_TEMPLATE": lane.base_url,
            "ORCHESTRATOR_K8S_LEASE_TTL_S": "3"}


def _lane_objects(server: FakeApiServer) -> set[str]:
    with server.state.cond:
        return {f"{r}/{n}" for (r, _, n), o in server.state.objects.items()
                if (o["metadata"].get("labels") or {}).get(k8s.LABEL_NAME) == k8s.LANE_APP}


def _killed_then_resumed(tmp_path: Path, docs: list[dict[str, Any]], template: dict[str, Any], lane: StartedLane,
                         command: list[str], run_ids: list[str]) -> tuple[subprocess.CompletedProcess[str], FakeApiServer]:
    state, first_units = tmp_path / "state", tmp_path / "state" / "runs" / run_ids[0] / "units.jsonl"
    server = FakeApiServer()
    with server:
        server.state.authorizer = authorizer(docs, {TOKEN: f"{NS}/{RELEASE}"})
        server.add("jobs", NS, {"metadata": {"name": JOB["JOB_NAME"], "uid": JOB["JOB_UID"]}, "status": {}})
        for name, uid in PODS.values():
            server.add("pods", NS, {"metadata": {"name": name, "uid": uid, "labels": {k8s.LABEL_NAME: k8s.ORCHESTRATOR_APP}},
                                    "status": {"phase": "Running"}})
        kubeconfig = _kubeconfig(server, tmp_path / "kubeconfig")

        def args(pod: str) -> list[str]:
            return [sys.executable, "-m", "orchestrator", *command, "--state-dir", str(state),
                    "--output-dir", str(tmp_path / pod)]

        first = subprocess.Popen(args("old"), cwd=REPO, env=_env(template, "old", kubeconfig, lane), text=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 400
            while not _records(first_units) and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _records(first_units), "the first orchestrator never finished a unit"
            first.send_signal(signal.SIGKILL)  # mid-sweep: no teardown, no results written after this
            first.wait(timeout=30)
        finally:
            if first.poll() is None:
                first.kill()
            for rid in run_ids:  # the pod died whole: its builds' claude processes (own sessions) with it
                for pid in labelled_processes(rid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        assert _lane_objects(server), "the killed orchestrator left no lane object to take over"
        done, found = run_and_sweep(args("new"), run_ids, env=_env(template, "new", kubeconfig, lane), timeout=900)
        assert found == {rid: [] for rid in run_ids}
        server.settle()
        assert [why for _, why in server.state.denied] == []
        assert _lane_objects(server) == set()
    return done, server


def test_a_killed_nightly_run_is_taken_over_and_finished_under_the_charts_roles(
        tmp_path: Path, shared_plain_lane: StartedLane) -> None:
    docs = render()
    template = cron(docs)["spec"]["jobTemplate"]["spec"]["template"]
    run_id = "nightly-" + os.urandom(3).hex()
    done, server = _killed_then_resumed(tmp_path, docs, template, shared_plain_lane, [
        "run", "--run-id", run_id, "--resume-existing", "--backend", "kubernetes", "--builder", "mcp",
        "--model-server", "scripted", "--lanes", "1", "--per-lane-builds", "1", "--filter", CASES, "--iterations", "2"],
        [run_id])
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"run {run_id}: 2 case(s) × 2 = 4 unit(s)," in done.stderr and "left to run" in done.stderr
    results = json.loads((tmp_path / "old" / "eval-results.json").read_text())["orchestrator"]
    assert sorted((u["case"], u["iteration"]) for u in results["units"]) == sorted(
        (c, i) for c in CASES.split(",") for i in range(2))
    # the new lanes were the new pod's, under new attempt numbers
    created = [r.body["metadata"]["name"] for r in server.state.requests if r.method == "POST" and r.path.endswith("/pods")]
    assert created[0].endswith("-0-0") and created[-1].endswith("-0-1")
    # ... after the old pod's lane was removed by uid (the takeover), not left for the janitor
    deleted = [r.path.rsplit("/", 1)[1] for r in server.state.requests if r.method == "DELETE" and "/pods/" in r.path]
    assert deleted.index(created[0]) < deleted.index(created[-1])


def test_a_killed_ab_job_is_taken_over_and_finished_under_the_charts_roles(
        tmp_path: Path, shared_plain_lane: StartedLane) -> None:
    docs = render(AB_VALUES)
    template = one(docs, "Job")["spec"]["template"]
    ab_id = "ab-" + os.urandom(3).hex()
    run_ids = [f"{ab_id}-control", f"{ab_id}-variant"]
    done, _ = _killed_then_resumed(tmp_path, docs, template, shared_plain_lane, [
        "ab", "--run-id", ab_id, "--resume-existing", "--arm", "control=anthropic/claude-sonnet-4-6",
        "--arm", "variant=anthropic/claude-sonnet-4-6", "--builder", "mcp", "--backend", "kubernetes",
        "--model-server", "scripted", "--lanes", "1", "--per-lane-builds", "1", "--filter", CASES.split(",")[0],
        "--iterations", "2", "--experiment-name", "e2e"], run_ids)
    assert done.returncode == 0, done.stderr[-4000:]
    for arm in ("control", "variant"):
        data = json.loads((tmp_path / "old" / arm / "eval-results.json").read_text())["orchestrator"]
        assert sorted(u["iteration"] for u in data["units"]) == [0, 1]
    assert (tmp_path / "old" / "ab-report.md").exists()
