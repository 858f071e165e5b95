"""No secret reaches an artifact; staged claude configs are private and short-lived; lanes bind
loopback only; owner passwords are random per run.

One real run (one process lane, two smoke cases one after the other, the real claude CLI, the
scripted model as ``--model-server real`` with a known fake API key). The second build is held at
the model so the test can look at the live run: the staged claude config, the lane's listening
sockets and ``/metrics``. Afterwards every artifact — state dir (ledger, units, run config, lane
logs), output dir (results, report, PR comment), captured stdout/stderr and logs, the metrics
text — is searched for every secret the run registered (API key, owner/admin/member passwords,
invitation tokens, MCP keys, session cookies).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import stat
from pathlib import Path

import httpx
import pytest
from faults.helpers import (
    FAKE_API_KEY,
    LANE_MODEL_KEY,
    BuildGate,
    ModelDesk,
    assert_nothing_left,
    jsonl,
    ledger_records,
    run_config,
    unique,
    wait_until,
)
from support import tools

from orchestrator.lanes.bringup import make_owner
from orchestrator.lanes.process.backend import group_members
from orchestrator.redact import install_log_redaction, known_secrets
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import prepare
from orchestrator.scripted import scripts as ms

#: Secret shapes that must never be written whoever produced them: JWTs (MCP keys, n8n cookies)
#: and Anthropic-style keys.
SECRET_SHAPES = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}|sk-ant-[A-Za-z0-9_-]{8,}")
LISTEN = "0A"


def free_port() -> int:
    return tools.free_port(6100, 6200)


def listening_sockets(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket the given processes listen on (IPv4 and IPv6)."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir() if fd_dir.is_dir() else []:
            try:
                target = fd.readlink().as_posix()
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != LISTEN or inode not in inodes:
                continue
            addr_hex, port_hex = local.split(":")
            raw = bytes.fromhex(addr_hex)
            if v6:  # four little-endian 32-bit words
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                address = socket.inet_ntop(socket.AF_INET6, raw)
            else:
                address = socket.inet_ntop(socket.AF_INET, raw[::-1])
            found.append((address, int(port_hex, 16)))
    return found


def test_owner_passwords_are_random_per_run_unless_given() -> None:
    first, second = make_owner("run-a"), make_owner("run-a")
    assert first.password != second.password and len(first.password) >= 20
    assert first.password in known_secrets() and second.password in known_secrets()
    assert make_owner("run-b", "Given-Passw0rd").password == "Given-Passw0rd"
    assert "Given-Passw0rd" in known_secrets()
    assert first.password not in repr(first)


@pytest.mark.n8n
@pytest.mark.claude
async def test_no_secret_reaches_any_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # everything, httpx/httpcore traces of cookies included
    install_log_redaction()  # as the CLI does: a redacting filter on every root handler (caplog's too)
    desk = ModelDesk()
    desk.server.start()
    gate = BuildGate(pass_first=1)
    desk.use(ms.demo_script(builder=gate))
    for key, value in {"ANTHROPIC_API_KEY": FAKE_API_KEY, "ANTHROPIC_BASE_URL": desk.base_url,
                       "N8N_INSTANCE_AI_MODEL_URL": desk.base_url, "N8N_INSTANCE_AI_MODEL_API_KEY": LANE_MODEL_KEY}.items():
        monkeypatch.setenv(key, value)
    before = known_secrets()
    run_id = unique("secrets")
    metrics_port = free_port()
    cfg = run_config(tmp_path, run_id, filter="smoke-manual-set-static-fields,smoke-manual-code-greetings",
                     per_lane_builds=1, metrics_port=metrics_port)
    run = Run(await prepare(cfg))
    task = asyncio.create_task(run.execute())
    run_dir = cfg.state_dir / "runs" / run_id
    try:
        await wait_until(lambda: (len(jsonl(run_dir / "units.jsonl")) >= 1 and gate.waiting >= 1) or task.done(),
                         300, "the second build in flight")
        assert not task.done(), task.result()
        [lane] = run.lanes.values()

        # the staged claude config of the build in flight: a 0700 dir, a 0600 file, under the run dir
        [staged] = list((run_dir / "builds").glob("claude-build-*"))
        config = staged / "mcp-config.json"
        assert stat.S_IMODE(staged.stat().st_mode) == 0o700
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert any(s in config.read_text() for s in known_secrets() - before)  # the member's MCP key

        # the lane listens on loopback only: its HTTP port and its task-broker port
        pids = group_members(int(lane.handle))
        sockets = listening_sockets(pids)
        [meta] = [r["meta"] for r in ledger_records(run_id, cfg.state_dir) if r["op"] == "create" and r["kind"] == "lane"]
        ports = {port for _, port in sockets}
        assert {meta["port"], meta["broker_port"]} <= ports, sockets
        assert all(address == "127.0.0.1" for address, _ in sockets), sockets

        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
        assert "units_done" in metrics
    finally:
        gate.open()
        outcome = await asyncio.wait_for(task, 300)
        desk.server.stop()
    assert outcome.ok and outcome.cleanup_failures == []
    assert not list((run_dir / "builds").iterdir())  # every staged dir went with its build

    secrets = (known_secrets() - before) | {FAKE_API_KEY, lane.owner.password}
    assert lane.owner.password in known_secrets() and len(secrets) >= 12  # passwords, tokens, keys, cookies
    captured = capfd.readouterr()
    artifacts = {"stdout": captured.out, "stderr": captured.err, "logs": caplog.text, "/metrics": metrics}
    for root in (cfg.state_dir, cfg.output_dir):
        for path in root.rglob("*"):
            if path.is_file():
                artifacts[str(path)] = path.read_text(errors="replace")
    assert any(p.endswith("ledger.jsonl") for p in artifacts) and any(p.endswith(".log") for p in artifacts)
    assert any(p.endswith("eval-results.json") for p in artifacts) and any(p.endswith("report.html") for p in artifacts)
    for name, text in artifacts.items():
        for secret in secrets:
            assert secret not in text, f"a registered secret ({len(secret)} chars) is in {name}"
        assert not SECRET_SHAPES.search(text), f"a key- or JWT-shaped string is in {name}"
    assert_nothing_left(run_id, cfg.state_dir)
