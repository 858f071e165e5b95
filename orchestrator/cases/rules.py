"""Rules on a case's text that every model of a case shares: director notes and agent slugs.

The load-time checks that span several fields live beside the model they check and return
:class:`~orchestrator.cases.issues.Violation` s located relative to it (``check_seed_message`` and
``check_inline_seed`` in ``seed.py``, ``check_case`` in ``model.py``); field-local rules (id length,
folder-name shape, closed credential types, retired keys) live on the fields themselves. This module
imports no model of a case, so each model may use it.
"""

from __future__ import annotations

import re

#: A director note: ``[...]`` whose content starts with a letter and holds a space, so expression
#: syntax (``$json["a b"]``), lists (``[1, 2]``) and ``[placeholder]`` words are not mistaken for one.
_DIRECTOR_NOTE = re.compile(r"\[([A-Za-z][^\[\]]*\s[^\[\]]*)\]")
_SLUG_SEPARATORS = re.compile(r"[^a-z0-9]+")


def director_notes(text: str) -> list[str]:
    """The ``[bracketed]`` stage directions in a turn's text (brackets stripped)."""
    return [m.group(1).strip() for m in _DIRECTOR_NOTE.finditer(text)]


def strip_director_notes(text: str) -> str:
    """The words a user says: the turn's text with its stage directions removed."""
    return re.sub(r"[ \t]+\n", "\n", _DIRECTOR_NOTE.sub("", text)).strip()


def agent_slug(name: str) -> str:
    """The addressing key n8n derives from an agent name (``Support Bot`` → ``support-bot``)."""
    return _SLUG_SEPARATORS.sub("-", name.lower()).strip("-")
