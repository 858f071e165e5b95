"""``orchestrator mcp-manifest``: the seed's ``eval:build-mcp-manifest`` on the lane pool."""
