"""Static shapes: the fast path's fixed-size forwards and the regions compiled around them.

:mod:`.fast_path` runs the target over a slot cache in shape buckets, :mod:`.draft_forwards` does the
same for a draft model, :mod:`.regions` marks the code compiled as one region each, and
:mod:`.compile_cache` keeps what ``torch.compile`` built.
"""
