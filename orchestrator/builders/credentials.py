"""Data for the credentials a case declares: a hand template for the types below, and for any
other type placeholder data derived from the lane's own credential type definitions (see
:class:`CredentialTypes`), so a type n8n knows needs no code here.

Each template fills the fields n8n 2.41.1 needs for that type (``GET /types/credentials.json``)
with a placeholder, or with a live value when the type's ``EVAL_*`` environment variable is set;
live values are registered as secrets. Builds and verification never call the real services, so
placeholders are enough: verification mocks every node. n8n does not validate credential data on
``POST /rest/credentials`` (unknown fields are stored too), so the field names here were checked
against the type definitions by ``tests/unit/builders/test_credential_templates.py``.

Facts the templates encode: ``gmailOAuth2`` extends ``googleOAuth2Api`` and
``microsoftTeamsOAuth2Api`` extends ``microsoftOAuth2Api``; an OAuth2 credential counts as
connected when it carries ``oauthTokenData`` (n8n then reports ``{"oauthTokenData": true}``).
(n8n's own TypeScript seeder names the Gmail type ``gmailOAuth2Api``, which is not a credential
type in 2.41.1: creating it fails with 400 "Unrecognized credential type".)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from orchestrator.cases.credential_types import spellings
from orchestrator.cases.credentials import SUPPORTED_CREDENTIAL_TYPES, CredentialSpec
from orchestrator.errors import UserError
from orchestrator.redact import register_secret

PLACEHOLDER = "eval-placeholder"
#: The secret of a ``valid: false`` credential: never a live token, so its connection test fails for real.
INVALID_PLACEHOLDER = "eval-invalid-placeholder"


def _url_field(name: str) -> bool:
    return name.lower().endswith(("url", "uri"))


def placeholder_url(field_name: str) -> str:
    """A valid URL nobody answers (``.invalid``, RFC 2606) for a URL field of a placeholder credential."""
    return f"https://eval-placeholder.invalid/{field_name}"


def _shown(prop: Mapping[str, Any], form: Mapping[str, Any]) -> bool:
    """Whether n8n's form shows ``prop`` for these values (``displayOptions.show`` / ``hide``; keys
    such as ``@version`` that are not fields are not checked)."""
    options = prop.get("displayOptions") or {}
    for key, allowed in (options.get("show") or {}).items():
        if not key.startswith("@") and isinstance(allowed, list) and form.get(key) not in allowed:
            return False
    for key, hidden in (options.get("hide") or {}).items():
        if not key.startswith("@") and isinstance(hidden, list) and form.get(key) in hidden:
            return False
    return True


def _oauth2(token: str, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "clientId": "eval-client-id",
        "clientSecret": "eval-client-secret",
        "oauthTokenData": {"access_token": token, "token_type": "Bearer"},
    }


@dataclass(frozen=True)
class CredentialTemplate:
    type: str
    default_name: str
    #: Environment variable holding a live secret for this type (else :data:`PLACEHOLDER`).
    env_var: str
    build: Callable[[str], dict[str, Any]]
    #: What the placeholder stands in for when ``env_var`` is unset (header auth wants a full value).
    placeholder: str = PLACEHOLDER


TEMPLATES: dict[str, CredentialTemplate] = {
    t.type: t
    for t in (
        CredentialTemplate("slackApi", "[eval] Slack", "EVAL_SLACK_ACCESS_TOKEN", lambda s: {"accessToken": s}),
        CredentialTemplate("notionApi", "[eval] Notion", "EVAL_NOTION_API_KEY", lambda s: {"apiKey": s}),
        CredentialTemplate(
            "githubApi",
            "[eval] GitHub",
            "EVAL_GITHUB_ACCESS_TOKEN",
            lambda s: {"server": "https://api.github.com", "user": "eval-user", "accessToken": s},
        ),
        CredentialTemplate("gmailOAuth2", "[eval] Gmail", "EVAL_GMAIL_ACCESS_TOKEN", _oauth2),
        CredentialTemplate(
            "microsoftTeamsOAuth2Api",
            "[eval] Teams",
            "EVAL_TEAMS_ACCESS_TOKEN",
            lambda s: _oauth2(s, scope="openid"),
        ),
        CredentialTemplate(
            "whatsAppTriggerApi",
            "[eval] WhatsApp OAuth account",
            "EVAL_WHATSAPP_CLIENT_SECRET",
            lambda s: {"clientId": "eval-client-id", "clientSecret": s},
        ),
        CredentialTemplate(
            "httpHeaderAuth",
            "[eval] HTTP Header",
            "EVAL_HTTP_HEADER_VALUE",
            lambda s: {"name": "Authorization", "value": s},
            placeholder=f"Bearer {PLACEHOLDER}",
        ),
        CredentialTemplate(
            "httpBasicAuth",
            "[eval] HTTP Basic",
            "EVAL_HTTP_BASIC_PASSWORD",
            lambda s: {"user": "eval-user", "password": s},
        ),
        # the LLM judge of a config-based evaluation (eval-config metrics need an LLM credential)
        CredentialTemplate(
            "openAiApi",
            "[eval] OpenAI",
            "EVAL_OPENAI_API_KEY",
            lambda s: {"apiKey": s, "url": "https://api.openai.com/v1"},
        ),
    )
}

#: The case schema's closed set (``cases.credentials``) is the one list; every type in it has a template.
SUPPORTED_TYPES: frozenset[str] = SUPPORTED_CREDENTIAL_TYPES
if set(TEMPLATES) != SUPPORTED_TYPES:  # pragma: no cover - a programming error caught at import
    raise RuntimeError(f"credential templates {sorted(TEMPLATES)} != case schema types {sorted(SUPPORTED_TYPES)}")


class UnknownCredentialType(UserError):
    """A case declared a credential type neither a template here nor the lane knows."""


#: The data a blank credential is created with: what the user saved without filling anything in.
BLANK = ""
_OAUTH2_BASE = "oAuth2Api"


class CredentialTypes:
    """The lane's credential type definitions (``GET /types/credentials.json``), and placeholder data
    derived from them for a type without a hand template: every required or password string field
    gets the placeholder, every other field with a default keeps it, and an OAuth2 type (one that
    extends ``oAuth2Api``) gets a client id/secret and token data so n8n counts it as connected.

    A case may spell a type as n8n's TypeScript seeder does (``gmailOAuth2Api``) where this n8n
    names it without the ``Api`` suffix (``gmailOAuth2``), or the other way round: :meth:`resolve`
    takes whichever of the two the lane defines."""

    def __init__(self, definitions: Iterable[Mapping[str, Any]]) -> None:
        self._types = {str(d["name"]): d for d in definitions if isinstance(d, Mapping) and d.get("name")}

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def resolve(self, credential_type: str) -> str:
        """The lane's name for ``credential_type`` among its accepted spellings. Raises
        ``UnknownCredentialType`` when the lane defines none of them."""
        for name in spellings(credential_type):
            if name in self._types:
                return name
        raise UnknownCredentialType(f"credential type {credential_type!r} is not a credential type this n8n defines")

    def _ancestors(self, name: str, seen: frozenset[str] = frozenset()) -> list[str]:
        parents = [str(p) for p in self._types.get(name, {}).get("extends") or [] if p not in seen]
        out = list(parents)
        for parent in parents:
            out += self._ancestors(parent, seen | {name})
        return out

    def properties(self, name: str) -> dict[str, Mapping[str, Any]]:
        """Own and inherited (``extends``) properties, the type's own winning."""
        props: dict[str, Mapping[str, Any]] = {}
        for parent in reversed(self._ancestors(name)):
            props.update({p["name"]: p for p in self._types.get(parent, {}).get("properties") or []})
        props.update({p["name"]: p for p in self._types.get(name, {}).get("properties") or []})
        return props

    def is_oauth2(self, name: str) -> bool:
        """Whether ``name`` is OAuth2 (``oAuth2Api`` or a type extending it)."""
        return name == _OAUTH2_BASE or _OAUTH2_BASE in self._ancestors(name)

    def placeholder_data(self, name: str, secret: str) -> dict[str, Any]:
        """What a user saving the type's form would store: every field the form shows (its
        ``displayOptions`` read against the form's defaults) that is a required or password string
        without a default gets the placeholder — a URL field a placeholder URL, which n8n checks
        (``OAuth url is not a valid URL``) — and every shown or hidden field with a default keeps it
        (an MCP registry type's hidden ``serverUrl``, say)."""
        props = self.properties(name)
        form = {n: p.get("default") for n, p in props.items()}
        data: dict[str, Any] = {}
        for prop_name, prop in props.items():
            if not _shown(prop, form):
                continue
            kind, default = prop.get("type"), prop.get("default")
            secret_field = bool((prop.get("typeOptions") or {}).get("password"))
            if kind == "string" and (prop.get("required") or secret_field) and (secret_field or default in (None, "")):
                data[prop_name] = placeholder_url(prop_name) if _url_field(prop_name) else secret
            elif kind in ("string", "options", "number", "boolean", "hidden") and default not in (None, ""):
                data[prop_name] = default
        if self.is_oauth2(name):
            data.update(_oauth2(secret))
        return data

    def blank_data(self, name: str) -> dict[str, Any]:
        """Every string field the type asks for, left empty; no token."""
        return {n: BLANK for n, p in self.properties(name).items()
                if p.get("type") == "string" and (p.get("required") or (p.get("typeOptions") or {}).get("password"))}


class CredentialBody(NamedTuple):
    """What ``POST /rest/credentials`` needs: ``(type, data, name)``."""

    type: str
    data: dict[str, Any]
    name: str


def template_for(credential_type: str) -> CredentialTemplate:
    """The template that fills a credential of ``credential_type``. Raises ``UnknownCredentialType``
    naming the supported types when there is none."""
    try:
        return TEMPLATES[credential_type]
    except KeyError:
        raise UnknownCredentialType(
            f"credential type {credential_type!r} has no template in orchestrator/builders/credentials.py "
            f"(supported: {', '.join(sorted(SUPPORTED_TYPES))})"
        ) from None


def credential_body(
    credential_type: str, name: str | None = None, *, env: Mapping[str, str] | None = None
) -> CredentialBody:
    """Type, data and name (``name`` or the type's default) for one declared credential."""
    template = template_for(credential_type)
    live = (env if env is not None else os.environ).get(template.env_var, "").strip()
    if live:
        register_secret(live)
    return CredentialBody(template.type, template.build(live or template.placeholder), name or template.default_name)


def credential_bodies(
    declared: Iterable[tuple[str, str | None]], *, env: Mapping[str, str] | None = None
) -> list[CredentialBody]:
    """Bodies for ``(type, name-or-None)`` pairs in order; a repeated name gets `` #2``, `` #3``…"""
    seen: dict[str, int] = {}
    out: list[CredentialBody] = []
    for credential_type, name in declared:
        body = credential_body(credential_type, name, env=env)
        seen[body.name] = seen.get(body.name, 0) + 1
        if seen[body.name] > 1:
            body = body._replace(name=f"{body.name} #{seen[body.name]}")
        out.append(body)
    return out


def _blank_template(credential_type: str) -> dict[str, Any]:
    data = template_for(credential_type).build(BLANK)
    data.pop("oauthTokenData", None)
    return data


@dataclass(frozen=True)
class PlannedCredential:
    """One declared credential as it is created on the lane.

    ``description`` is credential metadata, outside the secret ``data``: n8n 2.41.1's
    ``CreateCredentialDto`` takes ``description`` (trimmed, ≤ 512, blank → null) next to ``data`` and
    stores it in its own column, and the agent's credential list shows it. ``valid`` decides the
    connection test: a valid credential stands for one the user already connected, so its id goes
    into the thread allowlist's ``bypassCredentialTest`` (the test then answers "tested
    successfully"); a ``valid: false`` one is left out of it and carries :data:`INVALID_PLACEHOLDER`
    (never a live ``EVAL_*`` token), so n8n really tests it, and the test fails.
    """

    type: str
    name: str
    data: dict[str, Any] = field(repr=False)
    description: str | None = None
    valid: bool = True
    #: Saved without values: created with empty fields, and its connection test is not bypassed.
    blank: bool = False

    @property
    def connected(self) -> bool:
        """Whether the credential is valid and filled: n8n's credential test is bypassed for it."""
        return self.valid and not self.blank

    def request_body(self, project_id: str | None = None) -> dict[str, Any]:
        """The ``POST /rest/credentials`` body."""
        body: dict[str, Any] = {"name": self.name, "type": self.type, "data": self.data}
        if self.description is not None:
            body["description"] = self.description
        if project_id:
            body["projectId"] = project_id
        return body


def needs_lane_types(specs: Iterable[CredentialSpec]) -> bool:
    """Whether planning these credentials needs the lane's type definitions (a type without a template)."""
    return any(spec.type not in TEMPLATES for spec in specs)


def _default_name(credential_type: str) -> str:
    return f"[eval] {credential_type}"


#: Model-provider credential types whose base-URL field routes an Agent's model calls: the run's
#: model route (the lanes' ``N8N_INSTANCE_AI_MODEL_URL``; offline, the scripted server) goes there,
#: so an Agent an execution scenario runs with "its real model" reaches the route like the lane's
#: own agent does. The field takes the same base URL (the client appends ``/v1``).
MODEL_ROUTE_FIELDS = {"anthropicApi": "url"}


def plan_credentials(
    specs: Iterable[CredentialSpec], *, env: Mapping[str, str] | None = None,
    types: CredentialTypes | None = None, model_url: str | None = None,
) -> list[PlannedCredential]:
    """What to create for a case's declared credentials, in order (names as :func:`credential_bodies`;
    a repeated name gets `` #2``…). A type without a hand template takes its data from ``types``
    (the lane's definitions; :class:`UnknownCredentialType` without them or when the lane lacks it).
    ``model_url``: the run's model route, put into a model-provider credential's base-URL field
    (:data:`MODEL_ROUTE_FIELDS`)."""
    planned: list[PlannedCredential] = []
    seen: dict[str, int] = {}
    for spec in specs:
        if spec.type in TEMPLATES:
            ctype = spec.type
            name = spec.name or TEMPLATES[ctype].default_name
            if spec.blank:
                data = _blank_template(ctype)
            elif spec.valid:
                data = credential_body(ctype, env=env).data
            else:
                data = template_for(ctype).build(INVALID_PLACEHOLDER)
        else:
            if types is None:
                raise UnknownCredentialType(
                    f"credential type {spec.type!r} has no template here and the lane's credential types "
                    "were not loaded")
            ctype = types.resolve(spec.type)
            name = spec.name or _default_name(ctype)
            if spec.blank:
                data = types.blank_data(ctype)
            else:
                data = types.placeholder_data(ctype, PLACEHOLDER if spec.valid else INVALID_PLACEHOLDER)
        if model_url and ctype in MODEL_ROUTE_FIELDS and not spec.blank:
            data = {**data, MODEL_ROUTE_FIELDS[ctype]: model_url}
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} #{seen[name]}"
        planned.append(PlannedCredential(ctype, name, data, spec.description, spec.valid, spec.blank))
    return planned


def bypass_test_ids(planned: Iterable[PlannedCredential], ids: Iterable[str]) -> list[str]:
    """The created ids whose connection test resolves as passing (all but ``valid: false`` and blank ones)."""
    return [cid for plan, cid in zip(planned, ids, strict=True) if plan.connected]
