"""What the tests share: fakes (the Kubernetes API server, LangSmith), lanes and the scripted model for a
session, tool checks, result factories. Imported as ``support.<module>`` (``tests/`` is on ``sys.path``:
pytest puts it there, as its conftest.py is in no package)."""
