"""The seed's other harnesses, each a stage set on ``orchestrator run``'s lane pool.

Every harness runs through :class:`~orchestrator.run.pipeline.Run` with its own
:class:`~orchestrator.run.stages.Stages` — the same lanes, allocator, builders, ledger, clean-up and
metrics as ``orchestrator run`` — and changes only the stages it must:

==================  ============================  =================================================
command             package                       its stages
==================  ============================  =================================================
``pairwise``        :mod:`.pairwise`              examples loader, judge-panel verifier, the seed's
                                                  ``summary.json`` / ``results.jsonl`` / ``workflows/``
``pairwise-compare`` :mod:`.pairwise.compare`     (no lanes) the side-by-side page of two folders
``pairwise-upload`` :mod:`.pairwise.upload`       (no lanes) one LangSmith experiment from a folder
``routing``         :mod:`.routing`               ``route-*.json`` loader, the trial builder (a judge
                                                  stops each trial once the route is decided), route
                                                  verifier, ``routing-results.json`` / summary
``build-check``     :mod:`.build_check`           compatibility-corpus loader, binary-check verifier
``mcp-manifest``    :mod:`.mcp_manifest`          a verifier that keeps each build in the owner's
                                                  project, ``manifest.json`` + ``manifest-stats.json``
``merge``           :mod:`.merge`                 (no lanes) shards' ``eval-results.json`` into one
==================  ============================  =================================================

``docs/harnesses.md`` maps every flag of the seed's commands onto ours.
"""

#: the builder a harness drives unless ``--builder`` says otherwise: n8n's own agent over chat
CHAT_BUILDER = "instance-ai"
#: ``mcp-manifest``'s builder: ``claude -p`` over the lane's MCP server, as the seed's manifest builder
MCP_BUILDER = "mcp"
