"""Per-GPU-type cost models: hardware catalog, compute, communication, memory, profiles.

Knows nothing of `planner`: it answers questions in plain terms (FLOPs, bytes, a GPU type,
a link, a collective over n peers).
"""
