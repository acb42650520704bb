"""Continuity (issue 24): the person's working memory (current focus) and decision log.

``rules`` finds a focus or a decision in a message without a model; ``models`` is
the tables (migration 0023); ``book`` every read and write (chat, panel, CLI);
``stages`` the two cached-prefix blocks and the after-turn listener; ``cli`` the
``agentgw working-memory`` and ``agentgw decision`` commands.
"""
