"""A loopback stand-in for the LangSmith REST endpoints the ``langsmith`` SDK (0.15) calls with
``auto_batch_tracing=False``: ``/info``, ``/datasets``, ``/examples``, ``/examples/bulk`` (POST
create, PATCH update), ``/sessions`` (create, list by ``name``/``name_contains``, read, PATCH),
``/runs`` (create), ``/feedback`` and ``/runs/query`` (list runs of a project). Anything else is
answered 404 and recorded in ``unknown``, which the tests assert stays empty.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

API_KEY = "lsv2_pt_testkey_0123456789abcdef"
TENANT = str(uuid.UUID(int=7))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class FakeLangSmith:
    """In-memory LangSmith: just enough state for datasets, examples, experiments, runs, feedback."""

    def __init__(self, *, fail_all: bool = False) -> None:
        self.fail_all = fail_all
        self.datasets: dict[str, dict[str, Any]] = {}
        self.examples: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.feedback: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, bytes, dict[str, str]]] = []
        self.unknown: list[str] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------ helpers for tests
    def calls(self, method: str, path: str) -> int:
        return sum(1 for m, p, _, _ in self.requests if m == method and urlparse(p).path == path)

    def add_session(self, name: str, start: dt.datetime, dataset_id: str | None = None,
                    metadata: dict[str, Any] | None = None) -> str:
        sid = str(uuid.uuid4())
        self.sessions[sid] = {"id": sid, "name": name, "start_time": start.isoformat(), "tenant_id": TENANT,
                              "reference_dataset_id": dataset_id,
                              "extra": {"metadata": metadata} if metadata is not None else {}}
        return sid

    def add_run(self, session_id: str, outputs: dict[str, Any], inputs: dict[str, Any] | None = None) -> None:
        rid = str(uuid.uuid4())
        self.runs[rid] = {"id": rid, "name": "x", "run_type": "chain", "start_time": _now(), "inputs": inputs or {},
                          "outputs": outputs, "session_id": session_id, "trace_id": rid, "parent_run_id": None}

    def add_n8n_experiment(self, name: str, start: dt.datetime, rows: list[tuple[str, str, int, dict[str, Any]]],
                           *, completed: bool = True) -> str:
        """An experiment as n8n's harness records it: one root run per (case, scenario, iteration),
        inputs ``{testCaseFile, scenarioName, _iteration}``, and ``pass_rate_per_iter`` in the
        metadata once the run finished."""
        sid = self.add_session(name, start, metadata={"pass_rate_per_iter": "n/a"} if completed else {})
        for case, scenario, iteration, outputs in rows:
            self.add_run(sid, outputs, {"testCaseFile": case, "scenarioName": scenario, "_iteration": iteration})
        return sid

    # ------------------------------------------------------------ routing
    def handle(self, method: str, raw_path: str, body: bytes) -> tuple[int, Any]:
        if self.fail_all:
            return 500, {"detail": "internal error"}
        url = urlparse(raw_path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        path = url.path.rstrip("/")
        data: Any = json.loads(body) if body else None
        parts = path.strip("/").split("/")
        if method == "GET" and path == "/info":
            return 200, {"version": "0.10.0", "instance_flags": {}}
        if path == "/datasets":
            if method == "GET":
                found = [d for d in self.datasets.values() if "name" not in q or d["name"] == q["name"]]
                return 200, found[: int(q.get("limit", 100))]
            if method == "POST":
                if any(d["name"] == data["name"] for d in self.datasets.values()):
                    return 409, {"detail": "exists"}
                did = str(uuid.uuid4())
                self.datasets[did] = {"id": did, "name": data["name"], "description": data.get("description"),
                                      "data_type": data.get("data_type", "kv"), "created_at": _now()}
                return 200, self.datasets[did]
        if path == "/examples" and method == "GET":
            rows = [e for e in self.examples.values() if e["dataset_id"] == q.get("dataset")]
            off, lim = int(q.get("offset", 0)), int(q.get("limit", 100))
            return 200, rows[off: off + lim]
        if path == "/examples/bulk" and method == "POST":
            out = []
            for ex in data:
                eid = ex.get("id") or str(uuid.uuid4())
                split = ex.get("split")
                meta = dict(ex.get("metadata") or {})
                meta["dataset_split"] = split if isinstance(split, list) else [split or "base"]
                self.examples[eid] = {"id": eid, "dataset_id": ex["dataset_id"], "inputs": ex.get("inputs"),
                                      "outputs": ex.get("outputs"), "metadata": meta, "created_at": _now(),
                                      "modified_at": _now()}
                out.append(self.examples[eid])
            return 200, out
        if path == "/examples/bulk" and method == "PATCH":
            for upd in data:
                ex = self.examples.get(upd["id"])
                if ex is None:
                    return 404, {"detail": "no example"}
                if "inputs" in upd:
                    ex["inputs"] = upd["inputs"]
                meta = dict(upd.get("metadata") or ex["metadata"])
                if "split" in upd:
                    meta["dataset_split"] = upd["split"] if isinstance(upd["split"], list) else [upd["split"]]
                ex["metadata"], ex["modified_at"] = meta, _now()
            return 200, {"message": f"{len(data)} examples updated"}
        if path == "/sessions":
            if method == "POST":
                if any(s["name"] == data["name"] for s in self.sessions.values()):
                    return 409, {"detail": "session exists"}
                sid = data.get("id") or str(uuid.uuid4())
                self.sessions[sid] = {"id": sid, "name": data["name"], "start_time": data.get("start_time") or _now(),
                                      "tenant_id": TENANT, "reference_dataset_id": data.get("reference_dataset_id"),
                                      "extra": data.get("extra") or {}, "description": data.get("description")}
                return 200, self.sessions[sid]
            if method == "GET":
                rows = [s for s in self.sessions.values()
                        if ("name" not in q or s["name"] == q["name"])
                        and ("name_contains" not in q or q["name_contains"] in s["name"])]
                off, lim = int(q.get("offset", 0)), int(q.get("limit", 100))
                return 200, rows[off: off + lim]
        if len(parts) == 2 and parts[0] == "sessions":
            s = self.sessions.get(parts[1])
            if s is None:
                return 404, {"detail": "no session"}
            if method == "GET":
                return 200, s
            if method == "PATCH":
                if data.get("end_time"):
                    s["end_time"] = data["end_time"]
                if data.get("extra") is not None:
                    s["extra"] = data["extra"]
                return 200, s
        if path == "/runs" and method == "POST":
            sid = data.get("session_id") or next(
                (s["id"] for s in self.sessions.values() if s["name"] == data.get("session_name")), None)
            if sid is None:
                return 404, {"detail": "no such project"}
            self.runs[data["id"]] = {**data, "session_id": sid}
            return 200, {}
        if path == "/feedback" and method == "POST":
            if data.get("run_id") not in self.runs:
                return 404, {"detail": "no run"}
            self.feedback.append(data)
            return 200, {**data, "created_at": _now(), "modified_at": _now()}
        if path == "/runs/query" and method == "POST":
            sessions = set(data.get("session") or [])
            rows = [r for r in self.runs.values() if r["session_id"] in sessions
                    and (not data.get("is_root") or not r.get("parent_run_id"))]
            return 200, {"runs": rows, "cursors": {"next": None}}
        self.unknown.append(f"{method} {raw_path}")
        return 404, {"detail": "not found"}


def serve(fake: FakeLangSmith) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            n = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(n) if n else b""
            with fake._lock:
                fake.requests.append((self.command, self.path, body, dict(self.headers)))
                status, payload = fake.handle(self.command, self.path, body)
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


@contextmanager
def running() -> Iterator[tuple[FakeLangSmith, str]]:
    """A fresh stand-in served on loopback for the block: ``(store, url)``."""
    store = FakeLangSmith()
    server, url = serve(store)
    try:
        yield store, url
    finally:
        server.shutdown()
        server.server_close()
