"""The embedded scripted Anthropic-compatible model: offline runs (no key, no internet) and tests."""
