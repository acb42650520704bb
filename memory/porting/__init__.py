"""Memory a person can read and move: export, import, search and show from the shell.

``export`` writes readable Markdown and a lossless ``agentgw.jsonl``;
``import_agentgw`` reads that record back; ``openclaw``, ``chatgpt`` and
``claude`` read other tools' exports into conversations that go through the
normal ingest (``conversations``); ``lookup`` is ``memory search`` / ``show``;
``cli`` registers the ``agentgw memory`` commands.
"""
