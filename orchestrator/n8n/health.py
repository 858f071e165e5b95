"""Is a lane ready? One probe for every caller (bring-up, health checks, ``lanes status``, preflight)."""

from __future__ import annotations

import functools
import ssl

import httpx

READINESS_PATH = "/healthz/readiness"


@functools.cache
def shared_tls() -> ssl.SSLContext:
    """One TLS context for every lane client (``httpx.AsyncClient(verify=shared_tls())``). Each new
    client otherwise builds its own, loading the CA bundle: ~85 ms of CPU; bringing 500 lanes up
    (two clients per lane) spent most of its CPU there (measured: ``bench/k8s_lanes.py`` under cProfile)."""
    return httpx.create_ssl_context()


async def readiness_status(http: httpx.AsyncClient, base_url: str, timeout: float | None = None) -> int | str:
    """The status of ``GET <base_url>/healthz/readiness``, or the transport error's text when no
    answer came (never raises for transport errors).

    ``/healthz`` turns 200 while migrations still run; readiness only once REST routes are mounted.
    """
    try:
        resp = await http.get(f"{base_url}{READINESS_PATH}",
                              timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)
    except httpx.HTTPError as exc:
        return str(exc) or type(exc).__name__
    return resp.status_code


async def answers_ready(http: httpx.AsyncClient, base_url: str, timeout: float | None = None) -> bool:
    """True when ``base_url`` answers ``GET /healthz/readiness`` with 200; never raises for transport errors."""
    return await readiness_status(http, base_url, timeout) == 200
