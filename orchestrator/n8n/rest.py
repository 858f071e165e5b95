"""Async REST client for one n8n lane (httpx), and the logged-in user sessions made from it.

Reading an invitations answer is :mod:`.invitations`; the mocked workflow run's request limits and
answer models are :mod:`.mock_execution`.

Endpoints probed on a real n8n 2.41.1 (npm install, Node 24.22.3, sqlite, ``E2E_TESTS=true``,
``N8N_ENABLED_MODULES=instance-ai,agents``) on 2026-12-02. Every JSON answer wraps its payload in
``{"data": …}`` unless noted; errors are described in :mod:`orchestrator.n8n.errors`.

Lane level (no auth):
  GET  /healthz/readiness                 200 {"status":"ok"} once migrations are done (/healthz is 200 earlier)
  POST /rest/e2e/reset                    200 {} body {owner, admin, members: [], chat}: each {email, password,
                                          firstName, lastName}; wipes users, MCP settings and licensed features
  PATCH /rest/e2e/feature                 200 {} body {feature: "feat:folders", enabled}; unknown names are accepted too
  PATCH /rest/e2e/quota                   200 {} body {feature: "quota:maxTeamProjects", value: -1}
  GET  /rest/settings                     200 public subset (8 keys, no version) without a cookie; ~80 keys with one
                                          (versionCli, nodeJsVersion, databaseType, executionMode, activeModules, …)
  POST /rest/login                        200 user + ``Set-Cookie: n8n-auth=<JWT>; HttpOnly; Secure; SameSite=Lax``;
                                          body {emailOrLdapLoginId, password} (``email`` → 400)
  POST /rest/invitations/accept           200 user + member cookie; body {token, firstName, lastName, password};
                                          used token → 400 "This invite has been accepted already",
                                          bad token → 400 "Invalid invite URL"
Logged in (cookie ``n8n-auth``; it is ``Secure``, so it is sent explicitly as a header, and the client's
cookie jar refuses every cookie so sessions never leak into each other):
  GET  /rest/login                        200 the current user {id, email, role: "global:owner"|"global:member", …}
  GET  /rest/module-settings              200 {mcp: {mcpAccessEnabled, mcpManagedByEnv, serverUrl, …},
                                          "instance-ai": {enabled, sandboxEnabled, proxyEnabled, cloudManaged, …},
                                          agents: {enabled, …}, …}
  GET  /rest/instance-ai/settings         200 {enabled, mcpAccessEnabled, sandboxEnabled, modelName,
                                          modelEnvConfigured, envManaged: {model: {provider, apiKey, baseUrl, model}}, …}
  POST /rest/invitations                  200 [{user: {id, email, emailSent: false, role, inviteAcceptUrl:
                                          "<base>/signup?token=<JWT>"}, error: ""}]; body [{email, role}];
                                          re-inviting a pending email returns the same user (safe to repeat);
                                          [] → 200 []; bad email → 400 zod {validation, code, message, path}
  GET  /rest/users                        200 {count, items: [{id, email, role, isPending, …}]}; take/skip page
  DELETE /rest/users/:id[?transferId=P]   200 {success: true}; unknown id → 404; own user → 400; member → 403
  GET  /rest/projects/personal            200 {id, name, type: "personal", creatorId, projectRelations, …}
  PATCH /rest/mcp/settings                200 {mcpAccessEnabled, autoExposeNewWorkflows}; body {mcpAccessEnabled};
                                          needs scope mcp:manage: owner/admin only, a member gets 403
  GET  /rest/mcp/api-key                  200 {apiKey, …} (refused by the MCP server right after enabling)
  POST /rest/mcp/api-key/rotate           200 {apiKey: <JWT>, label: "MCP Server API Key", …}; members may rotate
  POST /rest/credentials                  200 {id, name, type, data: <ciphertext>, …}; body {name, type, data,
                                          projectId?}; unknown type → 400; data is not validated
  GET  /rest/credentials                  200 [{id, name, type, homeProject, …}] (no count)
  DELETE /rest/credentials/:id            200 true; unknown → 404
  POST /rest/workflows                    200 the workflow {id, name, nodes, connections, isArchived: false, …}
  GET  /rest/workflows[?take&skip]        200 {count, data: […]} (not wrapped twice); includes archived ones
  GET  /rest/workflows/:id                200 the workflow; unknown → 404
  POST /rest/workflows/:id/archive        200 the workflow; already archived → 400; unknown → 404
  DELETE /rest/workflows/:id              200 true; not archived → 400 "must be archived"; unknown → 404
  POST /rest/instance-ai/eval/execute-with-llm-mock/:id
                                          200 {executionId, success, nodeResults, errors, hints, mockedCredentials,
                                          rewrittenCredentials}; scope instanceAi:eval = owner/admin (member → 403);
                                          body {scenarioHints? (≤2000 chars), pinNodes? (≤50 names), timeoutMs?
                                          (30000–3600000, else 400)}; unknown workflow → 200 success:false
  GET  /rest/executions/:id               200 {id, status, mode: "evaluation", data: <flatted string>, …};
                                          unknown id → 200 {} (no data key)
Without a cookie every logged-in route answers 401 {"status":"error","message":"Unauthorized"}.
Until ``/healthz/readiness`` is 200 the REST routes are not mounted: ``POST /rest/e2e/reset`` → 404
"Cannot POST /rest/e2e/reset". With ``NODE_ENV=production`` (and only then) n8n applies IP and
per-email rate limits; ``POST /rest/invitations`` then answers the 11th request within 5 minutes
with 429 {"message":"Too many requests"} and ``Retry-After: 299`` (seen).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from http.cookies import SimpleCookie
from types import TracebackType
from typing import Any, TypeVar

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from orchestrator.errors import is_transient
from orchestrator.n8n.errors import (
    N8nError,
    N8nForbidden,
    N8nHTTPError,
    N8nNotFound,
    N8nRateLimited,
    N8nTransportError,
    N8nUnauthorized,
    error_message,
    http_error,
)
from orchestrator.n8n.health import answers_ready, shared_tls
from orchestrator.n8n.invitations import INVITE_BATCH_SIZE, INVITE_RATE_WINDOW_S, Invitation, invitations_from
from orchestrator.n8n.mock_execution import MockExecutionResult, mock_execution_body
from orchestrator.n8n.owner import OwnerCredentials
from orchestrator.redact import register_secret

log = logging.getLogger(__name__)

AUTH_COOKIE = "n8n-auth"

#: ``POST /rest/login`` (production mode only, like every limit here): 5 per minute per
#: ``emailOrLdapLoginId`` and 1000 per IP per 5 minutes. Log in once per user and reuse the
#: session (:meth:`N8nClient.owner_session` caches the owner's).
LOGIN_RATE_LIMIT_PER_EMAIL = 5
LOGIN_RATE_WINDOW_S = 60.0
#: The MCP server (``/mcp-server/http``) is limited the same way to ``N8N_MCP_SERVER_RATE_LIMIT``
#: (default 100) requests per IP per 5 minutes in production mode; 0 turns the limit off.
MCP_RATE_LIMIT_DEFAULT = 100

_PAGE = 100

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retry for safe requests: on transport errors and 5xx answers."""

    attempts: int = 3
    initial_wait_s: float = 0.5
    max_wait_s: float = 4.0


NO_RETRY = RetryPolicy(attempts=1)


def _auth_cookie_from(response: httpx.Response) -> str | None:
    for header in response.headers.get_list("set-cookie"):
        jar = SimpleCookie()
        try:
            jar.load(header)
        except Exception as exc:  # a malformed cookie from another middleware is not ours
            log.debug("ignoring a set-cookie header n8n's auth cookie is not in: %s", exc)
            continue
        if AUTH_COOKIE in jar and jar[AUTH_COOKIE].value:
            return jar[AUTH_COOKIE].value
    return None


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from ``Retry-After`` (express-rate-limit sets it on 429) or ``RateLimit-Reset``."""
    for header in ("retry-after", "ratelimit-reset"):
        value = response.headers.get(header)
        if value and value.strip().isdigit():
            return float(value.strip())
    return None


def wait_retry_after(*, fallback_s: float, cap_s: float) -> Callable[[RetryCallState], float]:
    """A tenacity wait: the ``Retry-After`` the last error carried (else ``fallback_s``), at most ``cap_s``."""

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
        after = getattr(exc, "retry_after_s", None)
        return min(cap_s, after if after else fallback_s)

    return wait


def _retryable(exc: BaseException) -> bool:
    """Safe calls retry what the error type calls transient, except 429 (the caller waits those out)."""
    return is_transient(exc) and not isinstance(exc, N8nRateLimited)


def _payload(method: str, path: str, response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise N8nError(method, path, response.status_code, "answer is not JSON") from None


def _data(method: str, path: str, response: httpx.Response) -> Any:
    body = _payload(method, path, response)
    if isinstance(body, dict) and "data" in body:
        return body["data"]
    return body


@dataclass(frozen=True)
class LaneConfiguration:
    """``/rest/settings``, ``/rest/module-settings`` and ``/rest/instance-ai/settings`` of a lane.
    ``editor`` False: the lane runs without its editor (``N8N_DISABLE_UI``), so it serves neither
    settings route and both are empty."""

    settings: dict[str, Any]
    modules: dict[str, Any]
    instance_ai: dict[str, Any]
    authenticated: bool = True
    editor: bool = True


class N8nClient:
    """One lane's REST API. Safe (idempotent) calls retry on transport errors and 5xx; calls that
    create something are sent once (a request that never connected is always retried)."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 120,
        *,
        retry: RetryPolicy = RetryPolicy(),
        ready_timeout: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry
        self.ready_timeout = ready_timeout
        no_cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
            cookies=no_cookies,
            follow_redirects=False,
            verify=shared_tls(),  # one CA bundle load per process, not per lane client
        )
        self._owner: OwnerCredentials | None = None
        self._owner_session: N8nSession | None = None

    async def __aenter__(self) -> N8nClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- transport -------------------------------------------------------------------------------

    async def _send_once(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        cookie: str | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        headers = {"accept": "application/json"}
        if cookie:
            headers["cookie"] = f"{AUTH_COOKIE}={cookie}"
        kwargs: dict[str, Any] = {"headers": headers}
        if json is not None:
            kwargs["json"] = json
        if params:
            kwargs["params"] = params
        if timeout is not None:
            kwargs["timeout"] = httpx.Timeout(timeout, connect=min(10.0, timeout))
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            unsent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
            raise N8nTransportError(method, path, text, sent=not unsent) from None
        if not response.is_success:
            message, body = error_message(response.text)
            raise http_error(
                method, path, response.status_code, message, body, retry_after_s=_retry_after(response)
            )
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        cookie: str | None = None,
        safe: bool | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """Send one request; raise :class:`N8nHTTPError` for 4xx/5xx, :class:`N8nTransportError`
        when no answer came. ``safe`` (default: GET/HEAD) enables the retry policy; an unsafe
        request is retried only when it failed to connect (it never reached n8n)."""
        method = method.upper()
        if safe is None:
            safe = method in ("GET", "HEAD")

        def retry_on(exc: BaseException) -> bool:
            if safe:
                return _retryable(exc)
            return isinstance(exc, N8nTransportError) and not exc.sent

        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, self.retry.attempts)),
            wait=wait_exponential(multiplier=self.retry.initial_wait_s, max=self.retry.max_wait_s),
            retry=retry_if_exception(retry_on),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._send_once(method, path, json=json, params=params, cookie=cookie, timeout=timeout)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- lane level --------------------------------------------------------------------------------

    async def ready(self) -> bool:
        """``GET /healthz/readiness`` is 200. Never raises on connection problems."""
        return await answers_ready(self._http, "", timeout=self.ready_timeout)

    async def e2e_reset(
        self,
        owner: OwnerCredentials,
        *,
        admin: OwnerCredentials,
        chat: OwnerCredentials,
        members: list[OwnerCredentials] | tuple[OwnerCredentials, ...] = (),
    ) -> None:
        """``POST /rest/e2e/reset``: wipe the lane and seed these users (needs ``E2E_TESTS=true``)."""

        def user(u: OwnerCredentials) -> dict[str, str]:
            register_secret(u.password)
            return {"email": u.email, "password": u.password, "firstName": u.first_name, "lastName": u.last_name}

        body = {"owner": user(owner), "admin": user(admin), "members": [user(m) for m in members], "chat": user(chat)}
        await self.request("POST", "/rest/e2e/reset", json=body, safe=True, timeout=180)
        self._owner = owner
        self._owner_session = None

    async def owner_session(self) -> N8nSession:
        """The owner seeded by :meth:`e2e_reset`, logged in once and reused."""
        if self._owner is None:
            raise N8nError("POST", "/rest/login", None, "no owner known: call e2e_reset() on this client first")
        if self._owner_session is None or not self._owner_session.cookie:
            self._owner_session = await self.login(self._owner.email, self._owner.password)
        return self._owner_session

    async def set_feature(self, feature: str, enabled: bool) -> None:
        """``PATCH /rest/e2e/feature`` (e2e route, no auth). Lost on restart and on reset."""
        await self.request("PATCH", "/rest/e2e/feature", json={"feature": feature, "enabled": enabled}, safe=True)

    async def set_quota(self, feature: str, value: int) -> None:
        """``PATCH /rest/e2e/quota``, e.g. ``("quota:maxTeamProjects", -1)``."""
        await self.request("PATCH", "/rest/e2e/quota", json={"feature": feature, "value": value}, safe=True)

    async def login(self, email: str, password: str) -> N8nSession:
        """A session of the user ``email``. Raises :class:`N8nHTTPError` when n8n refuses the login and
        :class:`N8nError` when its answer has no auth cookie."""
        register_secret(password)
        response = await self.request(
            "POST", "/rest/login", json={"emailOrLdapLoginId": email, "password": password}, safe=True
        )
        return self._session_from(response, "POST", "/rest/login")

    async def accept_invitation(self, token: str, first_name: str, last_name: str, password: str) -> N8nSession:
        """Accept an invitation as a new member with ``password``; returns the member's session (errors as
        :meth:`login`)."""
        register_secret(token)
        register_secret(password)
        body = {"token": token, "firstName": first_name, "lastName": last_name, "password": password}
        response = await self.request("POST", "/rest/invitations/accept", json=body)
        return self._session_from(response, "POST", "/rest/invitations/accept")

    def _session_from(self, response: httpx.Response, method: str, path: str) -> N8nSession:
        cookie = _auth_cookie_from(response)
        if not cookie:
            raise N8nError(method, path, response.status_code, f"no {AUTH_COOKIE} cookie in the answer")
        register_secret(cookie)
        user = _data(method, path, response) or {}
        return N8nSession(self, cookie, user if isinstance(user, dict) else {})

    async def settings(self, session: N8nSession | None = None) -> dict[str, Any]:
        """``GET /rest/settings``: the full set with a session, the public subset without one."""
        response = await self.request("GET", "/rest/settings", cookie=session.cookie if session else None)
        data = _data("GET", "/rest/settings", response)
        return data if isinstance(data, dict) else {}

    async def configuration(self, session: N8nSession | None = None) -> LaneConfiguration:
        """The configuration-defining settings of this lane (what ``lanes.fingerprint`` reads). Uses
        ``session``, else logs in as the owner this client seeded with :meth:`e2e_reset`, else only
        public settings (``authenticated`` False)."""
        if session is not None or self._owner is None:
            return await self._configuration_as(session)
        try:
            return await self._configuration_as(await self.owner_session())
        except N8nUnauthorized:
            self._owner_session = None  # the cached cookie went stale (e.g. a reset elsewhere)
            return await self._configuration_as(await self.owner_session())

    async def _configuration_as(self, session: N8nSession | None) -> LaneConfiguration:
        try:
            settings = await self.settings(session)
        except N8nNotFound:  # N8N_DISABLE_UI: no FrontendService routes (settings, module settings)
            settings = {}
            editor = False
        else:
            editor = True
        if session is None:
            return LaneConfiguration(settings, {}, {}, authenticated=False, editor=editor)
        modules = await session.get("/rest/module-settings") if editor else {}
        try:
            instance_ai = await session.get("/rest/instance-ai/settings")
        except (N8nForbidden, N8nNotFound):
            instance_ai = {}
        return LaneConfiguration(
            settings,
            modules if isinstance(modules, dict) else {},
            instance_ai if isinstance(instance_ai, dict) else {},
            editor=editor,
        )




class N8nSession:
    """A logged-in user on a lane. Shares the client's connection pool; the cookie is the secret."""

    def __init__(self, client: N8nClient, cookie: str, user: dict[str, Any]) -> None:
        self.client = client
        self.cookie = cookie
        self.user = user

    def __repr__(self) -> str:
        return f"N8nSession({self.email or self.user_id}, {self.client.base_url})"

    @property
    def user_id(self) -> str:
        return str(self.user.get("id", ""))

    @property
    def email(self) -> str:
        return str(self.user.get("email", ""))

    @property
    def role(self) -> str:
        return str(self.user.get("role", ""))

    async def aclose(self) -> None:
        """Forget the cookie (the connection pool belongs to the client)."""
        self.cookie = ""

    # -- plumbing ----------------------------------------------------------------------------------

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request with the session's cookie, keeping a renewed cookie; the raw response (errors as
        :meth:`N8nClient.request`). Raises :class:`N8nError` once the session is closed."""
        if not self.cookie:
            raise N8nError(method, path, None, "session is closed")
        response = await self.client.request(method, path, cookie=self.cookie, **kwargs)
        if renewed := _auth_cookie_from(response):
            register_secret(renewed)
            self.cookie = renewed
        return response

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """``GET path``: the answer's ``data`` (or the whole body when it has none). Raises
        :class:`N8nError` for an answer that is not JSON."""
        return _data("GET", path, await self.call("GET", path, params=params))

    async def _send(self, method: str, path: str, json: Any = None, **kwargs: Any) -> Any:
        return _data(method, path, await self.call(method, path, json=json, **kwargs))

    async def _paged(self, path: str, rows_key: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """All rows of a listing (``{count, <rows_key>: […]}`` or a bare list): one request, then
        take/skip pages while fewer than ``count`` rows arrived (rows are de-duplicated by id)."""
        base = dict(params or {})

        async def fetch(extra: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
            query = {**base, **extra}
            body = _payload("GET", path, await self.call("GET", path, params=query or None))
            if isinstance(body, dict) and rows_key not in body and isinstance(body.get("data"), dict):
                body = body["data"]  # /rest/users: {"data": {"count", "items"}}
            if isinstance(body, dict):
                rows = body.get(rows_key) or []
                return list(rows), int(body.get("count", len(rows)))
            rows = list(body or [])
            return rows, len(rows)

        rows, count = await fetch({})
        seen = {str(r.get("id")) for r in rows}
        while len(rows) < count:
            more, count = await fetch({"take": _PAGE, "skip": len(rows)})
            fresh = [r for r in more if str(r.get("id")) not in seen]
            if not fresh:
                break
            seen.update(str(r.get("id")) for r in fresh)
            rows.extend(fresh)
        return rows

    @staticmethod
    async def _gone_ok(call: Callable[[], Awaitable[T]], *statuses: int) -> T | None:
        try:
            return await call()
        except N8nHTTPError as exc:
            if exc.status in (404, *statuses):
                return None
            raise

    # -- users -------------------------------------------------------------------------------------

    async def me(self) -> dict[str, Any]:
        """Refresh and return the session's user."""
        data = await self.get("/rest/login")
        if isinstance(data, dict):
            self.user = data
        return self.user

    async def invite(self, emails: list[str], role: str = "global:member", *, rate_limit_waits: int = 2) -> list[Invitation]:
        """Invite in batches of :data:`INVITE_BATCH_SIZE`; answers come in the order of ``emails``. Re-inviting a pending email returns the
        same user, so a batch is resent after a 5xx or a 429 (waiting out ``Retry-After``)."""
        out: list[Invitation] = []
        for start in range(0, len(emails), INVITE_BATCH_SIZE):
            batch = emails[start : start + INVITE_BATCH_SIZE]
            rows = await self._invite_batch(batch, role, rate_limit_waits)
            out.extend(rows)
        return out

    async def _invite_batch(self, batch: list[str], role: str, rate_limit_waits: int) -> list[Invitation]:
        path = "/rest/invitations"
        body = [{"email": e, "role": role} for e in batch]
        retrying = AsyncRetrying(
            stop=stop_after_attempt(rate_limit_waits + 1),
            wait=wait_retry_after(fallback_s=INVITE_RATE_WINDOW_S / 5, cap_s=INVITE_RATE_WINDOW_S),
            retry=retry_if_exception_type(N8nRateLimited),
            before_sleep=lambda state: log.warning("invitations rate-limited on %s; waiting %.0f s",
                                                   self.client.base_url, state.upcoming_sleep),
            reraise=True,
        )
        data: Any = None
        async for attempt in retrying:
            with attempt:
                data = await self._send("POST", path, body, safe=True)
        return invitations_from(path, batch, data)

    async def list_users(self) -> list[dict[str, Any]]:
        """Every user of the instance (all pages)."""
        return await self._paged("/rest/users", "items")

    async def delete_user(self, user_id: str, transfer_to_project_id: str | None = None) -> bool:
        """Delete a user (its personal project's content goes too unless transferred). False if gone."""
        params = {"transferId": transfer_to_project_id} if transfer_to_project_id else None
        done = await self._gone_ok(lambda: self.call("DELETE", f"/rest/users/{user_id}", params=params, safe=True))
        return done is not None

    async def personal_project(self) -> str:
        """The id of the session user's personal project. Raises :class:`N8nError` when the answer has none."""
        data = await self.get("/rest/projects/personal")
        if not isinstance(data, dict) or not data.get("id"):
            raise N8nError("GET", "/rest/projects/personal", 200, "answer has no project id")
        return str(data["id"])

    # -- MCP -----------------------------------------------------------------------------------------

    async def enable_mcp(self, enabled: bool = True) -> None:
        """Instance-wide MCP access (scope ``mcp:manage``: owner or admin; a member gets 403).
        A reset turns it off again."""
        await self._send("PATCH", "/rest/mcp/settings", {"mcpAccessEnabled": enabled}, safe=True)

    async def rotate_mcp_key(self) -> str:
        """A fresh MCP API key for this user (the key ``GET /rest/mcp/api-key`` shows is refused).
        Safe to repeat: each rotation revokes the previous key and returns the new one."""
        data = await self._send("POST", "/rest/mcp/api-key/rotate", safe=True)
        key = data.get("apiKey") if isinstance(data, dict) else None
        if not key:
            raise N8nError("POST", "/rest/mcp/api-key/rotate", 200, "answer has no apiKey")
        register_secret(key)
        return str(key)

    # -- credentials -------------------------------------------------------------------------------

    async def create_credential(self, name: str, type: str, data: dict[str, Any], project_id: str | None = None,
                                *, description: str | None = None) -> str:
        """Create once (not retried: a lost answer would orphan a duplicate). ``description`` is
        stored as credential metadata, outside the secret ``data`` (n8n ≥ 2.41's create DTO)."""
        body: dict[str, Any] = {"name": name, "type": type, "data": data}
        if description is not None:
            body["description"] = description
        if project_id:
            body["projectId"] = project_id
        created = await self._send("POST", "/rest/credentials", body)
        return str(created["id"])

    async def delete_credential(self, credential_id: str) -> bool:
        """Delete the credential; False when it was already gone."""
        done = await self._gone_ok(lambda: self.call("DELETE", f"/rest/credentials/{credential_id}", safe=True))
        return done is not None

    async def list_credentials(self) -> list[dict[str, Any]]:
        """Every credential the session user can see (all pages)."""
        return await self._paged("/rest/credentials", "data")

    # -- instance ai threads (the chat itself is orchestrator.n8n.instance_ai) ---------------------

    async def delete_thread(self, thread_id: str) -> bool:
        """Delete an Instance AI thread (n8n deletes its sandbox with it). False if already gone."""
        done = await self._gone_ok(lambda: self.call("DELETE", f"/rest/instance-ai/threads/{thread_id}", safe=True))
        return done is not None

    # -- workflows ---------------------------------------------------------------------------------

    async def create_workflow(self, body: dict[str, Any]) -> str:
        """Create a workflow from ``body``; returns its id."""
        created = await self._send("POST", "/rest/workflows", body)
        return str(created["id"])

    async def get_workflow(self, workflow_id: str) -> dict[str, Any]:
        workflow: dict[str, Any] = await self.get(f"/rest/workflows/{workflow_id}")
        return workflow

    async def list_workflows(self, *, include_archived: bool = True) -> list[dict[str, Any]]:
        """Every workflow this user can see (an owner sees all; archived ones included by default)."""
        params = None if include_archived else {"filter": '{"isArchived":false}'}
        return await self._paged("/rest/workflows", "data", params)

    async def archive_workflow(self, workflow_id: str) -> bool:
        """True if archived now; False if it was already archived (400) or is gone (404)."""
        done = await self._gone_ok(lambda: self.call("POST", f"/rest/workflows/{workflow_id}/archive", safe=True), 400)
        return done is not None

    async def delete_workflow(self, workflow_id: str) -> bool:
        """Archive then delete. False if it was already gone."""
        await self.archive_workflow(workflow_id)
        done = await self._gone_ok(lambda: self.call("DELETE", f"/rest/workflows/{workflow_id}", safe=True))
        return done is not None

    # -- e2e toggles (no auth needed; here for convenience) -----------------------------------------

    async def set_feature(self, feature: str, enabled: bool) -> None:
        """Turn a licensed feature on or off through the e2e endpoints (:meth:`N8nClient.set_feature`)."""
        await self.client.set_feature(feature, enabled)

    async def seed_mcp_registry(self) -> int | None:
        """``POST /rest/mcp-registry/test/seed`` (mounted with ``E2E_TESTS=true``): replaces the lane's
        MCP registry with n8n's Notion and Linear mock servers, whose credential types
        (``notionMcpOAuth2Api``, ``linearMcpOAuth2Api``) then exist. As n8n's harness
        (``mcp-registry/seeder.ts``): the number of servers seeded, or None when the test endpoint is
        not there (a lane without ``E2E_TESTS``); 401/403 are raised."""
        try:
            answer = await self._send("POST", "/rest/mcp-registry/test/seed")
        except (N8nUnauthorized, N8nForbidden):
            raise
        except N8nHTTPError:
            return None
        count = answer.get("count") if isinstance(answer, dict) else None
        return int(count) if isinstance(count, int) else 0

    async def set_quota(self, feature: str, value: int) -> None:
        """Set a licensed quota through the e2e endpoints (:meth:`N8nClient.set_quota`)."""
        await self.client.set_quota(feature, value)

    # -- verification ------------------------------------------------------------------------------

    async def execute_with_llm_mock(
        self,
        workflow_id: str,
        *,
        scenario_hints: str | None = None,
        pin_nodes: list[str] | None = None,
        timeout_ms: int = 120_000,
    ) -> MockExecutionResult:
        """Run a workflow with every external call mocked by the lane's model (scope
        ``instanceAi:eval``: owner or admin). Not retried: it executes the workflow.

        The lane's model (``createEvalAgent`` in ``@n8n/instance-ai``) is chosen by lane env:
        model ``N8N_INSTANCE_AI_EVAL_MODEL`` ?? ``N8N_INSTANCE_AI_MODEL`` ?? ``anthropic/claude-sonnet-4-6``;
        key ``N8N_INSTANCE_AI_MODEL_API_KEY`` ?? ``N8N_AI_ANTHROPIC_KEY`` ?? ``ANTHROPIC_API_KEY``; base URL
        ``N8N_INSTANCE_AI_MODEL_URL`` (``/v1`` is appended for Anthropic), used only while the eval model
        equals ``N8N_INSTANCE_AI_MODEL`` (or that is unset). Seen: non-streaming ``POST /v1/messages``
        with ``x-api-key``, ``anthropic-version: 2023-06-01``, ``model: claude-sonnet-4-6``,
        ``max_tokens: 128000``, ``thinking: {type: adaptive}``: one hint-planning call (no tools; reply
        is a JSON text ``{globalContext, nodeHints, triggerContent}``, 2 attempts), then per mocked HTTP
        request an agent with tools ``get_endpoint_quirks`` / ``submit_response`` (it must call
        ``submit_response {type: "json", body}``, then gets a ``tool_result`` and answers once more).
        A Manual Trigger → Set workflow runs even with no model reachable (the plan fails, the hint
        warnings say so, ``success`` stays true after ~12 s of failed attempts)."""
        body = mock_execution_body(scenario_hints=scenario_hints, pin_nodes=pin_nodes, timeout_ms=timeout_ms)
        path = f"/rest/instance-ai/eval/execute-with-llm-mock/{workflow_id}"
        data = await self._send("POST", path, body, timeout=timeout_ms / 1000 + 30)
        return MockExecutionResult.model_validate(data)

    async def get_execution(self, execution_id: str) -> dict[str, Any] | None:
        """The execution row (``data`` is n8n's flatted string); None if unknown (n8n answers ``{}``)."""
        data = await self._gone_ok(lambda: self.get(f"/rest/executions/{execution_id}"))
        return data if isinstance(data, dict) and data.get("id") is not None else None
