"""What a run recorded, and what can be read from it, torch-free.

Imports :mod:`dynatree_core.policy` (and the standard library, numpy); never torch (the
``torch-free`` contract), so :mod:`dynatree_viz` renders saved traces without it. Modules:
``trace`` (:class:`Trace`, :class:`IterationRecord`, JSON round trip: the contract between the
engine and the views), ``metrics`` (per-run metrics and the speed explanation), ``result``
(:class:`GenerationResult`), ``oracle`` (the best tree of the same size, replayed), ``reliability``
(how well draft probabilities predict acceptance, per depth).
"""
