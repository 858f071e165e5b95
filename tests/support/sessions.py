"""A session for code that takes one but must not use it on the path a test drives.

Its client points at the discard port on loopback (nothing answers there) and it carries no cookie,
so a call the test did not expect fails at once instead of reaching a lane.
"""

from __future__ import annotations

from orchestrator.n8n.rest import N8nClient, N8nSession


def unused_session() -> N8nSession:
    return N8nSession(N8nClient("http://127.0.0.1:9"), "", {})
