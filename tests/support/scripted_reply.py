"""Reading what a script of the scripted model answered, as a test expects it.

A script returns any ``Action`` (a reply, an HTTP error, a hang, a malformed body) and a reply holds
text and tool-use blocks. A test that expects one kind says so here: the call narrows the type and
fails naming what came instead.
"""

from __future__ import annotations

from orchestrator.scripted.replies import Action, Block, Reply, TextBlock, ToolUseBlock


def reply_of(action: Action) -> Reply:
    """The action, which the test expects to be a reply."""
    assert isinstance(action, Reply), action
    return action


def text_of(block: Block) -> str:
    """The text of a block the test expects to be text."""
    assert isinstance(block, TextBlock), block
    return block.text


def tool_of(block: Block) -> ToolUseBlock:
    """A block the test expects to be a tool call."""
    assert isinstance(block, ToolUseBlock), block
    return block


def reply_text(action: Action, index: int = 0) -> str:
    """The text of the reply's block at ``index``."""
    return text_of(reply_of(action).blocks[index])


def reply_tool(action: Action, index: int = -1) -> ToolUseBlock:
    """The tool call at ``index`` of the reply (the last block by default)."""
    return tool_of(reply_of(action).blocks[index])
