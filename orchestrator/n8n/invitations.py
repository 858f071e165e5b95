"""n8n's invitations: the rate limits of ``POST /rest/invitations`` and reading its answer into
:class:`Invitation` rows (one per invited email, in the order asked). The request itself is
:meth:`orchestrator.n8n.rest.N8nSession.invite`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

from orchestrator.n8n.errors import N8nError
from orchestrator.redact import register_secret

#: ``POST /rest/invitations`` is limited to 10 requests per client IP per 5 minutes
#: (``InvitationController``: ``ipRateLimit: { limit: 10 }`` with RateLimitService's default
#: ``windowMs`` of 5 minutes), and ``/invitations/accept`` to 100 per minute. n8n only installs IP
#: rate limits when ``NODE_ENV=production`` (the docker image sets it; a plain ``n8n start`` does
#: not). Batching 8 emails per request gives 80 invitations per window.
INVITE_RATE_LIMIT = 10
INVITE_RATE_WINDOW_S = 300.0
INVITE_BATCH_SIZE = 8


@dataclass(frozen=True)
class Invitation:
    """A pending member. ``token`` (and the URL that carries it) are secrets."""

    email: str
    user_id: str
    token: str = field(repr=False)
    accept_url: str = field(repr=False)


def invitations_from(path: str, batch: list[str], data: Any) -> list[Invitation]:
    """The invitations of one ``POST /rest/invitations`` answer, in the order of ``batch``; every
    token is registered as a secret. A failed row, a row without an invite link (the lane sends
    invitations by email) or an email that did not come back is an :class:`N8nError`."""
    rows: list[Invitation] = []
    for item in data or []:
        user = item.get("user") or {}
        email = str(user.get("email", ""))
        if item.get("error"):
            raise N8nError("POST", path, 200, f"invitation for {email} failed: {item['error']}")
        url = user.get("inviteAcceptUrl")
        token = (parse_qs(urlparse(url).query).get("token") or [""])[0] if url else ""
        if not token:
            raise N8nError(
                "POST",
                path,
                200,
                f"no invite link for {email}: the lane sends invitations by email "
                "(SMTP configured or N8N_INVITE_LINKS_EMAIL_ONLY set); eval lanes must have neither",
            )
        register_secret(token)
        rows.append(Invitation(email=email, user_id=str(user.get("id", "")), token=token, accept_url=str(url)))
    by_email = {r.email.lower(): r for r in rows}  # n8n answers in no particular order
    missing = [e for e in batch if e.lower() not in by_email]
    if missing:
        raise N8nError("POST", path, 200, f"no invitation came back for {', '.join(missing)}")
    return [by_email[e.lower()] for e in batch]
