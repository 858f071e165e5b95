"""The n8n-sandbox HTTP protocol, as ``@n8n/sandbox-client`` 0.1.1 (inside n8n 2.41.1) calls it.

Endpoints (all under ``/sandboxes``, JSON unless said otherwise; errors are ``{"error": msg}``):

- ``POST /sandboxes {id?, ephemeral?}`` → ``{id, status, created_at, last_active_at, ephemeral}``
  (epoch seconds); an existing ``id`` is a reconnect and answers the same record.
- ``GET|DELETE /sandboxes/:id`` (delete kills every process, removes the workspace, 204).
- ``POST /sandboxes/:id/executions {command, env?, workdir?, timeout_ms?, exec_id?}`` → NDJSON lines
  ``{seq, type: started, exec_id}``, ``{seq, type: stdout|stderr, data}``, ``{seq, type: exit,
  exit_code, success, execution_time_ms, timed_out, killed}``; re-posting a known ``exec_id``
  attaches to it instead of running the command again.
- ``GET /sandboxes/:id/executions/:eid?after=N&follow=true`` replays events with ``seq > N``
  (and follows until exit); ``DELETE`` kills the execution's tree and forgets it.
- Files: ``GET /files?path&recursive&extension`` → ``[{name, size, is_dir, type, mod_time}]``;
  ``GET /files/content?path`` → bytes; ``PUT /files?path&overwrite`` (octet-stream body) writes;
  ``POST /files?path`` appends; ``DELETE /files?path&recursive&force``; ``POST /files/copy
  {src, dest, recursive, overwrite}``; ``POST /files/move {src, dest, overwrite}``;
  ``POST /mkdir?path&recursive``; ``GET /stat?path`` → ``{name, path, type, size, created_at,
  modified_at}``.
  (:mod:`orchestrator.sandbox.files` carries these out on resolved paths.)
- Auth: header ``X-Api-Key`` when the service has a key (401 otherwise). ``GET /healthz`` is open.

Paths are sandbox paths: ``/home/user/…`` and ``/tmp/…`` map into the sandbox's folder on the host;
anything else, or anything resolving (through symlinks) outside it, is refused with 400.
"""

from __future__ import annotations

import asyncio
import codecs
import hmac
import json
import os
import posixpath
import shutil
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator.sandbox.files import (
    HttpError,
    Resolved,
    copy_path,
    delete_path,
    list_files,
    make_dir,
    move_path,
    stat_path,
    write_file,
)
from orchestrator.sandbox.isolation import (
    SANDBOX_BIN,
    SANDBOX_HOME,
    SANDBOX_TMP,
    SANDBOX_WORKSPACE,
    Limits,
    Mount,
    SandboxCgroup,
    bwrap_argv,
    launch_argv,
)
from orchestrator.sandbox.template import COPIED_ENTRIES, SandboxTemplate

API_KEY_HEADER = "x-api-key"
NODE_MODULES = f"{SANDBOX_WORKSPACE}/node_modules"


def _flag(request: Request, name: str, default: bool = False) -> bool:
    value = request.query_params.get(name)
    if value is None:
        return default
    return value.lower() in ("1", "true", "yes")


@dataclass
class Execution:
    exec_id: str
    command: str
    events: list[dict[str, Any]] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    proc: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    killed: bool = False
    timed_out: bool = False
    output_bytes: int = 0

    @property
    def done(self) -> bool:
        """Whether the command ended (its last event is ``exit`` or ``error``)."""
        return bool(self.events) and self.events[-1]["type"] in ("exit", "error")

    async def emit(self, event: dict[str, Any]) -> None:
        """Append ``event`` (numbered) and wake every stream waiting on the execution."""
        event["seq"] = len(self.events)
        self.events.append(event)
        async with self.changed:
            self.changed.notify_all()

    def kill_tree(self) -> None:
        """SIGKILL the outer bwrap's session: its pid namespace (every descendant) dies with it."""
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class Sandbox:
    id: str
    folder: Path
    ephemeral: bool
    cgroup: SandboxCgroup
    created_at: float = field(default_factory=time.time)
    last_active_at: float = field(default_factory=time.time)
    executions: dict[str, Execution] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.folder / "home"

    @property
    def tmp(self) -> Path:
        return self.folder / "tmp"

    def record(self) -> dict[str, Any]:
        """The sandbox as the API describes it."""
        return {
            "id": self.id, "status": "running", "created_at": int(self.created_at),
            "last_active_at": int(self.last_active_at), "ephemeral": self.ephemeral,
        }


class SandboxServer:
    """State of one service: its sandboxes, their executions, and the resources behind them."""

    def __init__(
        self,
        root: Path,
        *,
        template: SandboxTemplate | None,
        node_home: Path | None,
        api_key: str | None = None,
        limits: Limits = Limits(),
        name_prefix: str = "n8n-sandbox-",
    ) -> None:
        self.root = root
        self.template = template
        self.node_home = node_home
        self.api_key = api_key or None
        self.limits = limits
        self.name_prefix = name_prefix
        self.sandboxes: dict[str, Sandbox] = {}
        self._lock = asyncio.Lock()
        self._template_entries = template.mounted_entries() if template else []

    # ---- paths ---------------------------------------------------------------------------
    def resolve(self, sb: Sandbox, path: str | None, *, for_write: bool = False) -> Resolved:
        """The host path of sandbox path ``path`` (relative to the home folder): inside the home or tmp
        folder, or read-only in the shared npm template. Raises :class:`HttpError` 400 for a path outside
        the sandbox, or one a planted symlink leads out of it."""
        if not path:
            raise HttpError(400, "path is required")
        if not path.startswith("/"):
            path = posixpath.join(SANDBOX_HOME, path)
        norm = posixpath.normpath(path)
        if norm.startswith("//"):
            norm = norm[1:]
        read_only = False
        if norm == NODE_MODULES or norm.startswith(NODE_MODULES + "/"):
            rest = norm[len(NODE_MODULES) + 1:]
            entry = rest.split("/", 1)[0]
            if entry and entry in self._template_entries and self.template is not None:
                host = self.template.node_modules / rest
                self._contained(host, [self.template.node_modules], norm)
                return Resolved(host, norm, True)
        if norm == SANDBOX_HOME or norm.startswith(SANDBOX_HOME + "/"):
            host = sb.home / norm[len(SANDBOX_HOME) + 1:]
            base = sb.home
        elif norm == SANDBOX_TMP or norm.startswith(SANDBOX_TMP + "/"):
            host = sb.tmp / norm[len(SANDBOX_TMP) + 1:]
            base = sb.tmp
        else:
            raise HttpError(400, f"path {norm} is outside the sandbox (use {SANDBOX_HOME} or {SANDBOX_TMP})")
        self._contained(host, [base], norm)
        return Resolved(host, norm, read_only)

    @staticmethod
    def _contained(host: Path, bases: list[Path], shown: str) -> None:
        # Resolve symlinks the sandbox may have planted: the host path must stay in the sandbox.
        real = Path(os.path.realpath(host))
        if not any(real == Path(os.path.realpath(b)) or Path(os.path.realpath(b)) in real.parents for b in bases):
            raise HttpError(400, f"path {shown} resolves outside the sandbox")

    def mounts(self, sb: Sandbox) -> list[Mount]:
        """What a sandbox's commands see: Node and the template's binaries read-only, its home and tmp
        writable, and the template's packages linked into its workspace."""
        mounts: list[Mount] = []
        if self.node_home is not None:
            mounts.append(Mount(self.node_home, str(self.node_home)))
        if self.template is not None:
            mounts.append(Mount(self.template.bin_dir, SANDBOX_BIN))
        mounts += [Mount(sb.home, SANDBOX_HOME, writable=True), Mount(sb.tmp, SANDBOX_TMP, writable=True)]
        if self.template is not None:
            for entry in self._template_entries:
                target = sb.home / "workspace" / "node_modules" / entry
                if target.exists() and not target.is_symlink():
                    mounts.append(Mount(self.template.node_modules / entry, f"{NODE_MODULES}/{entry}"))
        return mounts

    def base_env(self) -> dict[str, str]:
        """The environment every command starts with: the sandbox's PATH, home and tmp, npm offline."""
        path = [SANDBOX_BIN] if self.template is not None else []
        if self.node_home is not None:
            path.append(str(self.node_home / "bin"))
        path += ["/usr/local/bin", "/usr/bin", "/bin"]
        return {
            "PATH": ":".join(path), "HOME": SANDBOX_HOME, "USER": "user", "LANG": "C.UTF-8", "TMPDIR": SANDBOX_TMP,
            "npm_config_offline": "true", "npm_config_update_notifier": "false", "npm_config_fund": "false",
            "npm_config_audit": "false", "NODE_OPTIONS": "--max-old-space-size=1536",
        }

    # ---- sandboxes -----------------------------------------------------------------------
    def _prepare_workspace(self, sb: Sandbox) -> None:
        ws = sb.home / "workspace"
        ws.mkdir(parents=True, exist_ok=True)
        sb.tmp.mkdir(parents=True, exist_ok=True)
        if self.template is None:
            return
        nm = ws / "node_modules"
        nm.mkdir(exist_ok=True)
        for entry in self._template_entries:
            src = self.template.node_modules / entry
            target = nm / entry
            if src.is_dir() and not src.is_symlink():
                target.mkdir(exist_ok=True)
            elif not target.exists():
                target.touch()
        for entry in COPIED_ENTRIES:
            src = self.template.node_modules / entry
            if src.is_dir():
                shutil.copytree(src, nm / entry, symlinks=True, dirs_exist_ok=True)
            elif src.exists():
                shutil.copy2(src, nm / entry)

    async def create(self, sandbox_id: str | None, ephemeral: bool) -> tuple[Sandbox, bool]:
        """The sandbox ``sandbox_id``, created (under that id, or a new uuid when None) if unknown, and
        whether it was created now. Raises :class:`HttpError` 400 for an id that is not a plain name."""
        async with self._lock:
            if sandbox_id and sandbox_id in self.sandboxes:
                sb = self.sandboxes[sandbox_id]
                sb.last_active_at = time.time()
                return sb, False
            sid = sandbox_id or str(uuid.uuid4())
            if "/" in sid or sid in (".", "..") or len(sid) > 200:
                raise HttpError(400, "invalid sandbox id")
            folder = self.root / sid
            cgroup = SandboxCgroup(f"{self.name_prefix}{uuid.uuid4().hex[:12]}", self.limits)
            sb = Sandbox(sid, folder, ephemeral, cgroup)
            try:
                await asyncio.to_thread(self._prepare_workspace, sb)
            except OSError as exc:
                cgroup.remove()
                shutil.rmtree(folder, ignore_errors=True)
                raise HttpError(500, f"could not prepare the workspace: {exc}") from exc
            self.sandboxes[sid] = sb
            return sb, True

    def get(self, sandbox_id: str) -> Sandbox:
        """The sandbox ``sandbox_id``, marked active now. Raises :class:`HttpError` 404 when unknown."""
        sb = self.sandboxes.get(sandbox_id)
        if sb is None:
            raise HttpError(404, "sandbox not found")
        sb.last_active_at = time.time()
        return sb

    async def delete(self, sandbox_id: str) -> None:
        """Remove the sandbox, its processes and its folder. Raises :class:`HttpError` 404 when unknown."""
        async with self._lock:
            sb = self.sandboxes.pop(sandbox_id, None)
        if sb is None:
            raise HttpError(404, "sandbox not found")
        await self._destroy(sb)

    async def _destroy(self, sb: Sandbox) -> None:
        for ex in list(sb.executions.values()):
            ex.killed = ex.killed or not ex.done
            ex.kill_tree()
        await asyncio.to_thread(sb.cgroup.kill_all)
        for ex in list(sb.executions.values()):
            if ex.task is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(ex.task), 5)
                except (TimeoutError, asyncio.CancelledError):
                    ex.task.cancel()
        await asyncio.to_thread(sb.cgroup.remove)
        await asyncio.to_thread(shutil.rmtree, sb.folder, True)

    async def shutdown(self) -> None:
        """Remove every sandbox (the service is stopping)."""
        async with self._lock:
            sandboxes = list(self.sandboxes.values())
            self.sandboxes.clear()
        await asyncio.gather(*(self._destroy(sb) for sb in sandboxes))

    # ---- executions ----------------------------------------------------------------------
    async def start_execution(self, sb: Sandbox, body: dict[str, Any]) -> Execution:
        """Start ``body["command"]`` in the sandbox (its env, workdir and timeout capped by the limits);
        an ``exec_id`` already known returns that execution. Raises :class:`HttpError` 400 for a bad body."""
        command = body.get("command")
        if not isinstance(command, str) or not command:
            raise HttpError(400, "command is required")
        exec_id = body.get("exec_id") or str(uuid.uuid4())
        if not isinstance(exec_id, str):
            raise HttpError(400, "exec_id must be a string")
        existing = sb.executions.get(exec_id)
        if existing is not None:
            return existing
        env = self.base_env()
        for key, value in (body.get("env") or {}).items():
            if isinstance(value, str) and key and "=" not in key and "\0" not in key + value:
                env[key] = value
        workdir = body.get("workdir") or SANDBOX_HOME
        if not isinstance(workdir, str) or not workdir.startswith("/"):
            workdir = posixpath.join(SANDBOX_HOME, str(workdir))
        timeout_ms = body.get("timeout_ms") or self.limits.default_timeout_ms
        if not isinstance(timeout_ms, (int, float)) or timeout_ms <= 0:
            raise HttpError(400, "timeout_ms must be a positive number")
        timeout_ms = min(float(timeout_ms), float(self.limits.max_timeout_ms))
        ex = Execution(exec_id, command)
        sb.executions[exec_id] = ex
        await ex.emit({"type": "started", "exec_id": exec_id})
        argv = launch_argv(
            bwrap_argv(mounts=self.mounts(sb), env=env, workdir=workdir, command=command), self.limits,
            sb.cgroup.paths,
        )
        ex.task = asyncio.create_task(self._run(sb, ex, argv, timeout_ms / 1000.0))
        return ex

    async def _run(self, sb: Sandbox, ex: Execution, argv: list[str], timeout_s: float) -> None:
        started = time.monotonic()
        try:
            ex.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
        except OSError as exc:
            await ex.emit({"type": "error", "error": f"could not start the command: {exc}"})
            return
        if ex.killed:
            ex.kill_tree()
        assert ex.proc.stdout is not None and ex.proc.stderr is not None
        readers = [
            asyncio.create_task(self._pump(ex, ex.proc.stdout, "stdout")),
            asyncio.create_task(self._pump(ex, ex.proc.stderr, "stderr")),
        ]
        try:
            await asyncio.wait_for(ex.proc.wait(), timeout_s)
        except TimeoutError:
            ex.timed_out = True
            ex.kill_tree()
            await ex.proc.wait()
        finally:
            if ex.proc.returncode is None:
                ex.kill_tree()
        # Pipes close once every process holding them is gone (the namespace dies with bwrap).
        done, pending = await asyncio.wait(readers, timeout=5)
        for task in pending:
            task.cancel()
        code = ex.proc.returncode if ex.proc.returncode is not None else -signal.SIGKILL
        exit_code = code if code >= 0 else 128 - code
        await ex.emit({
            "type": "exit", "exit_code": exit_code,
            "success": exit_code == 0 and not ex.timed_out and not ex.killed,
            "execution_time_ms": int((time.monotonic() - started) * 1000),
            "timed_out": ex.timed_out, "killed": ex.killed,
        })
        sb.last_active_at = time.time()

    async def _pump(self, ex: Execution, stream: asyncio.StreamReader, kind: str) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            chunk = await stream.read(65536)
            text = decoder.decode(chunk, final=not chunk)
            if text:
                if ex.output_bytes < self.limits.max_output_bytes:
                    ex.output_bytes += len(text)
                    await ex.emit({"type": kind, "data": text})
                    if ex.output_bytes >= self.limits.max_output_bytes:
                        note = f"\n[sandbox: output beyond {self.limits.max_output_bytes} bytes dropped]\n"
                        await ex.emit({"type": "stderr", "data": note})
            if not chunk:
                return

    async def stream(self, ex: Execution, after: int, follow: bool) -> AsyncIterator[bytes]:
        """The execution's events after ``after`` as JSON lines; with ``follow``, waits for more until it
        ends."""
        index = after + 1
        while True:
            while index < len(ex.events):
                yield (json.dumps(ex.events[index]) + "\n").encode()
                index += 1
            if ex.done or not follow:
                return
            async with ex.changed:
                if index >= len(ex.events):
                    await ex.changed.wait()

    async def delete_execution(self, sb: Sandbox, exec_id: str) -> None:
        """Forget an execution, killing its process tree first if it still runs. Raises :class:`HttpError`
        404 when unknown."""
        ex = sb.executions.get(exec_id)
        if ex is None:
            raise HttpError(404, "execution not found")
        if not ex.done:
            ex.killed = True
            ex.kill_tree()
            if ex.task is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(ex.task), 10)
                except TimeoutError:
                    pass
        sb.executions.pop(exec_id, None)


# ---- file operations (blocking, run in threads) ------------------------------------------------
def build_app(server: SandboxServer) -> Starlette:
    """The sandbox service's HTTP API over ``server``: every route checks the API key when one is set,
    and an :class:`HttpError` becomes its status with a JSON error."""
    def err(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def wrapper(request: Request) -> Response:
            if server.api_key is not None:
                given = request.headers.get(API_KEY_HEADER, "")
                if not hmac.compare_digest(given.encode(), server.api_key.encode()):
                    return err(401, "unauthorized")
            try:
                return await handler(request)
            except HttpError as exc:
                return err(exc.status, exc.message)
            except json.JSONDecodeError:
                return err(400, "invalid JSON body")
            except PermissionError as exc:
                return err(403, f"permission denied: {exc.strerror}")
            except OSError as exc:
                return err(500, f"{exc.strerror or exc}")

        return wrapper

    async def json_body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise HttpError(400, "body must be a JSON object")
        return body

    def sb_of(request: Request) -> Sandbox:
        return server.get(request.path_params["sid"])

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "sandboxes": len(server.sandboxes)})

    async def create(request: Request) -> Response:
        body = await json_body(request)
        sid = body.get("id")
        if sid is not None and not isinstance(sid, str):
            raise HttpError(400, "id must be a string")
        sb, new = await server.create(sid, bool(body.get("ephemeral")))
        return JSONResponse(sb.record(), status_code=201 if new else 200)

    async def get_sandbox(request: Request) -> Response:
        return JSONResponse(sb_of(request).record())

    async def delete_sandbox(request: Request) -> Response:
        await server.delete(request.path_params["sid"])
        return Response(status_code=204)

    def ndjson(ex: Execution, after: int, follow: bool) -> StreamingResponse:
        return StreamingResponse(server.stream(ex, after, follow), media_type="application/x-ndjson")

    async def post_execution(request: Request) -> Response:
        sb = sb_of(request)
        ex = await server.start_execution(sb, await json_body(request))
        return ndjson(ex, -1, True)

    async def get_execution(request: Request) -> Response:
        sb = sb_of(request)
        ex = sb.executions.get(request.path_params["eid"])
        if ex is None:
            raise HttpError(404, "execution not found")
        try:
            after = int(request.query_params.get("after", "-1"))
        except ValueError as exc:
            raise HttpError(400, "after must be an integer") from exc
        return ndjson(ex, after, _flag(request, "follow", False))

    async def delete_execution(request: Request) -> Response:
        await server.delete_execution(sb_of(request), request.path_params["eid"])
        return Response(status_code=204)

    def resolve(request: Request, key: str = "path", value: str | None = None) -> Resolved:
        return server.resolve(sb_of(request), value if value is not None else request.query_params.get(key))

    async def files_get(request: Request) -> Response:
        sb = sb_of(request)
        r = server.resolve(sb, request.query_params.get("path") or SANDBOX_HOME)
        entries = await asyncio.to_thread(
            list_files, r.host, _flag(request, "recursive"), request.query_params.get("extension")
        )
        return JSONResponse(entries)

    async def files_put(request: Request) -> Response:
        r = resolve(request)
        data = await request.body()
        await asyncio.to_thread(write_file, r, data, _flag(request, "overwrite", True), False)
        return Response(status_code=204)

    async def files_append(request: Request) -> Response:
        r = resolve(request)
        data = await request.body()
        await asyncio.to_thread(write_file, r, data, True, True)
        return Response(status_code=204)

    async def files_delete(request: Request) -> Response:
        r = resolve(request)
        await asyncio.to_thread(delete_path, r, _flag(request, "recursive"), _flag(request, "force"))
        return Response(status_code=204)

    async def content(request: Request) -> Response:
        r = resolve(request)
        if not r.host.exists():
            raise HttpError(404, "file not found")
        if r.host.is_dir():
            raise HttpError(400, "path is a directory")
        data = await asyncio.to_thread(r.host.read_bytes)
        return Response(data, media_type="application/octet-stream")

    async def copy(request: Request) -> Response:
        body = await json_body(request)
        src, dest = resolve(request, value=body.get("src")), resolve(request, value=body.get("dest"))
        await asyncio.to_thread(copy_path, src, dest, bool(body.get("recursive")), bool(body.get("overwrite")))
        return Response(status_code=204)

    async def move(request: Request) -> Response:
        body = await json_body(request)
        src, dest = resolve(request, value=body.get("src")), resolve(request, value=body.get("dest"))
        await asyncio.to_thread(move_path, src, dest, bool(body.get("overwrite")))
        return Response(status_code=204)

    async def mkdir(request: Request) -> Response:
        r = resolve(request)
        await asyncio.to_thread(make_dir, r, _flag(request, "recursive"))
        return Response(status_code=204)

    async def stat(request: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(stat_path, resolve(request)))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await server.shutdown()

    s = "/sandboxes/{sid}"
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/sandboxes", guarded(create), methods=["POST"]),
        Route(s, guarded(get_sandbox), methods=["GET"]),
        Route(s, guarded(delete_sandbox), methods=["DELETE"]),
        Route(f"{s}/executions", guarded(post_execution), methods=["POST"]),
        Route(f"{s}/executions/{{eid}}", guarded(get_execution), methods=["GET"]),
        Route(f"{s}/executions/{{eid}}", guarded(delete_execution), methods=["DELETE"]),
        Route(f"{s}/files", guarded(files_get), methods=["GET"]),
        Route(f"{s}/files", guarded(files_put), methods=["PUT"]),
        Route(f"{s}/files", guarded(files_append), methods=["POST"]),
        Route(f"{s}/files", guarded(files_delete), methods=["DELETE"]),
        Route(f"{s}/files/content", guarded(content), methods=["GET"]),
        Route(f"{s}/files/copy", guarded(copy), methods=["POST"]),
        Route(f"{s}/files/move", guarded(move), methods=["POST"]),
        Route(f"{s}/mkdir", guarded(mkdir), methods=["POST"]),
        Route(f"{s}/stat", guarded(stat), methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
