"""The agents-exam tier's intent-classification preamble (our wording of n8n's rule).

n8n loads the ``agents-exam`` corpus (``data/agents-exam/index.ts``
``loadExamAgentEvalTestCasesWithFiles``) with a preamble prepended to each case's opening user
turn: the assistant is told not to build anything, to classify the request on two decisions —
``anchor`` (workflow-anchored / agent-anchored / needs-clarification / out-of-scope) and
``embeds_other`` (true / false / "n/a") — per part when the request holds several independent
automations, and to end its reply with a fenced ```` ```intent ```` JSON block, which
``build-expectations/intent.ts`` grades against the case's ``intentExpectation`` (here
:mod:`orchestrator.verify.intent`). The words below are ours; the vocabulary is n8n's, because the
grader parses it.
"""

from __future__ import annotations

#: The dataset (tier) whose cases get the preamble: the tier n8n loads from ``data/agents-exam/``.
INTENT_EXAM_DATASET = "agents-exam"

INTENT_PREAMBLE = "\n".join([
    "Please do not build, create or run anything for this message: no workflows, no agents, no executions. "
    "Loading skills to inform your answer is fine.",
    "What I want is a classification of the hypothetical request at the end of this message, on two decisions:",
    '1. anchor: which primitive owns the top-level control flow. "workflow-anchored" when the outer shell is a '
    "workflow graph and any LLM steps are bounded (classify, extract, summarize, one decision); "
    '"agent-anchored" when an agent decides the next step at runtime; "needs-clarification" when the request '
    'leaves an anchor-deciding axis open; "out-of-scope" when it is not a build request at all (for example a '
    "question about the product).",
    "2. embeds_other: whether the other primitive sits inside it (an agent as one step of a workflow, or a "
    'workflow used as a tool by an agent): true or false, and "n/a" for needs-clarification and out-of-scope.',
    "Classify each independent automation separately when the request holds more than one.",
    "Ask me nothing: if clarification would be needed, say so and name what is missing.",
    "Justify the classification in a few sentences, then end the reply with a code block fenced as `intent` "
    "that holds only JSON of this shape:",
    "```intent",
    '{"anchor": "workflow-anchored" | "agent-anchored" | "needs-clarification" | "out-of-scope", '
    '"embeds_other": true | false | "n/a"}',
    "```",
    'For several independent automations, write {"parts": [{"anchor": ..., "embeds_other": ...}, ...]} instead, '
    "one entry per automation in the order the request names them.",
    "The request:",
])


def with_intent_preamble(text: str) -> str:
    """The opening turn as an agents-exam case sends it: the preamble, then the authored text."""
    return f"{INTENT_PREAMBLE}\n{text}"
