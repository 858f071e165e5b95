"""End-to-end tests: whole runs and CLI commands on real lanes (n8n, and the real claude CLI where a
builder needs it), the scripted model the only stand-in."""
