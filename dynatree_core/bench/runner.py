"""One runner for ``bench`` and every sweep: data -> prompts -> protocol -> result document.

An :class:`Experiment` is a list of :class:`~dynatree_core.bench.protocol.RunPoint` plus the
protocol settings (datasets, N prompts, W warmup, default L_max per dataset, seed). Everything
cheap is validated first (:func:`load_corpora`, :func:`~.protocol.check_lengths`); then
:func:`run_experiment` selects the prompts, runs the points and returns the JSON document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .data import Corpus, Prompt, hf_tokenize, load_corpus, select_prompts
from .protocol import RunPoint, check_lengths, run_points
from .results import EOS_NOTE, build_result, new_run_id


@dataclass
class Experiment:
    """What to run. ``max_prompt_len`` maps each dataset to its default L_max."""

    kind: str
    points: list[RunPoint]
    datasets: list[str]
    num_prompts: int
    warmup: int
    max_prompt_len: dict[str, int]
    seed: int = 0
    data_dir: str | None = None
    data_source: str = "auto"
    paper_protocol: bool = False
    #: decode past the models' stated context window (see ``generate(allow_long_context=)``)
    allow_long_context: bool = False
    sweep: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Check the protocol numbers (N, W, T, L_max) before anything is loaded."""
        if self.num_prompts < 1:
            raise ValueError(f"--num-prompts (N) must be >= 1, got {self.num_prompts}")
        if not 0 <= self.warmup < self.num_prompts:
            raise ValueError(f"--warmup (W) must be in [0, N - 1] = [0, {self.num_prompts - 1}], got {self.warmup}")
        for p in self.points:
            if p.max_new_tokens < 1:
                raise ValueError(f"--max-new-tokens (T) must be >= 1, got {p.max_new_tokens}")
            for ds in self.datasets:
                if p.l_max(ds, self.max_prompt_len) < 1:
                    raise ValueError(f"--max-prompt-len (L_max) must be >= 1, got {p.l_max(ds, self.max_prompt_len)}")

    def l_max_values(self, dataset: str) -> list[int]:
        return sorted({p.l_max(dataset, self.max_prompt_len) for p in self.points})


def load_corpora(exp: Experiment) -> dict[str, Corpus]:
    """Read every dataset's text (raises DataError naming where it looked)."""
    return {ds: load_corpus(ds, exp.data_dir, exp.data_source) for ds in exp.datasets}


def run_experiment(pair: Any, exp: Experiment, corpora: dict[str, Corpus], progress: bool = True) -> dict[str, Any]:
    """Select prompts, run every point and assemble the result document (not yet written)."""
    exp.validate()
    check_lengths(pair, exp.points, exp.datasets, exp.max_prompt_len, exp.allow_long_context)
    tokenize = hf_tokenize(pair.tokenizer)
    cache: dict[tuple[str, int], list[Prompt]] = {}
    warnings: list[str] = []

    def prompts_for(ds: str, l_max: int) -> list[Prompt]:
        if (ds, l_max) not in cache:
            ps, w = select_prompts(corpora[ds], tokenize, exp.num_prompts, l_max, seed=exp.seed)
            cache[ds, l_max] = ps
            warnings.extend(w)
        return cache[ds, l_max]

    for ds in exp.datasets:  # select everything up front: data problems surface before decoding
        for l_max in exp.l_max_values(ds):
            prompts_for(ds, l_max)
    rows = run_points(pair, exp.points, exp.datasets, prompts_for, exp.max_prompt_len, exp.warmup, progress,
                      allow_long_context=exp.allow_long_context)
    specs: dict[str, dict[str, Any]] = {}
    for p in exp.points:
        specs.setdefault(p.spec.label, p.spec.to_dict())
    protocol = {
        "datasets": exp.datasets, "num_prompts": exp.num_prompts, "warmup": exp.warmup,
        "max_new_tokens": sorted({p.max_new_tokens for p in exp.points}),
        "max_prompt_len": {ds: exp.l_max_values(ds) for ds in exp.datasets},
        "seed": exp.seed, "greedy": True, "ignore_eos": True, "eos_note": EOS_NOTE,
        "history_carried_across_prompts": True, "paper_protocol": exp.paper_protocol,
        "allow_long_context": exp.allow_long_context, **exp.extra,
    }
    models = {"target": pair.target_name, "draft": pair.draft_name, "drafter": _drafter_settings(pair),
              "target_params": sum(p.numel() for p in pair.target.parameters()),
              "draft_params": sum(p.numel() for p in pair.draft.parameters()) if pair.draft is not None else None}
    data = {ds: {"origin": c.origin, "location": c.location, "documents": len(c.documents), "description": c.describe()}
            for ds, c in corpora.items()}
    prompts = [{**p.record()} for key in sorted(cache) for p in cache[key]]
    return build_result(kind=exp.kind, run_id=new_run_id(), protocol=protocol, methods=list(specs.values()),
                        models=models, device=str(pair.device), dtype=str(pair.dtype).replace("torch.", ""),
                        data=data, prompts=prompts, rows=rows, warnings=warnings, sweep=exp.sweep)


def _drafter_settings(pair: Any) -> dict[str, Any] | None:
    """Which drafter the pair's draft gives (kind and settings), as recorded in every result."""
    if pair.draft is None:
        return None
    from ..drafters import make_drafter

    d = make_drafter(pair.draft, top_k=1).settings()
    d.pop("top_k", None)  # set per method by the engine
    return d
