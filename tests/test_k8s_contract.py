"""Contract test of the ``kubernetes`` lane backend: the exact API calls it makes, in order.

No real Kubernetes API server can run on this machine (no kube-apiserver/k3s/kind/kwok is
installable, and no images can be pulled). So this is a *contract* test, not an integration test:
the real backend drives the real ``kubernetes`` Python client, whose ``Configuration.host`` points
at :class:`RecordingApiServer` — a small HTTP server on 127.0.0.1 written here. It answers just
enough of the Kubernetes REST API (create returns the object, a watch streams a Pending then a Ready
pod event, deletes answer 200 or 404, lists filter by label selector, ``deletecollection`` returns
what it deleted) and records every request (method, path, query, body). The tests assert that
sequence and the bodies; every body the backend sends is also validated against the Kubernetes
OpenAPI schema (kubernetes-validate, strict). What the server does *not* model: admission,
scheduling, RBAC enforcement, real readiness. Those need a cluster (see docs/cluster.md).
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
import pytest
from kubernetes import client

from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import LaneError, get_backend
from orchestrator.lanes.kubernetes_lanes import KubernetesBackend
from orchestrator.lanes.model import LaneSpec
from orchestrator.ledger import Ledger

K8S_VERSION = "1.30"
NS = "evals"
RUN_ID = "20261202-contract"
SECRET_VALUE = "sk-ant-api03-contract-secret-0123456789abcdef"
IN_CLUSTER_ENV = {"POD_NAME": "orchestrator-7d9f", "POD_NAMESPACE": NS, "POD_UID": "11111111-2222-4333-8444-555555555555"}

_COLLECTIONS = {
    "pods": ("", "v1", "Pod"),
    "services": ("", "v1", "Service"),
    "secrets": ("", "v1", "Secret"),
    "networkpolicies": ("networking.k8s.io", "networking.k8s.io/v1", "NetworkPolicy"),
}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None

    @property
    def call(self) -> tuple[str, str, dict[str, str]]:
        return (self.method, self.path, self.query)


@dataclass
class ApiState:
    """What the fake cluster holds, and how pods behave when watched."""

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)  # (resource, ns, name)
    requests: list[Request] = field(default_factory=list)
    #: Status a watched pod reaches: "ready", or a container waiting reason such as "ImagePullBackOff".
    pod_outcome: str = "ready"
    #: (method, resource) -> HTTP status to fail with, e.g. ("POST", "pods"): 403.
    failures: dict[tuple[str, str], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _matches(selector: str, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (p.split("=", 1) for p in selector.split(",") if p))


def _pod_status(outcome: str) -> dict[str, Any]:
    if outcome == "pending":
        return {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    if outcome == "ready":
        return {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "n8n", "ready": True, "restartCount": 0, "image": "x", "imageID": "",
                                       "state": {"running": {}}}]}
    return {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False", "message": "containers not ready"}],
            "containerStatuses": [{"name": "n8n", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
                                   "state": {"waiting": {"reason": outcome, "message": "Back-off pulling image"}}}]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: ApiState  # set per server

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    def _send(self, code: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[str, str, str | None, str | None]:
        """(resource, namespace, name, subresource) from an API path, or ('lane', '', service, rest)."""
        parts = [p for p in urlsplit(self.path).path.split("/") if p]
        if parts[:1] == ["lanes"]:
            return "lane", "", parts[1], "/".join(parts[2:])
        if parts[:2] == ["api", "v1"]:
            parts = parts[2:]
        elif parts[:3] == ["apis", "networking.k8s.io", "v1"]:
            parts = parts[3:]
        else:
            return "?", "", None, None
        # namespaces/<ns>/<resource>[/<name>[/<sub>]]
        ns, resource = parts[1], parts[2]
        name = parts[3] if len(parts) > 3 else None
        sub = parts[4] if len(parts) > 4 else None
        return resource, ns, name, sub

    def _handle(self) -> None:
        st = self.state
        split = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        with st.lock:
            st.requests.append(Request(self.command, split.path, query, body))
        resource, ns, name, sub = self._route()
        if resource == "lane":
            return self._lane(name or "", sub or "")
        if (self.command, resource) in st.failures:
            code = st.failures[(self.command, resource)]
            return self._send(code, _status(code, "Forbidden", f"{resource} is forbidden (scripted)"))
        if resource not in _COLLECTIONS:
            return self._send(404, _status(404, "NotFound", "unknown path"))
        if name is None:
            return self._collection(resource, ns, query, body)
        return self._item(resource, ns, name, sub, query)

    do_GET = do_POST = do_DELETE = _handle  # noqa: N815

    def _collection(self, resource: str, ns: str, query: dict[str, str], body: Any) -> None:
        st = self.state
        _, api_version, kind = _COLLECTIONS[resource]
        if self.command == "POST":
            key = (resource, ns, body["metadata"]["name"])
            with st.lock:
                if key in st.objects:
                    return self._send(409, _status(409, "AlreadyExists", f"{key[2]} already exists"))
                obj = copy.deepcopy(body)
                obj["metadata"].update(uid=str(uuid.uuid4()), resourceVersion="1", creationTimestamp="2026-12-02T00:00:00Z")
                if resource == "pods":
                    obj["status"] = _pod_status("pending")
                st.objects[key] = obj
            return self._send(201, obj)
        with st.lock:
            items = [o for (r, n, _), o in st.objects.items() if r == resource and n == ns]
        if "fieldSelector" in query:
            wanted = query["fieldSelector"].split("=", 1)[1]
            items = [o for o in items if o["metadata"]["name"] == wanted]
        if "labelSelector" in query:
            items = [o for o in items if _matches(query["labelSelector"], o["metadata"].get("labels") or {})]
        if self.command == "DELETE":  # deletecollection
            with st.lock:
                for o in items:
                    st.objects.pop((resource, ns, o["metadata"]["name"]), None)
            return self._send(200, {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {}, "items": items})
        if query.get("watch") == "true":
            return self._watch(resource, ns, items)
        return self._send(200, {"kind": f"{kind}List", "apiVersion": api_version,
                                "metadata": {"resourceVersion": "7"}, "items": items})

    def _watch(self, resource: str, ns: str, items: list[dict[str, Any]]) -> None:
        """A watch: ADDED (pending), then MODIFIED to the scripted outcome; then the stream ends."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(event: dict[str, Any]) -> None:
            line = (json.dumps(event) + "\n").encode()
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")

        for obj in items:
            chunk({"type": "ADDED", "object": obj})
            with self.state.lock:
                obj["status"] = _pod_status(self.state.pod_outcome)
                obj["metadata"]["resourceVersion"] = "2"
            chunk({"type": "MODIFIED", "object": obj})
        self.wfile.write(b"0\r\n\r\n")

    def _item(self, resource: str, ns: str, name: str, sub: str | None, query: dict[str, str]) -> None:
        st = self.state
        key = (resource, ns, name)
        with st.lock:
            obj = st.objects.get(key)
            if obj is not None and self.command == "DELETE":
                st.objects.pop(key)
        if obj is None:
            return self._send(404, _status(404, "NotFound", f'{resource} "{name}" not found'))
        if sub == "log":
            return self._send(200, b"n8n ready on 0.0.0.0, port 5678\nEditor is now accessible\n", "text/plain")
        return self._send(200, obj)

    def _lane(self, service: str, rest: str) -> None:
        with self.state.lock:
            pod = self.state.objects.get(("pods", NS, service))
        ready = pod is not None and pod.get("status", {}).get("phase") == "Running"
        if rest == "healthz/readiness" and ready:
            return self._send(200, {"status": "ok"})
        return self._send(503, {"status": "error"})


class RecordingApiServer:
    """Threaded HTTP server on 127.0.0.1 standing in for the API server (and the lanes' readiness)."""

    def __init__(self) -> None:
        self.state = ApiState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "RecordingApiServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def api_client(self) -> client.ApiClient:
        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    def calls(self) -> list[tuple[str, str, dict[str, str]]]:
        return [r.call for r in self.state.requests]

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.state.requests if r.method == "POST"]


def rbac_of(requests: list[Request]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every API request — what the orchestrator's Role must grant."""
    out: set[tuple[str, str, str]] = set()
    for r in requests:
        parts = [p for p in r.path.split("/") if p]
        if parts[0] == "lanes":
            continue
        group = "" if parts[0] == "api" else parts[1]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        resource, named = rest[2], len(rest) > 3
        if len(rest) > 4:
            resource = f"{resource}/{rest[4]}"
        verb = {
            ("POST", False): "create",
            ("GET", True): "get",
            ("DELETE", True): "delete",
            ("DELETE", False): "deletecollection",
        }.get((r.method, named))
        if verb is None:  # GET on a collection
            verb = "watch" if r.query.get("watch") == "true" else "list"
        out.add((group, resource, verb))
    return out


def lane_spec(secret: bool = True) -> LaneSpec:
    return LaneSpec(
        n8n_version="2.41.1",
        env={"E2E_TESTS": "true", "N8N_ENABLED_MODULES": "instance-ai,agents"},
        secret_env={"ANTHROPIC_API_KEY": SECRET_VALUE} if secret else {},
        image="registry.invalid/n8n-eval-lane:2.41.1",
    )


def make_backend(server: RecordingApiServer, tmp_path: Path, *, environ: dict[str, str] | None = None,
                 run_id: str = RUN_ID, **options: object) -> KubernetesBackend:
    ledger = Ledger.for_run(run_id, tmp_path)
    options.setdefault("namespace", NS)
    options.setdefault("url_template", server.url + "/lanes/{service}")
    return KubernetesBackend(run_id, ledger, tmp_path, api_client=server.api_client(),
                             environ=IN_CLUSTER_ENV if environ is None else environ, **options)


@pytest.fixture
def server() -> Iterator[RecordingApiServer]:
    with RecordingApiServer() as srv:
        yield srv


POD = "n8n-lane-20261202-contract-0-0"
BASE = f"/api/v1/namespaces/{NS}"
NETPOL = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
SWEEP_SELECTOR = ("app.kubernetes.io/name=n8n-eval-lane,app.kubernetes.io/managed-by=n8n-eval-orchestrator,"
                  "n8n-eval/run-id=20261202-contract")


async def run_full_lifecycle(server: RecordingApiServer, tmp_path: Path) -> KubernetesBackend:
    """start → health (watch) → health (read) → logs → teardown → sweep, with a per-run Secret."""
    backend = make_backend(server, tmp_path)
    try:
        lane = await backend.start_lane(0, lane_spec())
        assert await backend.health(lane) is True
        assert await backend.health(lane) is True
        assert "Editor is now accessible" in await backend.logs(lane, 5)
        await backend.teardown(lane)
        await backend.sweep(RUN_ID)
    finally:
        await backend.close()
    return backend


async def test_lifecycle_calls_in_order(server: RecordingApiServer, tmp_path: Path) -> None:
    await run_full_lifecycle(server, tmp_path)
    assert server.calls() == [
        ("POST", f"{BASE}/secrets", {}),
        ("POST", NETPOL, {}),
        ("POST", f"{BASE}/pods", {}),
        ("POST", f"{BASE}/services", {}),
        # first health: watch the pod by name until it is Ready ...
        ("GET", f"{BASE}/pods", {"fieldSelector": f"metadata.name={POD}", "timeoutSeconds": "5", "watch": "true"}),
        # ... then the lane's own readiness endpoint through the lane URL
        ("GET", f"/lanes/{POD}/healthz/readiness", {}),
        # later health checks read the pod (it may have died) and ask readiness again
        ("GET", f"{BASE}/pods/{POD}", {}),
        ("GET", f"/lanes/{POD}/healthz/readiness", {}),
        ("GET", f"{BASE}/pods/{POD}/log", {"container": "n8n", "tailLines": "5"}),
        ("DELETE", f"{BASE}/pods/{POD}", {"gracePeriodSeconds": "5"}),
        ("DELETE", f"{BASE}/services/{POD}", {}),
        # the last lane went: the run's NetworkPolicy and Secret go too
        ("DELETE", f"{NETPOL}/n8n-lanes-20261202-contract", {}),
        ("DELETE", f"{BASE}/secrets/n8n-lanes-20261202-contract-env", {}),
        # sweep by label: list + delete, and deletecollection for secrets (never read a Secret)
        ("GET", f"{BASE}/pods", {"labelSelector": SWEEP_SELECTOR}),
        ("GET", f"{BASE}/services", {"labelSelector": SWEEP_SELECTOR}),
        ("GET", NETPOL, {"labelSelector": SWEEP_SELECTOR}),
        ("DELETE", f"{BASE}/secrets", {"labelSelector": SWEEP_SELECTOR}),
    ]
    assert server.state.objects == {}


async def test_bodies_are_valid_objects_with_labels_owner_and_no_secret_value(server, tmp_path) -> None:
    await run_full_lifecycle(server, tmp_path)
    secret, policy, pod, service = server.bodies()
    assert [b["kind"] for b in (secret, policy, pod, service)] == ["Secret", "NetworkPolicy", "Pod", "Service"]
    for body in (secret, policy, pod, service):
        kubernetes_validate.validate(body, K8S_VERSION, strict=True)
        assert body["metadata"]["namespace"] == NS
        assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "n8n-eval-orchestrator"
        assert body["metadata"]["labels"]["n8n-eval/run-id"] == RUN_ID
        assert body["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": "orchestrator-7d9f", "uid": IN_CLUSTER_ENV["POD_UID"],
             "controller": False}
        ]
    assert secret["stringData"] == {"ANTHROPIC_API_KEY": SECRET_VALUE}
    for body in (policy, pod, service):
        assert SECRET_VALUE not in json.dumps(body)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "n8n-lanes-20261202-contract-env"
    assert pod["metadata"]["labels"]["n8n-eval/lane-index"] == "0"
    assert policy["spec"]["podSelector"]["matchLabels"]["n8n-eval/run-id"] == RUN_ID


async def test_ledger_records_before_create_and_closes_everything(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path)
    lane = await backend.start_lane(0, lane_spec())
    kinds = {(e.kind, e.id) for e in backend.ledger.open_entries()}
    assert kinds == {("secret", "n8n-lanes-20261202-contract-env"), ("networkpolicy", "n8n-lanes-20261202-contract"),
                     ("lane", POD), ("service", POD)}
    (entry,) = backend.ledger.open_entries("lane")
    assert entry.meta["pod"] == POD and entry.meta["namespace"] == NS and entry.meta["base_url"] == lane.base_url
    assert SECRET_VALUE not in backend.ledger.path.read_text()
    await backend.teardown(lane)
    assert backend.ledger.open_entries() == []
    await backend.close()


async def test_out_of_cluster_no_owner_and_existing_secret(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path, environ={}, existing_secret="team-model-keys")
    lane = await backend.start_lane(0, lane_spec())
    await backend.teardown(lane)
    await backend.sweep(RUN_ID)
    await backend.close()
    # no Secret created, deleted or swept: the lanes reference the one named in the options (and
    # the Helm chart then grants no RBAC on secrets at all)
    assert [c[:2] for c in server.calls()] == [
        ("POST", NETPOL), ("POST", f"{BASE}/pods"), ("POST", f"{BASE}/services"),
        ("DELETE", f"{BASE}/pods/{POD}"), ("DELETE", f"{BASE}/services/{POD}"),
        ("DELETE", f"{NETPOL}/n8n-lanes-20261202-contract"),
        ("GET", f"{BASE}/pods"), ("GET", f"{BASE}/services"), ("GET", NETPOL),
    ]
    policy, pod, service = server.bodies()
    for body in (policy, pod, service):
        assert "ownerReferences" not in body["metadata"]
    ref = pod["spec"]["containers"][0]["env"][-1]
    assert ref == {"name": "ANTHROPIC_API_KEY",
                   "valueFrom": {"secretKeyRef": {"name": "team-model-keys", "key": "ANTHROPIC_API_KEY", "optional": False}}}


async def test_run_objects_go_with_the_last_lane_only(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path)
    lanes = [await backend.start_lane(i, lane_spec()) for i in range(2)]
    assert [c[:2] for c in server.calls()].count(("POST", NETPOL)) == 1  # one policy per run
    await backend.teardown(lanes[0])
    assert ("networkpolicies", NS, "n8n-lanes-20261202-contract") in server.state.objects
    await backend.teardown(lanes[1])
    assert server.state.objects == {}
    # a replacement after the pool went empty gets a new name and brings the run objects back
    again = await backend.start_lane(0, lane_spec())
    assert again.lane_id == "n8n-lane-20261202-contract-0-1"
    assert ("networkpolicies", NS, "n8n-lanes-20261202-contract") in server.state.objects
    await backend.teardown(again)
    await backend.close()


async def test_stuck_pod_is_not_healthy_is_gone_and_logs_say_why(server, tmp_path) -> None:
    server.state.pod_outcome = "ImagePullBackOff"
    backend = make_backend(server, tmp_path)
    lane = await backend.start_lane(0, lane_spec())
    assert await backend.health(lane) is False
    assert await backend.is_gone(lane) is True
    text = await backend.logs(lane)
    assert "ImagePullBackOff" in text
    with pytest.raises(LaneError, match="ImagePullBackOff"):
        await backend.wait_ready(lane, 3)
    await backend.teardown(lane)
    await backend.close()


async def test_unreachable_api_is_unhealthy_not_a_crash(tmp_path) -> None:
    with RecordingApiServer() as srv:
        backend = make_backend(srv, tmp_path)
        lane = await backend.start_lane(0, lane_spec())
    # the server is gone now: connection refused on 127.0.0.1
    backend.opts.request_timeout_s = 2
    assert await backend.health(lane) is False
    assert await backend.is_gone(lane) is False
    with pytest.raises(LaneError, match=r"API server http://127\.0\.0\.1:\d+ unreachable"):
        await backend.teardown(lane)
    assert {e.kind for e in backend.ledger.open_entries()} >= {"lane", "service"}  # left for cleanup
    await backend.close()


async def test_teardown_of_a_gone_lane_is_fine(server, tmp_path) -> None:
    backend = make_backend(server, tmp_path)
    lane = await backend.start_lane(0, lane_spec())
    server.state.objects.clear()  # someone deleted everything already
    await backend.teardown(lane)  # 404s = gone = fine
    assert backend.ledger.open_entries() == []
    await backend.close()


async def test_forbidden_pod_create_names_the_object_and_cleans_up(server, tmp_path) -> None:
    server.state.failures[("POST", "pods")] = 403
    backend = make_backend(server, tmp_path)
    with pytest.raises(LaneError, match=f"create Pod {NS}/{POD} failed: HTTP 403 pods is forbidden"):
        await backend.start_lane(0, lane_spec())
    assert backend.ledger.open_entries() == []
    assert server.state.objects == {}
    await backend.close()


async def test_sweep_all_runs_finds_leftovers_of_a_crashed_run(server, tmp_path) -> None:
    crashed = make_backend(server, tmp_path, run_id="crashed-run")
    await crashed.start_lane(0, lane_spec())
    await crashed.start_lane(1, lane_spec())
    # a new process (no memory of the lanes) sweeps every run
    sweeper = make_backend(server, tmp_path, run_id="cleanup")
    removed = await sweeper.sweep(None)
    assert sorted(removed) == sorted([
        f"pod/{NS}/n8n-lane-crashed-run-0-0", f"pod/{NS}/n8n-lane-crashed-run-1-0",
        f"service/{NS}/n8n-lane-crashed-run-0-0", f"service/{NS}/n8n-lane-crashed-run-1-0",
        f"networkpolicy/{NS}/n8n-lanes-crashed-run", f"secret/{NS}/n8n-lanes-crashed-run-env",
    ])
    selector = "app.kubernetes.io/name=n8n-eval-lane,app.kubernetes.io/managed-by=n8n-eval-orchestrator"
    assert ("DELETE", f"{BASE}/secrets", {"labelSelector": selector}) in server.calls()
    assert server.state.objects == {}
    # the crashed run's ledger is closed by the sweep
    assert Ledger.for_run("crashed-run", tmp_path).open_entries() == []
    await crashed.close()
    await sweeper.close()


def test_registered_by_name_and_bad_options_are_named() -> None:
    assert get_backend("kubernetes") is KubernetesBackend
    ledger_dir = Path("/nonexistent-never-written")
    with pytest.raises(ConfigError, match="option 'image_pull_policy'"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(),
                          image_pull_policy="Sometimes")
    with pytest.raises(ConfigError, match="ORCHESTRATOR_K8S_URL_TEMPLATE"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(),
                          url_template="http://{nope}")
    with pytest.raises(ConfigError, match="option 'run_as_user'"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(), run_as_user=0)
    with pytest.raises(ConfigError, match="ORCHESTRATOR_K8S_OWNER_KIND"):
        KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(),
                          environ={"ORCHESTRATOR_K8S_OWNER_KIND": "deployment"})
    # options other backends take (the run passes them to whichever backend it picked) are ignored
    backend = KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(), base_url=None,
                                email="owner@n8n-eval.invalid", password="Pw-0123456789", cache="/tmp/x")
    assert backend.opts.namespace is None
    # env fallbacks: the Helm chart configures the in-cluster orchestrator this way
    backend = KubernetesBackend("r", Ledger(ledger_dir), ledger_dir, api_client=client.ApiClient(), environ={
        "ORCHESTRATOR_K8S_NAMESPACE": "evals", "ORCHESTRATOR_LANE_IMAGE": "reg.invalid/lane:1",
        "ORCHESTRATOR_K8S_RUN_AS_USER": "1001", "ORCHESTRATOR_K8S_LANE_SECRET": "keys"})
    assert (backend.namespace, backend.opts.image, backend.opts.run_as_user, backend.secret_ref) == (
        "evals", "reg.invalid/lane:1", 1001, "keys")
