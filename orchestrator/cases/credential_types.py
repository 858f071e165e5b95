"""The credential types the pinned n8n defines, read without a lane.

A case may declare any credential type n8n defines (our choice: placeholder data comes from the
lane's own type definition, ``builders/credentials.py``; n8n's own schema accepts only its seeder's
templates). A type the pinned n8n does not define is refused when the case loads, naming the
nearest known type (``SlackApi`` → ``slackApi``), instead of failing on the lane mid-run.

The list (``n8n-credential-types.json``) is generated from the pinned install: the known
credentials of ``n8n-nodes-base`` and ``@n8n/n8n-nodes-langchain``, and the types the MCP registry's
test seed adds (``<slug>McpOAuth2Api`` for its Notion and Linear servers, which every lane seeds:
``lanes/bringup.py``). Regenerate it with ``python -m orchestrator.cases.credential_types <node_modules> <version>``;
``tests/unit/cases/test_case_rules.py`` keeps it equal to the installed n8n's.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from pathlib import Path

RESOURCE = "n8n-credential-types.json"
#: The packages whose ``dist/known/credentials.json`` list n8n's credential types.
KNOWN_PACKAGES = ("n8n-nodes-base", "@n8n/n8n-nodes-langchain")
#: The MCP registry's test seed (``modules/mcp-registry/registry/mock-servers``): its servers' slugs;
#: each becomes the credential type ``<slug>McpOAuth2Api`` (``mcp-registry-connection``).
MCP_REGISTRY_SEED_SLUGS = ("notion", "linear")


def mcp_registry_types() -> frozenset[str]:
    """The credential types of the MCP registry's test servers (``<slug>McpOAuth2Api`` each), known to
    n8n although no node package declares them."""
    return frozenset(f"{slug}McpOAuth2Api" for slug in MCP_REGISTRY_SEED_SLUGS)


def from_install(node_modules: Path) -> frozenset[str]:
    """Every credential type an n8n install defines (its ``node_modules`` folder)."""
    names: set[str] = set()
    for package in KNOWN_PACKAGES:
        known = json.loads((node_modules / package / "dist" / "known" / "credentials.json").read_text())
        names.update(known)
    return frozenset(names | mcp_registry_types())


@cache
def known_types() -> frozenset[str]:
    """The pinned n8n's credential types (the list shipped with the package)."""
    data = json.loads(resources.files("orchestrator.cases").joinpath(RESOURCE).read_text(encoding="utf-8"))
    return frozenset(data["types"])


def nearest(name: str) -> str | None:
    """The known type closest to ``name`` (case ignored first: ``SlackApi`` → ``slackApi``)."""
    types = known_types()
    by_lower = {t.lower(): t for t in types}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def spellings(name: str) -> list[str]:
    """``name`` and its other spelling: n8n's TypeScript seeder names some types with an ``Api``
    suffix this n8n does not use (``gmailOAuth2Api`` for ``gmailOAuth2``), or the other way round."""
    return [name, name[: -len("Api")] if name.endswith("Api") else name + "Api"]


def unknown_type_message(name: str) -> str | None:
    """Why ``name`` cannot be declared (None when the pinned n8n defines it, in either spelling)."""
    if any(spelling in known_types() for spelling in spellings(name)):
        return None
    hint = nearest(name)
    return (f"unknown credential type {name!r}: n8n defines no such type"
            + (f" (did you mean {hint!r}?)" if hint else ""))


def write_resource(node_modules: Path, n8n_version: str) -> Path:
    """Regenerate the shipped list from an install."""
    target = resources.files("orchestrator.cases").joinpath(RESOURCE)
    with resources.as_file(target) as path:
        path.write_text(json.dumps({"n8n": n8n_version, "types": sorted(from_install(node_modules))}, indent=0) + "\n",
                        encoding="utf-8")
    known_types.cache_clear()
    return path


if __name__ == "__main__":  # python -m orchestrator.cases.credential_types <n8n node_modules> <version>
    import sys

    print(write_resource(Path(sys.argv[1]), sys.argv[2]))
