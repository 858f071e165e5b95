"""The claude builders: ``mcp`` (``claude -p`` on the lane's MCP server) and ``remote`` (the same on a build runner)."""
