"""KV caches and their committed / dead bookkeeping.

:mod:`.dynamic` is the target's ``DynamicCache`` with rejected entries masked (and the per-layer
surgery: ``cache_length``, ``crop``, ``keep_selected``), :mod:`.slots` the fixed-size cache of the
fast path, :mod:`.rows` the rectangular cache of a batch (a live set per row), and
:mod:`.entry_book` the book of which entries are committed that the first two share.
"""
