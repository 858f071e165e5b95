"""The ``process`` lane backend: one local n8n process per lane, and its on-demand task runner launcher."""
