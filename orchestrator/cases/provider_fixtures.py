"""Provider fixtures: the lookalike provider sites a ``credentialFixture`` case runs against.

A case opts into n8n's credential-setup checks with ``credentialFixture: <id>`` (n8n
``harness/schema.ts``; ``harness/credential-setup-lane.ts`` resolves it). Each fixture is a folder
``providers/<id>/`` beside this module: a ``manifest.json`` and the pages it routes. The folder
name is the id; folders starting with ``_`` are skipped. The manifest follows n8n's newer fixture
schema (``harness/fixture-server.ts``, pinned by ``__tests__/fixture-server.test.ts``), strictly:

- ``credentialType`` (the n8n type the agent must create), ``hosts`` (≥ 1: the sites served),
  ``secretPrefix`` (the minted key is the prefix + base64url of 24 random bytes);
- ``routes`` (path → page file; a ``:param`` segment matches one path segment, an exact route beats
  a pattern) and ``defaultRoute`` (one of ``routes``: served for any other path);
- ``urlField`` (default ``url``): the credential field holding the API base URL, which the value
  probe points at the provider stand-in;
- ``verify`` (optional): the provider-API stand-in, ``{path, header, scheme?}`` or ``{path, query}``.
  Without it the value check is never verifiable.

The reserved id ``local`` (the real provider site in the developer's own browser) cannot run
offline: it is refused at case load, as an unknown id is (naming the ids there are).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

#: n8n's ``LOCAL_FIXTURE_ID``: the real provider site, driven in the developer's attached browser.
LOCAL_FIXTURE_ID = "local"
PROVIDERS = "providers"
#: The page action that mints the run's key (n8n's ``MINT_PATH``).
MINT_PATH = "/__fixture__/create-key"


class _Strict(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


RoutePath = Annotated[str, Field(pattern=r"^/")]


class HeaderVerify(_Strict):
    """The key is presented in a header (``scheme``: as ``<scheme> <key>``, e.g. ``Bearer``)."""

    path: RoutePath
    header: Annotated[str, Field(min_length=1)]
    scheme: Annotated[str, Field(min_length=1)] | None = None


class QueryVerify(_Strict):
    """The key is presented as a query parameter (a header cannot satisfy it)."""

    path: RoutePath
    query: Annotated[str, Field(min_length=1)]


class ProviderManifest(_Strict):
    credential_type: Annotated[str, Field(min_length=1)]
    hosts: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    secret_prefix: Annotated[str, Field(min_length=1)]
    routes: dict[RoutePath, Annotated[str, Field(min_length=1)]]
    default_route: str
    url_field: Annotated[str, Field(min_length=1)] = "url"
    verify: HeaderVerify | QueryVerify | None = None

    @model_validator(mode="after")
    def _default_is_routed(self) -> ProviderManifest:
        if self.default_route not in self.routes:
            raise ValueError(f'defaultRoute "{self.default_route}" is not one of routes ({", ".join(self.routes)})')
        return self


@dataclass(frozen=True)
class ProviderFixture:
    """One provider fixture: its id, manifest and the folder its pages are read from."""

    id: str
    manifest: ProviderManifest
    folder: Traversable

    def page_for(self, path: str) -> str:
        """The HTML served for ``path`` (the routed page, else the default route's)."""
        route = match_route(list(self.manifest.routes), path) or self.manifest.default_route
        return self.folder.joinpath(self.manifest.routes[route]).read_text(encoding="utf-8")


def match_route(routes: list[str], path: str) -> str | None:
    """The route serving ``path``: an exact route, else the first pattern whose ``:param``
    segments each match one whole segment (never across a ``/``); None when nothing matches."""
    path = path.split("?", 1)[0].split("#", 1)[0] or "/"
    if path in routes:
        return path
    parts = path.strip("/").split("/")
    for route in routes:
        pattern = route.strip("/").split("/")
        if ":" in route and len(pattern) == len(parts) and all(
                p == s or (p.startswith(":") and s) for p, s in zip(pattern, parts)):
            return route
    return None


def _root() -> Traversable:
    return resources.files("orchestrator.cases").joinpath(PROVIDERS)


@cache
def provider_fixtures() -> dict[str, ProviderFixture]:
    """Every shipped fixture by id. A folder named ``local`` or a manifest that does not parse is a
    packaging bug, raised here (``tests/unit/builders/instance_ai/test_credential_setup_fixture.py`` loads them all)."""
    out: dict[str, ProviderFixture] = {}
    for folder in sorted(_root().iterdir(), key=lambda f: f.name):
        if not folder.is_dir() or folder.name.startswith("_"):
            continue
        if folder.name == LOCAL_FIXTURE_ID:
            raise ValueError(f"providers/{LOCAL_FIXTURE_ID} is reserved for the real provider site")
        try:
            manifest = ProviderManifest.model_validate_json(folder.joinpath("manifest.json").read_text(encoding="utf-8"))
        except ValidationError as exc:
            raise ValueError(f"providers/{folder.name}/manifest.json: {exc}") from None
        out[folder.name] = ProviderFixture(folder.name, manifest, folder)
    credential_types = [f.manifest.credential_type for f in out.values()]
    if len(set(credential_types)) != len(credential_types):
        raise ValueError("two provider fixtures declare the same credentialType")
    return out


def fixture_ids() -> list[str]:
    """The ids of every provider fixture, sorted."""
    return sorted(provider_fixtures())


def credential_fixture_problem(value: str) -> str | None:
    """Why ``credentialFixture: value`` cannot run here (None: a shipped fixture id)."""
    if value in provider_fixtures():
        return None
    if value == LOCAL_FIXTURE_ID:
        return (f'"{LOCAL_FIXTURE_ID}" drives the real provider site in the developer\'s own browser, which an '
                f"offline run cannot reach: name a provider fixture instead ({', '.join(fixture_ids())})")
    return f'unknown provider fixture "{value}": available {", ".join(fixture_ids())} (or "local" for the real site)'


def resolve_fixture(value: str | None) -> ProviderFixture | None:
    """The fixture a case's ``credentialFixture`` names (None: the case has none). A value that
    cannot run raises ``ValueError`` (case loading already refused it)."""
    if not value:
        return None
    problem = credential_fixture_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return provider_fixtures()[value]


def fixture_for_credential_type(credential_type: str) -> ProviderFixture | None:
    """The provider fixture serving ``credential_type``, or None when no fixture does."""
    return next((f for f in provider_fixtures().values() if f.manifest.credential_type == credential_type), None)
