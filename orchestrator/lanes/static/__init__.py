"""The ``static`` lane backend: lanes someone else runs, reached by URL and owner login."""
