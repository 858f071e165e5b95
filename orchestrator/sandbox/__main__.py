"""``python -m orchestrator.sandbox serve|template``: the sandbox service as a process (or container entrypoint).

``serve`` binds 127.0.0.1 only: beside a process lane, in a docker lane on host networking and as a
container of a lane's pod (which shares the pod's network namespace) n8n reaches it on loopback. The API key, when any, is read from the environment variable named by
``--api-key-env`` (default ``N8N_SANDBOX_SERVICE_API_KEY``, the name n8n itself reads), never from
the command line. ``--port-file`` receives the bound port once the socket listens (``--port 0``
picks a free one). With ``--watch-stdin`` the service stops, killing every sandbox, when its stdin
closes: the orchestrator holds that pipe, so the service cannot outlive it even after a SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import sys
import threading
from pathlib import Path

from orchestrator.sandbox.isolation import Limits, bwrap_path, remove_stale_cgroups
from orchestrator.sandbox.template import (
    SandboxTemplate,
    TemplateError,
    ensure_template,
)
from orchestrator.toolchain import Toolchain, default_cache_dir

DEFAULT_KEY_ENV = "N8N_SANDBOX_SERVICE_API_KEY"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m orchestrator.sandbox", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the n8n-sandbox HTTP service")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--root", type=Path, required=True, help="folder holding every sandbox's files")
    s.add_argument("--cache", type=Path, default=None, help="toolchain cache (default: the orchestrator's)")
    s.add_argument("--template", type=Path, default=None, help="prepared template folder (default: prepare/reuse)")
    s.add_argument("--no-template", action="store_true", help="no npm template (node_modules starts empty)")
    s.add_argument("--api-key-env", default=DEFAULT_KEY_ENV)
    s.add_argument("--port-file", type=Path, default=None)
    s.add_argument("--watch-stdin", action="store_true")
    s.add_argument("--cgroup-prefix", default=None,
                   help="name prefix of this service's cgroups (default: n8n-sandbox-<pid>-)")
    s.add_argument("--memory-mb", type=int, default=Limits.memory_bytes // 1024**2)
    s.add_argument("--cpu-seconds", type=int, default=Limits.cpu_seconds)
    s.add_argument("--max-tasks", type=int, default=Limits.max_tasks)
    s.add_argument("--max-timeout-ms", type=int, default=Limits.max_timeout_ms)
    s.add_argument("--max-output-bytes", type=int, default=Limits.max_output_bytes)
    t = sub.add_parser("template", help="prepare the workspace npm template for the installed n8n")
    t.add_argument("--cache", type=Path, default=None)
    return p


async def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from orchestrator.sandbox.server import SandboxServer, build_app

    tc = Toolchain(args.cache or default_cache_dir())
    template: SandboxTemplate | None = None
    if args.template is not None:
        template = SandboxTemplate(args.template)
        if not template.ready():
            print(f"error: {args.template} is not a prepared sandbox template", file=sys.stderr)
            return 2
    elif not args.no_template:
        template = await asyncio.to_thread(ensure_template, tc)
    root: Path = args.root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    prefix = args.cgroup_prefix or f"n8n-sandbox-{os.getpid()}-"
    limits = Limits(
        memory_bytes=args.memory_mb * 1024**2, cpu_seconds=args.cpu_seconds, max_tasks=args.max_tasks,
        max_timeout_ms=args.max_timeout_ms, max_output_bytes=args.max_output_bytes,
    )
    node_home = tc.node_home if tc.node_bin.exists() else None
    server = SandboxServer(
        root, template=template, node_home=node_home, api_key=os.environ.get(args.api_key_env) or None,
        limits=limits, name_prefix=prefix,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    # open execution streams must not hold up a stop: after 2 s they are cut and every jail is killed
    config = uvicorn.Config(
        build_app(server), log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2,
    )
    uv = uvicorn.Server(config)
    if args.watch_stdin:
        loop = asyncio.get_running_loop()

        def watch() -> None:
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            finally:
                loop.call_soon_threadsafe(setattr, uv, "should_exit", True)

        threading.Thread(target=watch, name="stdin-watch", daemon=True).start()
    if args.port_file is not None:
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(str(sock.getsockname()[1]))
        tmp.rename(args.port_file)
    try:
        await uv.serve(sockets=[sock])
    finally:
        await server.shutdown()
        remove_stale_cgroups(prefix)
        for child in root.iterdir() if root.exists() else []:
            shutil.rmtree(child, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m orchestrator.sandbox``: ``template`` prepares the npm template and prints its folder
    (1 on failure); ``serve`` runs the sandbox service until stopped (1 when it cannot start)."""
    args = _parser().parse_args(argv)
    if args.cmd == "template":
        try:
            tpl = ensure_template(Toolchain(args.cache or default_cache_dir()))
        except TemplateError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(tpl.root)
        return 0
    try:
        bwrap_path()
        return asyncio.run(_serve(args))
    except (TemplateError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
