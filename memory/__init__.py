"""The memory layer: items, embeddings, indexes, the Memory Pack, decay."""
