"""The browser a credential-setup build's agent drives: a small page model of the fixture's HTML.

No Chromium runs here, so the gateway (:mod:`.gateway`) executes the agent's ``browser_*`` tool
calls on this model instead. It keeps the contract of ``@n8n/mcp-browser`` 0.22.0 (the tools n8n
2.41.1 composes for the agent), not its code:

- every host resolves to the fixture's page listener, which is asked for the path AS that host
  (``Host`` header): the hermetic catch-all of n8n's browser lane;
- ``browser_snapshot`` returns a ref-annotated accessibility outline (``- button "Add" [disabled]
  [ref=e23]``): headings, links, buttons, textboxes, comboboxes and options, dialogs, tables and
  cells; hidden elements are left out; refs are stable for a page load;
- the pages' ``data-*`` hooks stand in for their script (``cases/providers/<id>/console.html``
  documents them): "Add" mints the key through the fixture's create-key path and fills the reveal
  field;
- **redaction**: a textbox labelled as a secret (``API key``, token, password…) or a read-only one
  in a reveal dialog ("the only time … shown") shows its value as a marker ``[REDACTED:api_key:1]``,
  and so does any other text holding that value, in every tool output; truncated key listings stay
  visible, as on a real console. ``redact_secrets=False`` turns this off (a deliberately leaking
  browser for the leak check's test);
- ``browser_capture_secret`` reads the value behind a ref or a marker into a buffer the model never
  sees, refusing an empty value or a marker; ``browser_create_credential`` assembles the buffer
  into an n8n credential through the gateway's credential endpoint (``create_credential``), after
  the user approved it (``GATEWAY_CONFIRMATION_REQUIRED``: n8n suspends the tool and asks, as the
  extension path's default ``createCredential: require_approval`` does).

Each tool returns ``(payload, is_error)``; the gateway wraps it in an MCP result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from orchestrator.cases.provider_fixtures import MINT_PATH
from orchestrator.errors import BuildError

CreateCredential = Callable[[str, str, dict[str, Any], str | None], Awaitable[str]]

#: ``@n8n/api-types`` ``GATEWAY_CONFIRMATION_REQUIRED_PREFIX``: a tool result that asks n8n to suspend
CONFIRMATION_PREFIX = "GATEWAY_CONFIRMATION_REQUIRED::"
#: labels that mark a field as holding a secret (mcp-browser's DOM rule, in our own words)
SECRET_LABEL = re.compile(r"secret|password|passcode|passphrase|token|api[-_\s]?key|private[-_\s]?key", re.I)
REVEAL_PHRASE = re.compile(r"only time.{0,40}shown|won't be able to see it again|will not be shown again", re.I)
MARKER = re.compile(r"\[REDACTED:[a-z_]+:\d+\](?:@e\d+)?")
VOID = frozenset({"input", "br", "meta", "link", "img", "hr", "source", "wbr"})
SKIP = frozenset({"head", "script", "style", "template"})
REF_ROLES = frozenset({"link", "button", "textbox", "searchbox", "combobox", "option", "cell", "checkbox"})
CONTAINER_ROLES = frozenset({"navigation", "main", "dialog", "table", "rowgroup", "row", "listbox", "paragraph",
                             "generic"})


@dataclass(eq=False)
class Node:
    tag: str
    attrs: dict[str, str]
    parent: Node | None = None
    children: list[Node | str] = field(default_factory=list)
    ref: str | None = None
    value: str = ""

    def walk(self) -> Iterator[Node]:
        """This node and every element below it, depth first."""
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.walk()

    def text(self) -> str:
        """The node's text, whitespace collapsed."""
        parts: list[str] = []
        for child in self.children:
            parts.append(child if isinstance(child, str) else child.text())
        return " ".join(" ".join(parts).split())

    @property
    def hidden(self) -> bool:
        """Whether the node or an ancestor carries ``hidden``."""
        node: Node | None = self
        while node is not None:
            if "hidden" in node.attrs:
                return True
            node = node.parent
        return False

    @property
    def disabled(self) -> bool:
        return "disabled" in self.attrs

    @property
    def role(self) -> str | None:
        """The ARIA role: the ``role`` attribute, else the one its tag implies (None for a plain element)."""
        explicit = self.attrs.get("role")
        if explicit:
            return explicit
        tag = self.tag
        if tag == "a" and "href" in self.attrs:
            return "link"
        if tag == "button":
            return "button"
        if tag == "input":
            kind = self.attrs.get("type", "text")
            return {"search": "searchbox", "checkbox": "checkbox"}.get(kind, "textbox") if kind != "hidden" else None
        if tag in ("textarea",):
            return "textbox"
        if tag == "select":
            return "combobox"
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            return "heading"
        return {"nav": "navigation", "main": "main", "table": "table", "tbody": "rowgroup", "thead": "rowgroup",
                "tr": "row", "td": "cell", "th": "columnheader", "p": "paragraph"}.get(tag)


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self._open = self.root
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in SKIP:
            self._skip += 1
            return
        if tag == "title":
            self._in_title = True
            return
        if self._skip:
            return
        node = Node(tag, {k: v if v is not None else "" for k, v in attrs}, parent=self._open)
        self._open.children.append(node)
        if tag not in VOID:
            self._open = node

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if tag == "title":
            self._in_title = False
            return
        node: Node | None = self._open
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self._open = node.parent

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data.strip()
        elif not self._skip and data.strip():
            self._open.children.append(" ".join(data.split()))


class Page:
    """One loaded page: its DOM model with refs, and the state the hooks change."""

    def __init__(self, page_id: str, url: str, html: str, first_ref: int = 1) -> None:
        builder = _TreeBuilder()
        builder.feed(html)
        builder.close()
        self.id, self.url, self.title, self.root = page_id, url, builder.title, builder.root
        self.next_ref = first_ref
        for node in self.root.walk():
            self._number(node)
            if node.tag == "select":
                chosen = next((o for o in node.walk() if o.tag == "option" and "selected" in o.attrs), None)
                chosen = chosen or next((o for o in node.walk() if o.tag == "option"), None)
                node.value = chosen.text() if chosen else ""

    def _number(self, node: Node) -> None:
        if node.role in REF_ROLES:
            node.ref = f"e{self.next_ref}"
            self.next_ref += 1

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    def by_id(self, element_id: str | None) -> Node | None:
        """The element with ``id`` ``element_id``, or None."""
        return next((n for n in self.root.walk() if element_id and n.attrs.get("id") == element_id), None)

    def by_ref(self, ref: str) -> Node | None:
        """The element numbered ``ref`` (``eN``) in the page's snapshot, or None."""
        return next((n for n in self.root.walk() if n.ref == ref), None)

    def name_of(self, node: Node) -> str:
        """The accessible name: aria-label, aria-labelledby, a ``<label for>``, else the text."""
        if node.attrs.get("aria-label"):
            return node.attrs["aria-label"]
        labelled = self.by_id(node.attrs.get("aria-labelledby"))
        if labelled is not None:
            return labelled.text()
        element_id = node.attrs.get("id")
        if element_id:
            label = next((n for n in self.root.walk() if n.tag == "label" and n.attrs.get("for") == element_id), None)
            if label is not None:
                return label.text()
        if node.role in ("textbox", "searchbox") or node.tag == "select":
            return node.attrs.get("placeholder", "")
        return node.text()

    def value_of(self, node: Node) -> str:
        """What a snapshot shows as the element's value: a field's value, else its text."""
        if node.tag in ("input", "textarea", "select"):
            return node.value
        if node.role == "combobox":
            return node.value or node.text()
        return node.text()


@dataclass
class Redactions:
    """The markers of one rendering: value → marker, marker → the node holding it."""

    by_value: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)

    def apply(self, text: str) -> str:
        """``text`` with every secret value replaced by its marker."""
        for value, marker in self.by_value.items():
            text = text.replace(value, marker)
        return text


def _secret_kind(label: str) -> str:
    match = SECRET_LABEL.search(label)
    word = re.sub(r"[^a-z]+", "_", match.group(0).lower()).strip("_") if match else "secret"
    return {"api_key": "api_key", "apikey": "api_key"}.get(word, word)


class Browser:
    """The agent's browser for one build: tabs over the fixture's pages, the secrets buffer."""

    def __init__(self, page_port: int, create_credential: CreateCredential, *, redact_secrets: bool = True,
                 require_approval: bool = True) -> None:
        self._http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{page_port}", timeout=15.0, follow_redirects=False)
        self._save_credential = create_credential
        self.redact_secrets = redact_secrets
        self.require_approval = require_approval
        self.pages: dict[str, Page] = {}
        self.active: str | None = None
        self._tabs = 0
        self._buffer: dict[str, dict[str, str]] = {}

    async def aclose(self) -> None:
        """Forget the secrets buffer and close the connection to the fixture's pages."""
        self._buffer.clear()
        await self._http.aclose()

    # -- the tools ------------------------------------------------------------------------------

    async def call(self, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Run one tool; ``(payload, is_error)``. An unknown tool or a bad argument is an error result."""
        handler = getattr(self, "_" + name.removeprefix("browser_"), None) if name.startswith("browser_") else None
        if handler is None or name not in TOOL_NAMES:
            return {"error": f"unknown tool {name}"}, True
        try:
            return await handler(args), False
        except ToolError as exc:
            return {"error": str(exc)}, True
        except httpx.HTTPError as exc:
            return {"error": f"{name} failed: {type(exc).__name__}"}, True

    async def _tab_open(self, args: dict[str, Any]) -> dict[str, Any]:
        self._tabs += 1
        page_id = f"tab-{self._tabs}"
        page = await self._load(page_id, str(args.get("url") or "about:blank"))
        self.active = page_id
        return {"pageId": page_id, "title": page.title, "url": page.url, "snapshot": self.snapshot(page)}

    async def _navigate(self, args: dict[str, Any]) -> dict[str, Any]:
        url = str(args.get("url") or "")
        if not url:
            raise ToolError("url is required")
        page = await self._load(self._page(args).id, url)
        return {"title": page.title, "url": page.url, "status": 200, "snapshot": self.snapshot(page)}

    async def _snapshot(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"snapshot": self.snapshot(self._page(args), interactive=args.get("interactive", True) is not False)}

    async def _content(self, args: dict[str, Any]) -> dict[str, Any]:
        page = self._page(args)
        return {"title": page.title, "url": page.url, "content": self.content(page)}

    async def _click(self, args: dict[str, Any]) -> dict[str, Any]:
        page = self._page(args)
        node = self._target(page, args)
        if node.disabled:
            raise ToolError(f"element {node.ref} is disabled: it cannot be clicked until it is enabled")
        await self._activate(page, node)
        page = self._page(args)  # a link click replaced the page
        return self._with_snapshot({"clicked": True, "ref": node.ref}, page, args)

    async def _type(self, args: dict[str, Any]) -> dict[str, Any]:
        page = self._page(args)
        node = self._target(page, args)
        if node.role not in ("textbox", "searchbox") or "readonly" in node.attrs or node.disabled:
            raise ToolError(f"element {node.ref} is not an editable text field")
        text = str(args.get("text", ""))
        node.value = text if args.get("clear") or args.get("mode") == "paste" or not node.value else node.value + text
        return self._with_snapshot({"typed": True, "ref": node.ref, "text": text}, page, args)

    async def _select(self, args: dict[str, Any]) -> dict[str, Any]:
        page = self._page(args)
        node = self._target(page, args)
        wanted = [str(v) for v in args.get("values") or []]
        options = [o.text() for o in node.walk() if o.tag == "option"]
        if node.tag != "select" or not wanted or wanted[0] not in options:
            raise ToolError(f"no option {wanted[:1]} in element {node.ref} (options: {', '.join(options)})")
        node.value = wanted[0]
        return self._with_snapshot({"selected": [wanted[0]]}, page, args)

    async def _capture_secret(self, args: dict[str, Any]) -> dict[str, Any]:
        key, name = str(args.get("credentialsKey") or ""), str(args.get("field") or "")
        element = args.get("element") if isinstance(args.get("element"), dict) else {}
        if not key or not name or not element:
            raise ToolError("credentialsKey, field and element are required")
        page = self._page(args)
        if "redactedKey" in element:
            marker = str(element["redactedKey"])
            node = self._redactions(page).nodes.get(marker.split("@", 1)[0])
            if node is None:
                raise ToolError(f'The marker "{marker}" was not found.')
        else:
            node = self._target(page, {"element": element})
        value = page.value_of(node)
        if not value:
            raise ToolError(f'The element for "{name}" holds no value. Take a fresh snapshot and capture the element '
                            "that shows the secret.")
        if MARKER.search(value):
            raise ToolError(f'The value read for "{name}" is a redaction marker, not a secret. Take a fresh snapshot '
                            "and capture the element that holds the value.")
        self._buffer.setdefault(key, {})[name] = value
        return {"ok": True, "fieldsCaptured": [name]}

    async def _create_credential(self, args: dict[str, Any]) -> dict[str, Any]:
        key, ctype, name = (str(args.get(k) or "") for k in ("credentialsKey", "type", "name"))
        if not key or not ctype or not name:
            raise ToolError("credentialsKey, type and name are required")
        decision = args.get("_confirmation")
        if self.require_approval and decision is None:
            raise ToolError(CONFIRMATION_PREFIX + json.dumps({
                "toolGroup": "browser", "resource": "credentials",
                "description": f'Create credential "{name}" ({ctype})', "options": ["denyOnce", "allowOnce"]}))
        if decision is not None and decision not in ("allowOnce", "allowForSession"):
            raise ToolError("Credential creation was denied by the user")
        captured = self._buffer.get(key)
        if not captured:
            raise ToolError(f'No captured fields found for credentialsKey "{key}". Call browser_capture_secret first.')
        resolved = _resolve(args.get("resolveData") or {}, captured)
        literal = args.get("data")
        data = _merge(literal if isinstance(literal, dict) else {}, resolved)
        project = args.get("projectId")
        credential_id = await self._save_credential(name, ctype, data, str(project) if project else None)
        if args.get("clear", True) is not False:
            self._buffer.pop(key, None)
        return {"ok": True, "credentialId": credential_id}

    # -- page state -----------------------------------------------------------------------------

    def _page(self, args: dict[str, Any]) -> Page:
        page_id = str(args.get("pageId") or self.active or "")
        if page_id not in self.pages:
            raise ToolError("no page is open: call browser_tab_open first" if not self.pages
                            else f"unknown pageId {page_id!r}")
        return self.pages[page_id]

    def _target(self, page: Page, args: dict[str, Any]) -> Node:
        element = args.get("element")
        if not isinstance(element, dict) or "ref" not in element:
            raise ToolError("element must be {\"ref\": \"eN\"} from browser_snapshot (selectors are not supported "
                            "by this browser)")
        node = page.by_ref(str(element["ref"]).lstrip("@"))
        if node is None or node.hidden:
            raise ToolError(f"no visible element with ref {element['ref']!r}: take a fresh snapshot")
        return node

    def _with_snapshot(self, payload: dict[str, Any], page: Page, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("snapshot") in ("interactive", "non-interactive"):
            payload["snapshot"] = self.snapshot(page, interactive=args["snapshot"] == "interactive")
        return payload

    async def _load(self, page_id: str, url: str) -> Page:
        if url == "about:blank":
            page = Page(page_id, url, "<html><head><title></title></head><body></body></html>")
        else:
            parts = urlsplit(url if "://" in url else f"https://{url}")
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            response = await self._http.get(target, headers={"Host": parts.netloc})
            page = Page(page_id, parts.geturl(), response.text)
        self.pages[page_id] = page
        return page

    async def _activate(self, page: Page, node: Node) -> None:
        """What a click does: follow a link, or run the element's hooks."""
        attrs = node.attrs
        if node.role == "link" and attrs.get("href"):
            await self._load(page.id, urljoin(page.url, attrs["href"]))
            return
        if attrs.get("data-action") == "create-key":
            await self._create_key(page, node)
            return
        if "data-listbox" in attrs:
            listbox = page.by_id(attrs["data-listbox"])
            if listbox is not None:
                listbox.attrs.pop("hidden", None)
        if "data-selects" in attrs:
            box = page.by_id(attrs["data-selects"])
            if box is not None:
                box.value = node.text()
                listbox = node.parent
                while listbox is not None and listbox.attrs.get("role") != "listbox":
                    listbox = listbox.parent
                if listbox is not None:
                    listbox.attrs["hidden"] = ""
                for dependent in page.root.walk():
                    if dependent.attrs.get("data-enabled-by") == box.attrs.get("id"):
                        dependent.attrs.pop("disabled", None)
        _open_and_close(page, attrs)

    async def _create_key(self, page: Page, node: Node) -> None:
        attrs = node.attrs

        def field_value(hook: str) -> str:
            source = page.by_id(attrs.get(hook))
            return page.value_of(source) if source is not None else ""

        body = {"name": field_value("data-name-from") or "Untitled", "workspace": field_value("data-workspace-from"),
                "expires": field_value("data-expires-from")}
        response = await self._http.post(MINT_PATH, json=body, headers={"Host": page.host})
        key = str(response.json().get("key") or "")
        reveal = page.by_id(attrs.get("data-reveal"))
        if reveal is not None:
            reveal.value = key
        _open_and_close(page, attrs)
        rows = page.by_id(attrs.get("data-prepends"))
        if rows is not None and key:
            row = Node("tr", {}, parent=rows)
            shown_key = f"{key[:16]}...{key[-4:]}"
            for text in (shown_key, body["workspace"], "You", "Today", body["expires"], "Never"):
                cell = Node("td", {}, parent=row, children=[text])
                page._number(cell)
                row.children.append(cell)
            rows.children.insert(0, row)
        counter = page.by_id(attrs.get("data-counter"))
        if counter is not None and counter.text().isdigit():
            counter.children = [str(int(counter.text()) + 1)]

    # -- rendering ------------------------------------------------------------------------------

    def _redactions(self, page: Page) -> Redactions:
        found = Redactions()
        if not self.redact_secrets:
            return found
        counts: dict[str, int] = {}
        for node in page.root.walk():
            if node.role not in ("textbox", "searchbox") or not node.value or node.hidden:
                continue
            label = page.name_of(node)
            in_reveal = "readonly" in node.attrs and any(
                a.attrs.get("role") == "dialog" and REVEAL_PHRASE.search(a.text()) for a in _ancestors(node))
            if not (SECRET_LABEL.search(label) or in_reveal) or node.value in found.by_value:
                continue
            kind = _secret_kind(label)
            counts[kind] = counts.get(kind, 0) + 1
            marker = f"[REDACTED:{kind}:{counts[kind]}]"
            found.by_value[node.value] = marker
            found.nodes[marker] = node
        return found

    def snapshot(self, page: Page, *, interactive: bool = True) -> str:
        """The page's outline (``interactive``: with refs), secrets redacted."""
        redactions = self._redactions(page)
        lines: list[str] = []
        for child in page.root.children:
            _render(page, child, 0, lines, interactive)
        text = "\n".join(lines) or "(empty page)"
        return redactions.apply(text)

    def content(self, page: Page) -> str:
        """The page's visible text as markdown-ish lines, secrets redacted."""
        lines: list[str] = [f"# {page.title}"] if page.title else []
        for node in page.root.walk():
            if node.hidden or node is page.root:
                continue
            role = node.role
            if role == "heading":
                lines.append("#" * int(node.tag[1]) + " " + node.text())
            elif role == "paragraph":
                lines.append(node.text())
            elif role == "row":
                lines.append("| " + " | ".join(c.text() if isinstance(c, Node) else c for c in node.children) + " |")
            elif role in ("textbox", "searchbox") and node.value:
                lines.append(f"{page.name_of(node)}: {node.value}")
        return self._redactions(page).apply("\n".join(lines))


def _open_and_close(page: Page, attrs: dict[str, str]) -> None:
    """The ``data-opens`` / ``data-hides`` hooks: show or hide the elements they name by id."""
    for hook, shown in (("data-opens", True), ("data-hides", False)):
        for element_id in attrs.get(hook, "").split():
            target = page.by_id(element_id)
            if target is not None and shown:
                target.attrs.pop("hidden", None)
            elif target is not None:
                target.attrs["hidden"] = ""


def _ancestors(node: Node) -> Iterator[Node]:
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def _render(page: Page, item: Node | str, depth: int, lines: list[str], interactive: bool) -> None:
    pad = "  " * depth
    if isinstance(item, str):
        lines.append(f"{pad}- text: {item}")
        return
    if item.hidden:
        return
    role = item.role
    if role is None or role == "generic":  # no role of its own: its children speak for it
        for child in item.children:
            _render(page, child, depth, lines, interactive)
        return
    name = page.name_of(item) if role not in CONTAINER_ROLES or role == "dialog" else item.attrs.get("aria-label", "")
    head = f"{pad}- {role}" + (f' "{name}"' if name else "")
    if role == "heading":
        head += f" [level={item.tag[1]}]"
    if item.disabled:
        head += " [disabled]"
    if "readonly" in item.attrs:
        head += " [readonly]"
    if interactive and item.ref:
        head += f" [ref={item.ref}]"
    if role in ("textbox", "searchbox", "combobox"):
        value = page.value_of(item)
        lines.append(head + (f": {value}" if value else ""))
        return
    if role in CONTAINER_ROLES and role != "dialog" and all(isinstance(c, str) for c in item.children):
        lines.append(head + (f": {item.text()}" if item.text() else ""))
        return
    if role in CONTAINER_ROLES or role == "dialog":
        lines.append(head + ":")
        for child in item.children:
            _render(page, child, depth + 1, lines, interactive)
        return
    lines.append(head)


def _resolve(resolve_data: Any, captured: dict[str, str]) -> dict[str, Any]:
    if not isinstance(resolve_data, dict):
        raise ToolError("resolveData must be an object")
    out: dict[str, Any] = {}
    for key, value in resolve_data.items():
        if isinstance(value, dict):
            out[key] = _resolve(value, captured)
        elif isinstance(value, str):
            if value not in captured:
                raise ToolError(f'resolveData references field "{value}" which was not captured. Call '
                                f'browser_capture_secret with field="{value}" first.')
            out[key] = captured[value]
        else:
            raise ToolError(f'resolveData leaf values must be strings (field names). Got {type(value).__name__} '
                            f'for key "{key}".')
    return out


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class ToolError(BuildError):
    """A tool call the browser refuses (the agent sees ``{"error": …}``)."""


_ELEMENT = {"type": "object", "properties": {"ref": {"type": "string", "description": "Element ref from browser_snapshot"}},
            "required": ["ref"]}
_PAGE = {"type": "string", "description": "Target tab id; defaults to the active tab"}
_SNAP = {"type": "string", "enum": ["interactive", "non-interactive"],
         "description": "Return a fresh snapshot after the action"}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return {"name": name, "description": description, "inputSchema": schema, "annotations": {"category": "browser"}}


#: What the gateway advertises (``McpTool``s, category ``browser``): argument shapes as mcp-browser's.
TOOLS: list[dict[str, Any]] = [
    _tool("browser_tab_open", "Open a new browser tab, optionally at a URL; returns its page id and a snapshot.",
          {"url": {"type": "string", "description": "URL to open (default about:blank)"}}),
    _tool("browser_navigate", "Navigate the tab to a URL; returns the title and a snapshot.",
          {"url": {"type": "string"}, "pageId": _PAGE}, ["url"]),
    _tool("browser_snapshot", "The page's accessibility outline with element refs (secrets shown as redaction "
          "markers). Use interactive=false to see markers of secrets that are not in interactive elements.",
          {"interactive": {"type": "boolean"}, "pageId": _PAGE}),
    _tool("browser_content", "The page's visible text as markdown.", {"pageId": _PAGE}),
    _tool("browser_click", "Click an element by ref.", {"element": _ELEMENT, "pageId": _PAGE, "snapshot": _SNAP},
          ["element"]),
    _tool("browser_type", "Type text into an element by ref.",
          {"element": _ELEMENT, "text": {"type": "string"}, "clear": {"type": "boolean"}, "pageId": _PAGE,
           "snapshot": _SNAP}, ["element", "text"]),
    _tool("browser_select", "Select an option of a native select element by ref.",
          {"element": _ELEMENT, "values": {"type": "array", "items": {"type": "string"}}, "pageId": _PAGE,
           "snapshot": _SNAP}, ["element", "values"]),
    _tool("browser_capture_secret", "Read a secret from an element (a ref, or a redaction marker from a snapshot) "
          "into the session buffer. The value is never returned to the model.",
          {"credentialsKey": {"type": "string"}, "field": {"type": "string"}, "pageId": _PAGE,
           "element": {"type": "object", "properties": {"ref": {"type": "string"}, "redactedKey": {"type": "string"}}}},
          ["credentialsKey", "field", "element"]),
    _tool("browser_create_credential", "Create an n8n credential from secrets captured with browser_capture_secret.",
          {"credentialsKey": {"type": "string"}, "type": {"type": "string"}, "name": {"type": "string"},
           "data": {"type": "object"}, "resolveData": {"type": "object"}, "projectId": {"type": "string"},
           "clear": {"type": "boolean"}}, ["credentialsKey", "type", "name"]),
]
TOOL_NAMES = frozenset(t["name"] for t in TOOLS)
