"""Metrics are scrapable on the pod IP: ``--metrics-host`` / ``ORCHESTRATOR_METRICS_HOST``.

A pod is a network namespace with ``lo`` and one interface holding the pod IP; Prometheus scrapes
that IP from another namespace. This test builds exactly that with two network namespaces it
creates (``ip netns add``) joined by a veth pair, addresses from TEST-NET-1 (192.0.2.0/24) that
exist only inside those namespaces: the orchestrator's real ``RunMetrics.serve`` runs in the "pod"
namespace, the scrape comes from the "prometheus" namespace. No traffic leaves this machine's
namespaces. Needs root and iproute2 (skipped otherwise).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.polling import eventually
from support.tools import need

REPO = Path(__file__).resolve().parents[3]
POD_IP, SCRAPER_IP = "192.0.2.10", "192.0.2.20"

SERVE = """
import os, sys, threading
from orchestrator.metrics.prometheus import RunMetrics
m = RunMetrics()
ep = m.serve(int(sys.argv[1]))
print(ep.addr, ep.port, flush=True)
threading.Event().wait(30)  # serves until the test kills it
"""

SCRAPE = """
import sys, urllib.request
try:
    body = urllib.request.urlopen(sys.argv[1], timeout=3).read().decode()
    print("OK" if "n8n_eval" in body else "NO-METRICS")
except Exception as exc:
    print("FAIL", type(exc).__name__)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def netns() -> Iterator[tuple[str, str]]:
    need(os.geteuid() == 0 and shutil.which("ip") is not None, "needs root and iproute2 to create network namespaces")
    tag = uuid.uuid4().hex[:6]
    pod, prom = f"n8neval-pod-{tag}", f"n8neval-prom-{tag}"
    try:
        _ip("netns", "add", pod)
        _ip("netns", "add", prom)
    except subprocess.CalledProcessError as exc:
        need(False, f"cannot create network namespaces here: {exc.stderr!r}")
    try:
        _ip("link", "add", f"veth-p{tag}", "type", "veth", "peer", "name", f"veth-q{tag}")
        _ip("link", "set", f"veth-p{tag}", "netns", pod)
        _ip("link", "set", f"veth-q{tag}", "netns", prom)
        for ns, dev, addr in ((pod, f"veth-p{tag}", POD_IP), (prom, f"veth-q{tag}", SCRAPER_IP)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield pod, prom
    finally:
        for ns in (pod, prom):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def _in_ns(ns: str, code: str, *args: str, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code, *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env={**os.environ, **(env or {})}, **kw)  # type: ignore[call-overload]


def _scrape(prom: str, url: str) -> str:
    proc = _in_ns(prom, SCRAPE, url)
    out, _ = proc.communicate(timeout=20)
    return out.strip()


@pytest.mark.parametrize("host, reachable", [("0.0.0.0", True), ("", False)], ids=["metrics-host-0.0.0.0", "default"])
def test_metrics_are_scraped_on_the_pod_ip_from_another_namespace(netns, host: str, reachable: bool) -> None:
    pod, prom = netns
    env = {"ORCHESTRATOR_METRICS_HOST": host} if host else {"ORCHESTRATOR_METRICS_HOST": ""}
    server = _in_ns(pod, SERVE, "9464", env=env)
    try:
        assert server.stdout is not None
        addr, port = server.stdout.readline().split()
        assert addr == (host or "127.0.0.1")
        url = f"http://{POD_IP}:{port}/metrics"
        if reachable:
            eventually(lambda: _scrape(prom, url) == "OK", timeout=10, interval=0.2, what=f"{url} scraped from the other namespace")
        else:
            assert _scrape(prom, url) == "FAIL URLError"
    finally:
        server.kill()
        server.communicate(timeout=10)
