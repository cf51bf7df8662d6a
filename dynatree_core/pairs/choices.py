"""Names of the pairs one can ask for, torch-free (the command line lists them without importing torch)."""

#: what ``ModelPair.default(draft=...)``, ``--drafter`` and ``PairSpec.drafter`` take: a shipped
#: draft of the embedded pair (``auto``: the fastest measured), model-free prompt lookup, or a draft
#: with prompt lookup mixed in (:class:`~dynatree_core.drafters.LookupMix`)
PAIR_DRAFTS = ("auto", "feature", "model", "lookup", "feature+lookup", "model+lookup")
#: test-only pairs (:mod:`dynatree_core.pairs.tiny`): random tiny models, built in milliseconds
TINY_TARGETS = ("tiny-llama", "tiny-gpt_neox", "tiny-llama-feature")
#: the draft name of a pair drafting by model-free prompt lookup
LOOKUP_DRAFT_NAME = "prompt-lookup"
