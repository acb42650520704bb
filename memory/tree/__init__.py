"""The memory tree per person (issue 23): items → clusters → topics → root.

``build`` clusters and summarises (pure, runs in a worker thread), ``store``
keeps the nodes and every version of their summaries, ``service`` updates the
tree incrementally or rebuilds it, and ``pack`` packs it for broad questions.
"""
