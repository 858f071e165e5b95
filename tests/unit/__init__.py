"""Tests of one package or module each, in the folder that mirrors it under ``orchestrator/`` (tests of a
top-level module, and of the package as a whole, sit here). Markers say which need real lanes, the claude
CLI, dockerd or Chromium."""
