"""``orchestrator routing`` (alias ``discovery``): the seed's routing-mode discovery eval on lanes."""
