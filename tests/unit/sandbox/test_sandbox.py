"""The embedded sandbox service, driven by the real ``@n8n/sandbox-client`` from the n8n install.

Everything is real: the service runs as the child process a lane uses, every command runs in a
bubblewrap jail, the npm template is the one prepared from the registry for the installed n8n.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.polling import eventually_async
from support.tools import need, require

from orchestrator.sandbox import SandboxService, lane_env
from orchestrator.sandbox.template import SandboxTemplate, ensure_template
from orchestrator.toolchain import Toolchain, default_cache_dir

TC = Toolchain(default_cache_dir())
CLIENT = TC.n8n_prefix / "node_modules" / "@n8n" / "sandbox-client"

pytestmark = [pytest.mark.n8n]


@pytest.fixture(scope="module", autouse=True)
def _tools() -> None:
    """n8n and bubblewrap, through ``_tools``: skipped here when missing, a failure in CI."""
    require("n8n", TC.n8n_ready, "run `orchestrator lanes install`")
    need(shutil.which("bwrap") is not None, "bubblewrap is not installed (apt-get install bubblewrap)")


@pytest.fixture(scope="module")
def template() -> SandboxTemplate:
    return ensure_template(TC)


@pytest.fixture
async def service(tmp_path: Path, template: SandboxTemplate):
    svc = SandboxService(tmp_path / "sandboxes", TC, template=template)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


def run_client(tmp_path: Path, svc: SandboxService, body: str, api_key: str | None = "default") -> Any:
    """Run ``body`` (async JS using ``c``, a real SandboxClient) with Node 24; return what it prints as JSON."""
    script = tmp_path / f"client-{random.randrange(1 << 30)}.cjs"
    script.write_text(
        "const { SandboxClient, SandboxServiceError } = require(process.env.CLIENT);\n"
        "const c = new SandboxClient({ baseUrl: process.env.URL, apiKey: process.env.KEY || undefined,"
        " retry: { attempts: 0 } });\n"
        "const out = {};\n"
        f"(async () => {{ {body} }})().then(() => console.log(JSON.stringify(out)),"
        " (e) => { console.log(JSON.stringify({ thrown: String(e), status: e.status })); });\n"
    )
    key = svc.api_key if api_key == "default" else (api_key or "")
    env = {"PATH": os.environ["PATH"], "CLIENT": str(CLIENT), "URL": svc.url, "KEY": key}
    proc = subprocess.run([str(TC.node_bin), str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def procs_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


async def wait_no_procs(marker: str, timeout_s: float = 10.0) -> list[int]:
    """``[]`` as soon as no process carries ``marker``; those still there after ``timeout_s`` otherwise."""
    with contextlib.suppress(AssertionError):
        await eventually_async(lambda: not procs_with(marker), timeout=timeout_s, interval=0.1)
    return procs_with(marker)


async def test_real_client_round_trip(service: SandboxService, tmp_path: Path) -> None:
    out = run_client(tmp_path, service, """
      const sb = await c.createSandbox();
      out.sandbox = sb;
      out.again = await c.createSandbox({ id: sb.id });
      out.get = await c.getSandbox(sb.id);
      await c.mkdir(sb.id, '/home/user/workspace/src', true);
      await c.writeFile(sb.id, '/home/user/workspace/src/a.txt', 'hello ');
      await c.appendFile(sb.id, '/home/user/workspace/src/a.txt', 'world');
      out.read = (await c.readFile(sb.id, '/home/user/workspace/src/a.txt')).toString();
      try { await c.writeFile(sb.id, '/home/user/workspace/src/a.txt', 'x', false); } catch (e) { out.noOverwrite = e.status; }
      await c.copyFile(sb.id, { src: '/home/user/workspace/src/a.txt', dest: '/tmp/b.txt' });
      await c.moveFile(sb.id, { src: '/tmp/b.txt', dest: '/home/user/workspace/src/c.ts' });
      out.list = await c.listFiles(sb.id, { path: '/home/user/workspace/src' });
      out.listTs = await c.listFiles(sb.id, { path: '/home/user/workspace', recursive: true, extension: '.ts' });
      out.stat = await c.stat(sb.id, '/home/user/workspace/src/c.ts');
      const lines = [];
      out.exec = await c.exec(sb.id, { command: 'cat src/c.ts; echo; echo oops >&2; echo $HOME $FOO; exit 3',
        workdir: '/home/user/workspace', env: { FOO: 'bar' }, onStdout: (d) => lines.push(d) });
      out.streamed = lines.join('');
      out.cmdWrote = (await c.exec(sb.id, { command: 'echo made-inside > /home/user/inside.txt' })).exitCode;
      out.inside = (await c.readFile(sb.id, '/home/user/inside.txt')).toString();
      await c.deleteFile(sb.id, '/home/user/workspace/src', { recursive: true });
      try { await c.stat(sb.id, '/home/user/workspace/src'); } catch (e) { out.gone = e.status; }
      try { await c.readFile(sb.id, '/etc/passwd'); } catch (e) { out.outside = e.status; }
      try { await c.readFile(sb.id, '/home/user/../../etc/passwd'); } catch (e) { out.dotdot = e.status; }
      await c.deleteSandbox(sb.id);
      await c.deleteSandbox(sb.id);
      try { await c.getSandbox(sb.id); } catch (e) { out.deleted = e.status; }
    """)
    assert "thrown" not in out, out
    assert out["sandbox"]["status"] == "running" and out["again"]["id"] == out["sandbox"]["id"]
    assert abs(out["sandbox"]["createdAt"] - time.time()) < 60  # epoch seconds, as the client multiplies by 1000
    assert out["read"] == "hello world" and out["noOverwrite"] == 409
    assert [(e["name"], e["isDir"], e["type"]) for e in out["list"]] == [("a.txt", False, "file"), ("c.ts", False, "file")]
    assert [e["name"] for e in out["listTs"]] == ["src/c.ts"]
    assert out["stat"]["path"] == "/home/user/workspace/src/c.ts" and out["stat"]["size"] == 11
    ex = out["exec"]
    assert ex["exitCode"] == 3 and ex["success"] is False and ex["timedOut"] is False
    assert ex["stdout"] == "hello world\n/home/user bar\n" and ex["stderr"] == "oops\n"
    assert out["streamed"] == ex["stdout"]
    assert out["cmdWrote"] == 0 and out["inside"] == "made-inside\n"
    assert out["gone"] == 404 and out["outside"] == 400 and out["dotdot"] == 400 and out["deleted"] == 404
    assert list((service.root).iterdir()) == []


async def test_ndjson_stream_resume_and_auth(service: SandboxService) -> None:
    headers = {"X-Api-Key": service.api_key}
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        assert (await http.post("/sandboxes", json={})).status_code == 401
        assert (await http.post("/sandboxes", json={}, headers={"X-Api-Key": "wrong-key-123"})).status_code == 401
        sid = (await http.post("/sandboxes", json={}, headers=headers)).json()["id"]
        body = {"command": "echo one; sleep 0.3; echo two >&2; exit 0", "exec_id": "e1", "timeout_ms": 10_000}
        async with http.stream("POST", f"/sandboxes/{sid}/executions", json=body, headers=headers) as resp:
            assert resp.headers["content-type"].startswith("application/x-ndjson")
            events = [json.loads(line) async for line in resp.aiter_lines() if line]
        assert [e["seq"] for e in events] == list(range(len(events)))
        assert events[0] == {"seq": 0, "type": "started", "exec_id": "e1"}
        assert {"type": "stdout", "data": "one\n"}.items() <= events[1].items()
        assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 0 and events[-1]["success"] is True
        assert set(events[-1]) == {"seq", "type", "exit_code", "success", "execution_time_ms", "timed_out", "killed"}
        replay = await http.get(f"/sandboxes/{sid}/executions/e1", params={"after": 1}, headers=headers)
        assert [json.loads(x) for x in replay.text.splitlines()] == events[2:]
        # re-posting the same exec_id attaches instead of running the command again
        again = await http.post(f"/sandboxes/{sid}/executions", json=body, headers=headers)
        assert [json.loads(x) for x in again.text.splitlines()] == events
        assert (await http.delete(f"/sandboxes/{sid}/executions/e1", headers=headers)).status_code == 204
        missing = await http.get(f"/sandboxes/{sid}/executions/e1", headers=headers)
        assert missing.status_code == 404 and missing.json() == {"error": "execution not found"}


def _listener() -> tuple[socket.socket, int, list[bytes]]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    got: list[bytes] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            got.append(conn.recv(100))
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1], got


async def test_no_network_from_the_sandbox(service: SandboxService, tmp_path: Path) -> None:
    srv, port, got = _listener()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # the listener is real
            s.sendall(b"host")
        service_port = int(service.url.rsplit(":", 1)[1])
        probe = (
            "const net = require('net'); const targets = JSON.parse(process.argv[1]); let left = targets.length;"
            "for (const [h, p] of targets) { const s = net.connect({ host: h, port: p, timeout: 3000 });"
            " s.on('connect', () => { console.log('CONNECTED', h, p); s.write('sandbox'); s.end(); if (!--left) process.exit(0); });"
            " s.on('error', (e) => { console.log('FAILED', h, p, e.code); if (!--left) process.exit(0); });"
            " s.on('timeout', () => { console.log('TIMEOUT', h, p); s.destroy(); if (!--left) process.exit(0); }); }"
        )
        targets = json.dumps([["127.0.0.1", port], ["127.0.0.1", service_port], ["10.0.0.1", 80]])
        command = f"node -e {json.dumps(probe)} '{targets}'; ip -o addr 2>/dev/null || cat /proc/net/dev"
        out = run_client(tmp_path, service, f"""
          const sb = await c.createSandbox();
          out.r = await c.exec(sb.id, {{ command: {json.dumps(command)}, timeoutMs: 20000 }});
          await c.deleteSandbox(sb.id);
        """)
    finally:
        srv.close()
    stdout = out["r"]["stdout"]
    assert "CONNECTED" not in stdout, stdout
    assert f"FAILED 127.0.0.1 {port} ECONNREFUSED" in stdout
    assert f"FAILED 127.0.0.1 {service_port} ECONNREFUSED" in stdout
    assert "FAILED 10.0.0.1 80 ENETUNREACH" in stdout
    assert got == [b"host"]  # nothing from the sandbox reached the listener
    assert "eth" not in stdout.replace("ethtool", "")  # only a loopback interface exists


async def test_writes_only_inside_the_workspace(service: SandboxService, tmp_path: Path) -> None:
    outside = tmp_path / "outside-target"
    outside.mkdir()
    command = (
        f"for p in /usr/x /etc/x /x /opt/n8n-sandbox/bin/x {outside}/x /home/user/workspace/node_modules/tsx/x; do"
        " touch $p 2>/dev/null && echo WROTE $p || echo DENIED $p; done;"
        f" ls {outside} >/dev/null 2>&1 && echo SEES-HOST || echo NO-HOST-VIEW;"
        " ls /root /work >/dev/null 2>&1 && echo SEES-ROOT || echo NO-ROOT;"
        " touch /home/user/ok /tmp/ok && echo WROTE-HOME; ln -s /etc /home/user/etc-link;"
        " mount -o remount,rw /usr 2>/dev/null && echo REMOUNTED || echo NO-REMOUNT"
    )
    out = run_client(tmp_path, service, f"""
      const sb = await c.createSandbox();
      out.id = sb.id;
      out.r = await c.exec(sb.id, {{ command: {json.dumps(command)} }});
      try {{ await c.readFile(sb.id, '/home/user/etc-link/passwd'); }} catch (e) {{ out.symlink = e.status; }}
      try {{ await c.writeFile(sb.id, '/home/user/etc-link/evil', 'x'); }} catch (e) {{ out.symlinkWrite = e.status; }}
      try {{ await c.writeFile(sb.id, '/home/user/workspace/node_modules/tsx/evil', 'x'); }} catch (e) {{ out.template = e.status; }}
      out.tpl = (await c.readFile(sb.id, '/home/user/workspace/node_modules/tsx/package.json')).toString().length;
    """)
    stdout = out["r"]["stdout"]
    assert "WROTE /" not in stdout and stdout.count("DENIED") == 6, stdout
    assert "NO-HOST-VIEW" in stdout and "NO-ROOT" in stdout and "NO-REMOUNT" in stdout and "WROTE-HOME" in stdout
    assert not any(outside.iterdir()) and not Path("/usr/x").exists() and not Path("/x").exists()
    home = service.root / out["id"] / "home"
    assert (home / "ok").exists() and (service.root / out["id"] / "tmp" / "ok").exists()
    assert out["symlink"] == 400 and out["symlinkWrite"] == 400 and out["template"] == 403
    assert out["tpl"] > 0  # the template is readable through the file API
    assert not (ensure_template(TC).node_modules / "tsx" / "evil").exists()


async def test_timeout_kills_the_whole_tree(service: SandboxService, tmp_path: Path) -> None:
    marker = str(random.randrange(100_000, 999_999))
    command = f"sleep {marker} & (sleep {marker}1 &) ; bash -c 'sleep {marker}2' & wait"
    out = run_client(tmp_path, service, f"""
      const sb = await c.createSandbox();
      out.r = await c.exec(sb.id, {{ command: {json.dumps(command)}, timeoutMs: 1500 }});
      out.after = await c.exec(sb.id, {{ command: 'echo alive' }});
    """)
    r = out["r"]
    assert r["timedOut"] is True and r["success"] is False and r["exitCode"] == 137
    assert r["executionTimeMs"] >= 1400  # not before its timeout; timedOut and 137 say the timeout ended it
    assert await wait_no_procs(marker) == []
    assert out["after"]["stdout"] == "alive\n"  # the sandbox lives on


async def test_cpu_and_memory_limits(tmp_path: Path, template: SandboxTemplate) -> None:
    svc = SandboxService(tmp_path / "sb", TC, template=template,
                         extra_args=["--memory-mb", "128", "--cpu-seconds", "2", "--max-output-bytes", "5000"])
    await svc.start()
    try:
        out = run_client(tmp_path, svc, """
          const sb = await c.createSandbox();
          out.mem = await c.exec(sb.id, { command: "node -e 'const a=[]; for(;;) a.push(Buffer.alloc(1<<20, 1))'" });
          out.cpu = await c.exec(sb.id, { command: "node -e 'for(;;){}'", timeoutMs: 30000 });
          out.big = await c.exec(sb.id, { command: "yes | head -c 200000; echo done >&2" });
        """)
    finally:
        await svc.stop()
    assert out["mem"]["success"] is False and out["mem"]["exitCode"] == 137, out["mem"]  # OOM-killed (cgroup)
    assert out["cpu"]["timedOut"] is False and out["cpu"]["exitCode"] == 128 + signal.SIGKILL, out["cpu"]  # RLIMIT_CPU
    big = out["big"]
    assert big["exitCode"] == 0 and 5000 <= len(big["stdout"]) < 5000 + 65536 and "dropped" in big["stderr"]


async def _start_running(svc: SandboxService, marker: str) -> str:
    headers = {"X-Api-Key": svc.api_key}
    async with httpx.AsyncClient(base_url=svc.url, timeout=30, headers=headers) as http:
        sid: str = (await http.post("/sandboxes", json={})).json()["id"]
        body = {"command": f"sleep {marker} & sleep {marker}1 & echo up; wait", "timeout_ms": 600_000}
        async with http.stream("POST", f"/sandboxes/{sid}/executions", json=body) as resp:
            async for line in resp.aiter_lines():
                if line and json.loads(line).get("data") == "up\n":
                    break
    return sid


async def test_delete_sandbox_leaves_nothing(service: SandboxService) -> None:
    marker = str(random.randrange(100_000, 999_999))
    sid = await _start_running(service, marker)
    assert len(procs_with(marker)) >= 2
    async with httpx.AsyncClient(base_url=service.url, headers={"X-Api-Key": service.api_key}) as http:
        assert (await http.delete(f"/sandboxes/{sid}")).status_code == 204
        assert (await http.get(f"/sandboxes/{sid}")).status_code == 404
    assert procs_with(marker) == []
    assert not (service.root / sid).exists()


async def test_stop_service_leaves_nothing(tmp_path: Path, template: SandboxTemplate) -> None:
    svc = SandboxService(tmp_path / "sb", TC, template=template)
    await svc.start()
    marker = str(random.randrange(100_000, 999_999))
    await _start_running(svc, marker)
    pid = svc.pid
    await svc.stop()
    assert procs_with(marker) == [] and pid is not None and not Path(f"/proc/{pid}").exists()
    assert not svc.root.exists()
    assert not [p for p in Path("/sys/fs/cgroup/memory").rglob(f"{svc.cgroup_prefix}*")]


async def test_killed_service_takes_its_jails(tmp_path: Path, template: SandboxTemplate) -> None:
    svc = SandboxService(tmp_path / "sb", TC, template=template)
    await svc.start()
    marker = str(random.randrange(100_000, 999_999))
    try:
        await _start_running(svc, marker)
        assert svc.pid is not None
        assert svc.alive()
        os.kill(svc.pid, signal.SIGKILL)  # no cleanup code runs: --die-with-parent does the work
        assert await wait_no_procs(marker) == []
        # The jails can go first: the kernel signals them when the thread that forked them exits,
        # which may be before the service's whole thread group is gone and reapable.
        await eventually_async(lambda: not svc.alive(), timeout=5, what="the killed service reaped")
    finally:
        await svc.stop()
    assert not svc.root.exists()


async def test_closed_stdin_stops_the_service(tmp_path: Path, template: SandboxTemplate) -> None:
    """The orchestrator holds the service's stdin: when it dies the pipe closes and the service stops."""
    svc = SandboxService(tmp_path / "sb", TC, template=template)
    await svc.start()
    marker = str(random.randrange(100_000, 999_999))
    try:
        sid = await _start_running(svc, marker)
        assert svc.proc is not None and svc.proc.stdin is not None
        svc.proc.stdin.close()
        proc = svc.proc
        await eventually_async(lambda: proc.poll() is not None, interval=0.1, what="the service ended")
        assert proc.returncode == 0
        assert procs_with(marker) == [] and not (svc.root / sid).exists()
    finally:
        await svc.stop()


async def test_builder_npm_install_is_offline_and_template_stays_read_only(
    service: SandboxService, tmp_path: Path, template: SandboxTemplate
) -> None:
    before = sorted(p.name for p in template.node_modules.iterdir())
    pkg = json.dumps((template.root / "package.json").read_text())
    wf = (
        "import { workflow, node, trigger } from '@n8n/workflow-sdk';\\n"
        "const t = trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' } });\\n"
        "export default workflow('w1', 'Sandbox test').add(t);\\n"
    )
    out = run_client(tmp_path, service, f"""
      const sb = await c.createSandbox();
      await c.writeFile(sb.id, '/home/user/workspace/package.json', {pkg});
      let t = Date.now();
      out.npm = await c.exec(sb.id, {{ command: 'npm install --ignore-scripts --no-audit --no-fund --prefer-online',
        workdir: '/home/user/workspace', timeoutMs: 120000 }});
      out.npmMs = Date.now() - t;
      await c.writeFile(sb.id, '/home/user/workspace/src/workflow.ts', "{wf}");
      await c.writeFile(sb.id, '/home/user/workspace/build.mjs',
        "const m = await import(process.argv[2]); console.log(JSON.stringify(m.default.toJSON()));");
      out.build = await c.exec(sb.id, {{ command: 'node --import tsx build.mjs ./src/workflow.ts',
        workdir: '/home/user/workspace', timeoutMs: 60000 }});
      out.versions = await c.exec(sb.id, {{ command: 'node --version; npm --version; npx tsc --version',
        workdir: '/home/user/workspace' }});
    """)
    assert out["npm"]["exitCode"] == 0, out["npm"]
    assert "up to date" in out["npm"]["stdout"]
    assert out["build"]["exitCode"] == 0, out["build"]
    built = json.loads(out["build"]["stdout"].strip().splitlines()[-1])
    assert built["name"] == "Sandbox test" and built["nodes"][0]["type"] == "n8n-nodes-base.manualTrigger"
    assert out["versions"]["stdout"].startswith(f"v{TC.node_version}\n")
    assert sorted(p.name for p in template.node_modules.iterdir()) == before


def test_lane_env_names() -> None:
    assert lane_env("http://127.0.0.1:9/", "k" * 20) == {
        "N8N_INSTANCE_AI_SANDBOX_ENABLED": "true",
        "N8N_INSTANCE_AI_SANDBOX_PROVIDER": "n8n-sandbox",
        "N8N_SANDBOX_SERVICE_URL": "http://127.0.0.1:9",
        "N8N_SANDBOX_SERVICE_API_KEY": "k" * 20,
    }
    assert "N8N_SANDBOX_SERVICE_API_KEY" not in lane_env("http://127.0.0.1:9")
    # the names are the ones n8n reads (its config dist), not guesses
    config = (TC.n8n_prefix / "node_modules/@n8n/config/dist/configs/instance-ai.config.js").read_text()
    for name in lane_env("http://x", "k" * 20):
        assert f"'{name}'" in config


def test_template_matches_what_n8n_writes(template: SandboxTemplate) -> None:
    from orchestrator.sandbox.template import workspace_package_json

    written = workspace_package_json(TC)  # evaluated from the installed n8n's own dist
    assert written == template.package_json()
    dependencies, dev_dependencies = written["dependencies"], written["devDependencies"]
    assert isinstance(dependencies, dict) and isinstance(dev_dependencies, dict)
    deps: dict[str, str] = {**dependencies, **dev_dependencies}
    assert {"tsx", "typescript", "@n8n/workflow-sdk", "@types/node"} <= set(deps)
    for name in deps:
        assert (template.node_modules / name / "package.json").exists()
    sdk = json.loads((template.node_modules / "@n8n/workflow-sdk/package.json").read_text())
    assert sdk["version"] == deps["@n8n/workflow-sdk"]
    assert ensure_template(TC).root == template.root  # idempotent: the marker short-cuts it


async def test_follow_after_a_dropped_stream_and_delete_of_a_running_execution(service: SandboxService) -> None:
    """The client's recovery path: POST stream drops → ``GET ?after=<last seq>&follow=true``; abort → DELETE."""
    marker = str(random.randrange(100_000, 999_999))
    async with httpx.AsyncClient(base_url=service.url, headers={"X-Api-Key": service.api_key}, timeout=30) as http:
        sid = (await http.post("/sandboxes", json={})).json()["id"]
        body = {"command": "echo a; sleep 1; echo b", "exec_id": "follow-me"}
        async with http.stream("POST", f"/sandboxes/{sid}/executions", json=body) as resp:
            async for line in resp.aiter_lines():
                first = json.loads(line)
                break  # the connection drops after the first event
        assert first["type"] == "started"
        rest = await http.get(f"/sandboxes/{sid}/executions/follow-me", params={"after": first["seq"], "follow": "true"})
        events = [json.loads(x) for x in rest.text.splitlines()]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert "".join(e.get("data", "") for e in events) == "a\nb\n" and events[-1]["exit_code"] == 0

        body = {"command": f"sleep {marker} & sleep {marker}1; wait", "exec_id": "kill-me"}
        async with http.stream("POST", f"/sandboxes/{sid}/executions", json=body) as resp:
            async for _line in resp.aiter_lines():
                break
        await eventually_async(lambda: len(procs_with(marker)) >= 2, interval=0.1, what="both sleeps running")
        async with http.stream("GET", f"/sandboxes/{sid}/executions/kill-me", params={"follow": "true"}) as killed:
            # following (its answer has begun) before the kill, which forgets the execution
            assert (await http.delete(f"/sandboxes/{sid}/executions/kill-me")).status_code == 204
            exit_event = [json.loads(x) async for x in killed.aiter_lines() if x][-1]
        assert exit_event["type"] == "exit" and exit_event["killed"] is True and exit_event["success"] is False
        assert await wait_no_procs(marker) == []


async def test_a_sandbox_known_only_from_the_ledger_is_stopped(tmp_path: Path) -> None:
    """After an orchestrator crash a fresh backend stops the lane's sandbox from its ledger entry."""
    from orchestrator.ledger import Ledger
    from orchestrator.sandbox.lanes import LaneSandboxes

    ledger = Ledger.for_run("test-ledger-stop", tmp_path)
    first = LaneSandboxes.from_options({"sandbox": True}, ledger, TC, tmp_path / "sandboxes")
    assert first is not None and LaneSandboxes.from_options({}, ledger, TC, tmp_path) is None
    env = await first.start("p0-1", {})
    assert env["N8N_SANDBOX_SERVICE_URL"].startswith("http://127.0.0.1:")
    [entry] = ledger.open_entries("sandbox")
    pid, root = int(entry.meta["pid"]), Path(str(entry.meta["root"]))
    marker = str(random.randrange(100_000, 999_999))
    svc = first.services["p0-1"]
    try:
        await _start_running(svc, marker)
        await LaneSandboxes(ledger, TC, tmp_path / "sandboxes").stop("p0-1")  # knows nothing in memory
        assert svc.proc is not None and svc.proc.pid == pid
        # gone: no live member was left when stop returned; the exit itself may still be settling
        # in the kernel under load, so reaping it here may take a moment (never more than that)
        assert await asyncio.to_thread(svc.proc.wait, 10) is not None
        assert await wait_no_procs(marker) == [] and not root.exists()
        assert ledger.open_entries("sandbox") == []
    finally:
        await svc.stop()


async def test_stop_is_prompt_while_a_stream_is_open(tmp_path: Path, template: SandboxTemplate) -> None:
    svc = SandboxService(tmp_path / "sb", TC, template=template)
    await svc.start()
    marker = str(random.randrange(100_000, 999_999))
    async with httpx.AsyncClient(base_url=svc.url, headers={"X-Api-Key": svc.api_key}, timeout=60) as http:
        sid = (await http.post("/sandboxes", json={})).json()["id"]
        follower = asyncio.create_task(http.post(f"/sandboxes/{sid}/executions", json={"command": f"sleep {marker}"}))
        await eventually_async(lambda: procs_with(marker), interval=0.1, what="the followed sleep running")
        await svc.stop()
        follower.cancel()
    # uvicorn re-raises the SIGTERM after its graceful shutdown: -15, not the SIGKILL fallback (>= 10 s),
    # so the open stream did not hold the stop up
    assert svc.proc is not None and svc.proc.returncode == -signal.SIGTERM
    assert procs_with(marker) == [] and not svc.root.exists()


async def test_sweep_after_a_crash_removes_service_jails_cgroups_and_folders(tmp_path: Path) -> None:
    """Orchestrator and service both SIGKILLed: ``ProcessBackend.sweep`` finds the rest by label and ledger."""
    from orchestrator.lanes.process.backend import RUN_LABEL, ProcessBackend, labelled_processes
    from orchestrator.ledger import Ledger
    from orchestrator.sandbox.lanes import LaneSandboxes

    run_id = f"test-sweep-{random.randrange(1 << 20)}"
    ledger = Ledger.for_run(run_id, tmp_path)
    backend = ProcessBackend(run_id, ledger, tmp_path, sandbox=True)
    sandboxes = LaneSandboxes.from_options({"sandbox": True}, ledger, TC, backend.sandboxes_dir())
    assert sandboxes is not None
    await sandboxes.start("p0-1", {RUN_LABEL: run_id})
    svc = sandboxes.services["p0-1"]
    marker = str(random.randrange(100_000, 999_999))
    await _start_running(svc, marker)
    assert svc.pid in labelled_processes(run_id)
    os.kill(svc.pid, signal.SIGKILL)
    assert svc.proc is not None
    svc.proc.wait()
    assert await wait_no_procs(marker) == []  # the jails died with it (--die-with-parent)
    cgroups = list(Path("/sys/fs/cgroup/memory").rglob(f"{svc.cgroup_prefix}*"))
    assert cgroups and svc.root.exists()  # what a SIGKILL leaves behind
    try:
        removed = await backend.sweep(run_id)
    finally:
        await backend.close()
    assert "sandbox p0-1" in removed
    assert not list(Path("/sys/fs/cgroup/memory").rglob(f"{svc.cgroup_prefix}*"))
    assert not svc.root.exists() and list(backend.sandboxes_dir().iterdir()) == []
    assert ledger.open_entries("sandbox") == [] and labelled_processes(run_id) == []
