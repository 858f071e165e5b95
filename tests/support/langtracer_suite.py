"""A stateful LangTracer stand-in on loopback for the push tests: suites, their cases, the export,
case create (``POST /api/v1/cases``) and update (``PATCH /api/v1/cases/:id``). Reads wrap their
body in ``{"data": …}`` as LangTracer does; writes do not. Every request is recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class SuiteStore:
    suites: dict[int, str] = field(default_factory=dict)  # id → slug
    cases: dict[int, dict[str, Any]] = field(default_factory=dict)  # id → {"suiteId", "body"}
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, auth
    url: str = ""

    def add_case(self, suite_id: int, name: str, body: dict[str, Any]) -> int:
        case_id = 100 + len(self.cases)
        self.cases[case_id] = {"suiteId": suite_id, "name": name, "body": body}
        return case_id

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _ in self.requests if m != "GET"]


def _export_body(create: dict[str, Any]) -> dict[str, Any]:
    """What the export gives back for a created case: disk keys, no tags/datasets round-trip."""
    body = {k: v for k, v in create.items() if k not in ("name", "setKind", "synthetic", "suiteId", "evalTags",
                                                        "datasets", "scenarios")}
    body["complexity"] = body.pop("evalComplexity", None)
    if "evalTriggerType" in body:
        body["triggerType"] = body.pop("evalTriggerType")
    return body


@contextmanager
def langtracer_suite() -> Iterator[SuiteStore]:
    store = SuiteStore()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, payload: object, status: int = 200) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> None:
            store.requests.append((self.command, self.path, self.headers.get("Authorization")))

        def do_GET(self) -> None:
            self._record()
            parts = self.path.strip("/").split("/")
            with lock:
                if parts == ["api", "v1", "suites"]:
                    return self._reply({"data": [{"id": i, "slug": s, "name": s.title()} for i, s in store.suites.items()]})
                if len(parts) >= 4 and parts[:3] == ["api", "v1", "suites"] and parts[3].isdigit():
                    suite_id = int(parts[3])
                    members = {cid: c for cid, c in store.cases.items() if c["suiteId"] == suite_id}
                    if len(parts) == 4:
                        return self._reply({"data": {"id": suite_id, "cases": [{"id": cid, "name": c["name"]}
                                                                               for cid, c in members.items()]}})
                    if parts[4:] == ["export"]:
                        files = {f"{c['name']}.json": _export_body(c["body"]) for c in members.values()}
                        return self._reply({"data": {"suite": store.suites[suite_id], "count": len(files), "files": files}})
            self._reply({"error": "not found"}, 404)

        def _json(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_POST(self) -> None:
            self._record()
            body = self._json()
            if self.path != "/api/v1/cases" or "suiteId" not in body:
                return self._reply({"error": "bad request"}, 400)
            with lock:
                case_id = store.add_case(body["suiteId"], body["name"], body)
            self._reply({"case": {"id": case_id, "name": body["name"]}})

        def do_PATCH(self) -> None:
            self._record()
            parts = self.path.strip("/").split("/")
            body = self._json()
            with lock:
                case = store.cases.get(int(parts[-1])) if parts[-1].isdigit() else None
                if case is None or any(k in body for k in ("suiteId", "synthetic")):
                    return self._reply({"error": "bad request"}, 400)
                case["body"] = {**case["body"], **body}
            self._reply({"case": {"id": int(parts[-1]), "name": case["name"]}, "revision": 2})

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    store.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield store
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
