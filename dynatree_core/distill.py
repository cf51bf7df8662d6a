"""Reproducible distillation of the default draft from the SmolLM2-135M-Instruct target.

Pipeline (``dynatree distill`` / ``python -m dynatree_core.distill``):

1. **data** - token sequences, written to ``<work-dir>/seqs`` (resumable, one shard per job):

   * *prompts*: continuations of the bundled prompt set
     (``dynatree_core/data/distill_prompts.txt``), as raw text and in the chat template;
     one greedy continuation plus ``--samples-per-prompt`` sampled ones each;
   * *bank*: template x topic prompts (``--prompt-bank``) and questions about training-text
     excerpts (``--text-prompts``);
   * *self-written prompts* (``--self-prompts N``): user requests the target writes itself when
     sampled right after the chat template's user header, held-out evaluation topics filtered
     out; continued in chat form and as raw text, in equal-length (padding-free) batches;
   * *passages*: greedy continuations of random windows of the training text;
   * with ``--generator draft --init-from DIR`` the continuations are written by an existing
     draft instead (on-policy data: the contexts the draft's own proposals lead into);
   * *text*: fixed-length chunks of the training text itself
     (``wikitext-2-raw/wiki.valid.raw`` and ``gutenberg-train/*.txt``; never
     ``wiki.test.raw`` or ``pg19/``, which are evaluation text).
2. **train** - *online* distillation: every batch is labelled by the target (fp32 unless
   ``--teacher-dtype bfloat16``) as it is drawn (its greedy token over the full vocabulary and
   its distribution over the head ids), so no labels are stored and every position of every sequence is a training position.
   The 2-layer student starts from the target (layers 0-1, final norm, head rows of the H
   most frequent target tokens) and minimises
   ``alpha * CE(teacher head distribution) + (1-alpha) * CE(greedy token)`` with AdamW and a
   cosine schedule; seeded; checkpoints under ``<work-dir>/ckpt`` (resumable).  With
   ``--time-limit`` the schedule is compressed to fit (the export records the steps done).
   ``--init-from DIR`` fine-tunes an exported draft instead; a ``--head-size`` above its head's
   grows the head by the ids the training data uses most that it lacks.
3. **export** - fp16 weights to ``dynatree_core/assets/smollm2-135m-draft/``.
4. **evaluate** (``--evaluate``) - on CPU in fp32: agreement with the target's greedy tokens
   on 48 held-out prompts (one topic each, never in any training prompt; a bootstrap interval
   over prompts) and on continuations of ``wiki.test.raw`` / ``pg19`` passages,
   decode-step cost ratio, shipped size and pair load time.

``--kind feature`` trains the *feature* draft instead (:mod:`dynatree_core.distill_feature`): the
same data stage, then the target's hidden states are stored once and a small head learns to read
them (``bash scripts/distill_feature.sh``: the shipped one, under 90 minutes on a 2-core CPU).

The base phases of the shipped draft were made on one GPU (``--device cuda``); on CPU the same
command works but the default sizes take many hours - shrink ``--passages``,
``--samples-per-prompt`` and ``--steps``.  On a CPU with bf16 matrix units (AMX),
``--gen-dtype bfloat16 --teacher-dtype bfloat16`` makes writing and labelling several times faster.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from .distill_cli import (DEFAULT_WORK_DIR, DESCRIPTION, add_distill_args, add_distill_parser,  # noqa: F401 (re-exported)
                          check_distill_args)
from .models import eos_token_ids, resolve_device, resolve_dtype
from .paths import REPO_ROOT, data_dir_candidates  # noqa: F401 (REPO_ROOT re-exported)

# the old private names, kept for scripts that import them
_add_args, _check_args = add_distill_args, check_distill_args

PROMPTS_FILE = Path(__file__).resolve().parent / "data" / "distill_prompts.txt"
FORBIDDEN_TRAIN_NAMES = ("wiki.test.raw", "pg19")

# Held-out evaluation prompts: topics deliberately absent from distill_prompts.txt.
EVAL_PROMPTS = [
    "Write a short paragraph about volcanoes.",
    "Explain the rules of chess to a beginner.",
    "What are three interesting facts about beekeeping?",
    "Describe how to fold a paper crane in origami.",
    "Give a brief history of submarines.",
    "Why is jazz music important to American culture?",
    "How do glaciers shape mountain valleys?",
    "Explain public-key cryptography in simple terms.",
    "Tell me a short story about a lighthouse keeper.",
    "Describe the Japanese tea ceremony.",
    "What was the Silk Road and why did it matter?",
    "Why are coral reefs in danger?",
    "What should a beginner know about marathon running?",
    "How did the printing press change Europe?",
    "Explain black holes to a ten-year-old.",
    "How do you bake sourdough bread at home?",
    "The history of windmills",
    "Many people are surprised to learn that penguins",
    "An introduction to Roman aqueducts:",
    "What makes a good video game design?",
    "Describe the sound of a violin.",
    "How do tornadoes form?",
    "How do vaccines train the immune system?",
    "Chapter 1. The bonsai gardener",
    # a second set of 24 topics (added when 24 prompts gave a +-2-point interval: too coarse to rank drafts)
    "Write a short paragraph about hedgehogs.",
    "Explain how a trampoline works.",
    "What are three interesting facts about the saxophone?",
    "Describe how to build an igloo.",
    "Give a brief history of parachutes.",
    "Why do kangaroos hop instead of walking?",
    "How do cacti survive in the desert?",
    "Explain the rules of volleyball to a beginner.",
    "Tell me a short story about a young girl learning falconry.",
    "Describe the history of stained glass windows.",
    "Why do fireflies glow?",
    "What should a beginner know about paddling a kayak?",
    "How did medieval armies use the catapult?",
    "Explain how a geyser erupts to a ten-year-old.",
    "How do you make a patchwork quilt at home?",
    "What makes a good crossword puzzle?",
    "The history of the accordion",
    "Many people are surprised to learn that flamingos",
    "An introduction to the gondolas of Venice:",
    "Chapter 1. The tattoo artist",
    "Before clocks were common, the sundial",
    "Jellyfish are",
    "In the spring, the tulip fields of",
    "Every snowflake",
]
# The first 24 entries: the set every draft before 2026-11-26 10:00 UTC was measured on.
N_EVAL_PROMPTS_V1 = 24
# eval.json layout; 2 added the 48-prompt set, its bootstrap interval and the first-24 number
EVAL_SCHEMA_VERSION = 2
# One word (stem) per held-out topic: every EVAL_PROMPTS entry mentions one (a test checks it).
# No training prompt may contain any of them - bundled, template x topic, or self-written ones.
HELD_OUT_TOPIC_WORDS = (
    "volcano", "chess", "beekeep", "origami", "submarine", "jazz", "glacier", "cryptograph", "lighthouse",
    "tea ceremony", "silk road", "coral", "marathon", "printing press", "black hole", "sourdough", "windmill",
    "penguin", "aqueduct", "video game", "violin", "tornado", "vaccin", "bonsai",
    "hedgehog", "trampoline", "saxophone", "igloo", "parachute", "kangaroo", "cact", "volleyball", "falconry",
    "stained glass", "firefl", "kayak", "catapult", "geyser", "quilt", "crossword", "accordion", "flamingo",
    "gondola", "tattoo", "sundial", "jellyfish", "tulip", "snowflake",
)


def mentions_held_out_topic(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in HELD_OUT_TOPIC_WORDS)


# ----------------------------------------------------------------------------- helpers

def _set_threads(n: int) -> None:
    torch.set_num_threads(max(1, int(n)))


def find_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    cands = [Path(data_dir)] if data_dir else []
    cands += data_dir_candidates()  # the benchmark's search too
    for c in cands:
        if (c / "wikitext-2-raw").is_dir() or (c / "gutenberg-train").is_dir():
            return c.resolve()
    raise FileNotFoundError(f"no data dir found (tried {[str(c) for c in cands]}); pass --data-dir")


def training_text_files(data_dir: Path) -> list[Path]:
    files = []
    wv = data_dir / "wikitext-2-raw" / "wiki.valid.raw"
    if wv.is_file():
        files.append(wv)
    files += sorted((data_dir / "gutenberg-train").glob("*.txt"))
    for f in files:
        if any(x in f.parts or f.name == x for x in FORBIDDEN_TRAIN_NAMES):
            raise RuntimeError(f"refusing to train on evaluation text {f}")
    if not files:
        raise FileNotFoundError(f"no training text under {data_dir}")
    return files


def read_prompts(path: Path = PROMPTS_FILE) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


TOPICS_FILE = Path(__file__).resolve().parent / "data" / "distill_topics.txt"

# Templates for the generated prompt bank: instruction-style ones go through the chat template,
# raw ones are continued as plain text (both forms occur in real use and in the evaluation).
CHAT_TEMPLATES = [
    "Write a short paragraph about {t}.", "Explain {t} in simple terms.", "Give a brief history of {t}.",
    "What are three interesting facts about {t}?", "Tell me a short story about {t}.", "Describe {t}.",
    "Why is {t} important?", "How does {t} work?", "What should a beginner know about {t}?",
    "Explain {t} to a ten-year-old.", "What are the advantages and disadvantages of {t}?",
    "Write a poem about {t}.", "List five facts about {t}.", "How has {t} changed over time?",
    "Write an encyclopedia-style introduction to {t}.", "What is the most surprising thing about {t}?",
    "Compare {t} with something similar.", "Give me some tips about {t}.", "What do people get wrong about {t}?",
    "Write a short dialogue between two friends about {t}.",
]
RAW_TEMPLATES = [
    "The history of {t}", "An introduction to {t}:", "Many people are surprised to learn that {t}",
    "Chapter 1. {T}", "In this article we discuss {t}.", "{T} is", "Here are some facts about {t}:",
    "Q: What is {t}?\nA:",
]
TEXT_TEMPLATES = [
    "Summarize the following text:\n{s}", "Explain what this passage means:\n{s}",
    "Continue this text:\n{s}", "Rewrite this in simple words:\n{s}", "What is this passage about?\n{s}",
]


def read_topics(path: Path = TOPICS_FILE) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def prompt_bank(n_topic: int, n_text: int, tok, streams: list[list[int]], seed: int) -> list[tuple[str, bool]]:
    """Generated training prompts ``(text, use_chat_template)``: ``n_topic`` template x topic
    combinations (``distill_topics.txt``) and ``n_text`` questions about short excerpts of the
    training text.  Deterministic for a seed."""
    rng = random.Random(seed + 11)
    topics = read_topics()
    combos = [(tpl, t, True) for tpl in CHAT_TEMPLATES for t in topics] + \
             [(tpl, t, False) for tpl in RAW_TEMPLATES for t in topics]
    rng.shuffle(combos)
    out = []
    for tpl, t, chat in combos[:n_topic]:
        out.append((tpl.format(t=t, T=t[:1].upper() + t[1:]), chat))
    weights = [len(x) for x in streams]
    for _ in range(n_text):
        s = rng.choices(streams, weights=weights)[0]
        n = rng.randint(24, 96)
        if len(s) <= n + 1:
            continue
        st = rng.randrange(0, len(s) - n)
        excerpt = tok.decode(s[st:st + n]).strip()
        out.append((rng.choice(TEXT_TEMPLATES).format(s=excerpt), True))
    return out


def raw_ids(tok, text: str) -> list[int]:
    """``text`` as plain token ids (no BOS/special tokens): the raw-text form of a prompt."""
    return tok(text, add_special_tokens=False)["input_ids"]


def chat_ids(tok, prompt: str) -> list[int]:
    out = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  tokenize=True)
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def eos_ids(model, tok) -> set[int]:
    """The ids a continuation stops at: the same as the decoders' (:func:`dynatree_core.models.eos_token_ids`)."""
    return set(eos_token_ids(model, tok))


# ----------------------------------------------------------------------------- data

def _first_eos_cut(g: list[int], eos: set[int]) -> int:
    for t, x in enumerate(g):
        if x in eos:
            return t + 1  # keep the EOS itself: the draft must learn to predict it
    return len(g)


def _sample_next(logits: torch.Tensor, sample: bool, temperature: float, top_p: float) -> torch.Tensor:
    """Greedy or temperature + nucleus sampling from last-position logits ``[B, V]``."""
    if not sample:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    if top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)
        drop = (sp.cumsum(-1) - sp) > top_p  # keep the smallest prefix whose mass reaches top_p
        sp = sp.masked_fill(drop, 0.0)
        return si.gather(-1, torch.multinomial(sp, 1)).squeeze(-1)
    return torch.multinomial(probs, 1).squeeze(-1)


@torch.no_grad()
def _decode_equal_length(model, batch: list[list[int]], max_new: int, stop: set[int], sample: bool,
                         temperature: float, top_p: float) -> list[list[int]]:
    """KV-cached decoding of prompts that all have the same length: no padding, so no attention
    mask, and logits only at the last position.  On CPU this runs several times faster than
    ``generate`` with left padding (whose masked attention and full prefill logits dominate)."""
    from transformers import DynamicCache

    dev = next(model.parameters()).device
    x = torch.tensor(batch, device=dev)
    B, P = x.shape
    cache = DynamicCache(config=model.config)
    h = model.model(input_ids=x, cache=cache, use_cache=True).last_hidden_state[:, -1]
    out = torch.zeros((B, max_new), dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    stop_t = torch.tensor(sorted(stop), dtype=torch.long, device=dev)
    n = 0
    for i in range(max_new):
        t = _sample_next(model.lm_head(h), sample, temperature, top_p)
        out[:, i] = t
        n = i + 1
        done |= torch.isin(t, stop_t)
        if bool(done.all()) or i + 1 == max_new:
            break
        pos = torch.full((B, 1), P + i, device=dev)
        h = model.model(input_ids=t[:, None], cache=cache, use_cache=True, position_ids=pos).last_hidden_state[:, -1]
    return out[:, :n].tolist()


@torch.no_grad()
def _continue(model, pad: int, batch: list[list[int]], max_new: int, eos: set[int],
              sample: bool, temperature: float, top_p: float) -> list[tuple[list[int], int]]:
    """Continue a batch of prompts with the target; ``(tokens, continuation_start)`` rows.
    Equal-length batches take the padding-free decode loop, others ``generate`` with left padding."""
    dev = next(model.parameters()).device
    P = max(len(p) for p in batch)
    if all(len(p) == P for p in batch):
        gen = _decode_equal_length(model, batch, max_new, eos, sample, temperature, top_p)
    else:
        ids = torch.full((len(batch), P), pad, dtype=torch.long)
        att = torch.zeros((len(batch), P), dtype=torch.long)
        for j, p in enumerate(batch):
            ids[j, P - len(p):] = torch.tensor(p)
            att[j, P - len(p):] = 1
        kw = ({"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} if sample else
              {"do_sample": False, "temperature": None, "top_p": None, "top_k": None})
        out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), max_new_tokens=max_new,
                             pad_token_id=pad, **kw)
        gen = out[:, P:].tolist()
    rows = []
    for p, g in zip(batch, gen):
        n = _first_eos_cut(g, eos)
        if n:
            rows.append((list(p) + g[:n], len(p)))
    return rows


def _length_batches(items: list[list[int]], bs: int) -> list[list[list[int]]]:
    """Batches of at most ``bs`` prompts of exactly equal length (for the padding-free decode loop)."""
    by_len: dict[int, list[list[int]]] = {}
    for it in items:
        by_len.setdefault(len(it), []).append(it)
    return [v[i:i + bs] for n in sorted(by_len) for v in [by_len[n]] for i in range(0, len(v), bs)]


def user_turn_prefix(tok) -> list[int]:
    """Token ids of the chat template up to where the user's message begins (system turn included)."""
    marker = "<<DYNATREE-USER-MESSAGE>>"
    text = tok.apply_chat_template([{"role": "user", "content": marker}], add_generation_prompt=False,
                                   tokenize=False)
    return raw_ids(tok, text.split(marker)[0])


def self_prompts(model, tok, n: int, seed: int, batch: int = 256, max_len: int = 80,
                 temperature: float = 1.0, top_p: float = 1.0) -> list[str]:
    """``n`` user requests written by the target itself (sampled after the chat template's user
    header, the "Magpie" recipe): an instruct model's own idea of what users ask, far more varied
    than a topic list.  Unfinished requests, duplicates and any mention of a held-out evaluation
    topic are dropped, so the result may be shorter than ``n``.  Deterministic for a seed."""
    from tqdm import tqdm

    head = user_turn_prefix(tok)
    end = eos_ids(model, tok)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        end.add(im_end)
    out, seen = [], set()
    for b in tqdm(range(0, n, batch), desc="self-written prompts", mininterval=10):
        torch.manual_seed(seed * 7_919 + b)
        rows = _decode_equal_length(model, [head] * min(batch, n - b), max_len, end, True, temperature, top_p)
        for g in rows:
            cut = _first_eos_cut(g, end)
            if not cut or g[cut - 1] not in end:
                continue  # ran out of tokens mid-request
            text = tok.decode(g[:cut - 1], skip_special_tokens=True).strip()
            if len(text) < 12 or text in seen or mentions_held_out_topic(text):
                continue
            seen.add(text)
            out.append(text)
    return out


def _save_seqs(path: Path, rows: list[tuple[list[int], int]], kind: str) -> int:
    """One shard: concatenated int32 tokens, per-row lengths and continuation starts."""
    toks = torch.tensor([t for r, _ in rows for t in r], dtype=torch.int32)
    lens = torch.tensor([len(r) for r, _ in rows], dtype=torch.int64)
    cont = torch.tensor([c for _, c in rows], dtype=torch.int64)
    tmp = path.with_suffix(".tmp")
    torch.save({"tokens": toks, "lens": lens, "cont": cont, "kind": kind}, tmp)
    os.replace(tmp, path)  # atomic: a killed run never leaves a half-written shard
    return int(lens.sum())


def _token_streams(tok, files: list[Path]) -> list[list[int]]:
    return [raw_ids(tok, f.read_text(encoding="utf-8", errors="replace")) for f in files]


def _prompt_jobs(prefix: str, items: list[list[int]], bs: int, max_new: int, samples: int) -> list[tuple]:
    """Batches of prompts, continued greedily (repeat 0) and ``samples`` times sampled: sampling
    multiplies a few hundred prompts into many distinct target-style texts (the labels are always
    the target's greedy tokens)."""
    return [(f"{prefix}{rep:02d}_{i // bs:05d}", "prompt", items[i:i + bs], max_new, rep > 0)
            for rep in range(1 + samples if items else 0) for i in range(0, len(items), bs)]


def _data_jobs(args, tok, streams: list[list[int]], own_prompts: list[str] = ()) -> list[tuple]:
    """The deterministic job list: ``(name, kind, prompts, max_new, sample)``.  ``own_prompts``
    are the target's self-written requests (``--self-prompts``), continued in both forms."""
    rng = random.Random(args.seed)
    jobs = []
    prompts = read_prompts() if args.bundled_prompts else []
    if args.max_prompts:
        prompts = prompts[: args.max_prompts]
    pitems = []
    for p in prompts:
        pitems.append(raw_ids(tok, p))
        pitems.append(chat_ids(tok, p))
    pitems.sort(key=len)  # similar lengths per batch: little left padding
    bs = args.gen_batch
    jobs += _prompt_jobs("p", pitems, bs, args.gen_new_tokens, args.samples_per_prompt)
    bank = prompt_bank(args.prompt_bank, args.text_prompts, tok, streams, args.seed)
    bitems = [chat_ids(tok, p) if chat else raw_ids(tok, p) for p, chat in bank]
    bitems.sort(key=len)
    jobs += _prompt_jobs("b", bitems, bs, args.bank_new_tokens, args.bank_samples)
    # self-written requests: equal-length batches, so the fast padding-free decode loop runs
    sitems = [chat_ids(tok, p) for p in own_prompts] + [raw_ids(tok, p) for p in own_prompts]
    for rep in range(1 + args.bank_samples if sitems else 0):
        for k, b in enumerate(_length_batches(sitems, bs)):
            jobs.append((f"s{rep:02d}_{k:05d}", "prompt", b, args.bank_new_tokens, rep > 0))
    weights = [len(s) for s in streams]
    pbs = max(1, args.passage_batch or bs)
    for b in range(math.ceil(args.passages / pbs)):
        plen = rng.randint(args.passage_min, args.passage_max)  # one length per batch: no padding
        batch = []
        for _ in range(min(pbs, args.passages - b * pbs)):
            s = rng.choices(streams, weights=weights)[0]
            if len(s) <= plen + 1:
                continue
            st = rng.randrange(0, len(s) - plen)
            batch.append(s[st:st + plen])
        if batch:
            jobs.append((f"x_{b:05d}", "passage", batch, args.passage_new_tokens, False))
    return jobs


def build_data(args, target=None, tok=None) -> Path:
    """Stage 1: token sequences for training (the teacher labels them online while training)."""
    from tqdm import tqdm
    from .default_pair import load_target

    work = Path(args.work_dir)
    sdir = work / "seqs"
    sdir.mkdir(parents=True, exist_ok=True)
    _set_threads(args.threads)
    dev = resolve_device(args.device)
    t_start = time.time()
    if target is None or tok is None:
        target, tok = load_target(dtype=torch.float32)
    eos = eos_ids(target, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    data_dir = find_data_dir(args.data_dir)
    files = training_text_files(data_dir)
    streams = _token_streams(tok, files)
    n_text = sum(len(s) for s in streams)
    print(f"[distill] training text: {len(files)} files, {n_text} tokens, from {data_dir}", flush=True)
    # natural text, teacher-forced at training time: fixed-length chunks of every training file
    L = args.chunk_len
    if not (sdir / "text_00000.pt").exists():
        chunks = [(s[i:i + L], 0) for s in streams for i in range(0, len(s) - L + 1, L)]
        _save_seqs(sdir / "text_00000.pt", chunks, "text")
    gen_dtype = resolve_dtype(args.gen_dtype)
    writer = None  # the target at --gen-dtype; copied only when it writes something
    if args.generator == "target" or args.self_prompts:
        if gen_dtype == torch.float32 and dev == target.device:
            writer = target
        else:
            writer = copy.deepcopy(target).to(device=dev, dtype=gen_dtype)
    own: list[str] = []
    if args.self_prompts:
        sp_path = work / "self_prompts.json"
        if sp_path.exists():
            own = json.loads(sp_path.read_text())
        else:
            own = self_prompts(writer, tok, args.self_prompts, args.seed, batch=args.gen_batch)
            tmp = sp_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(own, indent=0, ensure_ascii=False))
            os.replace(tmp, sp_path)
        print(f"[distill] self-written prompts: {len(own)} kept of {args.self_prompts}", flush=True)
    jobs = _data_jobs(args, tok, streams, own)
    order = list(range(len(jobs)))
    random.Random(args.seed + 1).shuffle(order)  # a partial run already holds a mix of everything
    todo = [(i, jobs[i]) for i in order if not (sdir / f"{jobs[i][0]}.pt").exists()]
    print(f"[distill] generation jobs: {len(jobs)} total, {len(todo)} to do, device {dev}", flush=True)
    if args.generator == "draft":
        # on-policy data: the draft writes the text, the target still labels every position while
        # training, so the draft learns from exactly the contexts its own proposals lead into
        from .draft_model import load_draft

        gen_model = load_draft(args.init_from, target, device=dev, dtype=gen_dtype)
    else:
        gen_model = writer
    t_run = getattr(args, "_t0", t_start)
    deadline = (t_run + args.time_limit * args.data_share) if args.time_limit else None
    ntok, done = 0, 0
    for i, (name, kind, payload, mx, sample) in tqdm(todo, desc=f"{args.generator} continuations", mininterval=10):
        if deadline is not None and time.time() > deadline:
            print(f"[distill] data time share used up: {done}/{len(todo)} jobs done (rerun to resume)", flush=True)
            break
        torch.manual_seed(args.seed * 1_000_003 + i)  # per-job seed: resumable runs sample the same text
        rows = _continue(gen_model, pad, payload, mx, eos, sample, args.temperature, args.top_p)
        ntok += _save_seqs(sdir / f"{name}.pt", rows, kind)
        done += 1
    dt = time.time() - t_start
    print(f"[distill] wrote {ntok} tokens in {done} jobs, {dt:.0f}s", flush=True)
    meta = {"files": [str(f.relative_to(data_dir)) for f in files], "text_tokens": n_text, "jobs": len(jobs),
            "jobs_done": len(jobs) - len(todo) + done, "seconds_last_run": round(dt, 1), "device": str(dev),
            "generator": args.generator, "self_prompts_kept": len(own)}
    (work / "data_meta.json").write_text(json.dumps(meta, indent=2))
    return sdir


# ----------------------------------------------------------------------------- training

def seq_rows(sdir: Path):
    """Every row of the data stage's shards: ``(pool, tokens, continuation_start)``, pool ``"text"``
    for training-text chunks and ``"gen"`` for prompt/passage continuations."""
    for f in sorted(sdir.glob("*.pt")):
        d = torch.load(f, weights_only=True)
        pool = "text" if d["kind"] == "text" else "gen"
        off = 0
        for n, c in zip(d["lens"].tolist(), d["cont"].tolist()):
            yield pool, d["tokens"][off:off + n], c
            off += n


class SeqPools:
    """Token rows by pool: ``gen`` (target continuations with their context) and ``text``."""

    def __init__(self, sdir: Path, max_len: int, val_rows: int = 0, seed: int = 0):
        self.pools: dict[str, list[torch.Tensor]] = {"gen": [], "text": []}
        self.cont: list[tuple[torch.Tensor, int]] = []  # for head-id counts
        for pool, r, c in seq_rows(sdir):
            if pool == "gen":
                self.cont.append((r, c))
            # keep the tail: the continuation is what the draft is mostly asked to predict
            self.pools[pool].append(r[-max_len:])
        if not any(self.pools.values()):
            raise FileNotFoundError(f"no training sequences in {sdir}; run --stage data first")
        self.val: list[torch.Tensor] = []
        if val_rows and len(self.pools["gen"]) > 4 * val_rows:
            g = torch.Generator().manual_seed(seed + 99)
            perm = torch.randperm(len(self.pools["gen"]), generator=g).tolist()
            held = set(perm[:val_rows])
            self.val = [r for i, r in enumerate(self.pools["gen"]) if i in held]
            self.pools["gen"] = [r for i, r in enumerate(self.pools["gen"]) if i not in held]
        self.pools = {k: v for k, v in self.pools.items() if v}

    def stats(self) -> dict:
        out = {k: {"rows": len(v), "tokens": int(sum(len(r) for r in v))} for k, v in self.pools.items()}
        out["gen_continuation_tokens"] = int(sum(len(r) - c for r, c in self.cont))
        out["val_rows"] = len(self.val)
        return out

    def token_counts(self, vocab: int) -> torch.Tensor:
        """Continuation tokens (the target's own outputs) weigh 1, other tokens 0.1."""
        c = torch.zeros(vocab, dtype=torch.float64)
        for r, s in self.cont:
            c += torch.bincount(r[s:].long(), minlength=vocab).double()
        for v in self.pools.values():
            for r in v:
                c += 0.1 * torch.bincount(r.long(), minlength=vocab).double()
        return c


def _collate(rows: list[torch.Tensor], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad: with a causal mask no real position ever sees a pad, so no attention mask is needed."""
    L = max(len(r) for r in rows)
    x = torch.zeros((len(rows), L), dtype=torch.long)
    m = torch.zeros((len(rows), L), dtype=torch.bool)
    for j, r in enumerate(rows):
        x[j, :len(r)] = r.long()
        m[j, :len(r)] = True
    return x.to(device), m.to(device)


def _micro_batches(rows: list, max_padded: int, length=len) -> list[list]:
    """Split a batch into length-sorted groups of at most ``max_padded`` padded positions (0: one
    group).  Short continuation rows padded to a 512-token text row would otherwise waste most
    of the teacher's compute on padding - decisive on a CPU."""
    if max_padded <= 0:
        return [rows]
    groups, cur = [], []
    for r in sorted(rows, key=length, reverse=True):
        if cur and (len(cur) + 1) * length(cur[0]) > max_padded:
            groups.append(cur)
            cur = []
        cur.append(r)
    return groups + [cur] if cur else groups


def _batch_plan(pools: SeqPools, tokens_per_batch: int, seed: int):
    """Deterministic infinite sampler: ``take(pool) -> rows`` (reshuffled every epoch)."""
    names = sorted(pools.pools)
    cycles = {n: 0 for n in names}
    pos = {n: 0 for n in names}

    def perm(n):
        g = torch.Generator().manual_seed(seed * 1000 + names.index(n) * 100 + cycles[n])
        return torch.randperm(len(pools.pools[n]), generator=g).tolist()

    perms = {n: perm(n) for n in names}

    def take(n):
        rows, ntok = [], 0
        while ntok < tokens_per_batch:
            if pos[n] >= len(perms[n]):
                cycles[n] += 1
                perms[n] = perm(n)
                pos[n] = 0
            r = pools.pools[n][perms[n][pos[n]]]
            pos[n] += 1
            rows.append(r)
            ntok += len(r)
        return rows

    return take


def cosine_lr(step: int, progress: float, warmup: int, min_frac: float) -> float:
    """Learning-rate factor: linear warmup over ``warmup`` steps, then cosine from 1 to ``min_frac``
    over ``progress`` in [0, 1] (steps or wall-clock, whichever the run is budgeted by)."""
    if step < warmup:
        return (step + 1) / warmup
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _pick_pool(rng: random.Random, names: list[str], gen_frac: float) -> str:
    if len(names) == 1:
        return names[0]
    return "gen" if rng.random() < gen_frac else "text"


@torch.no_grad()
def _teacher_targets(target, x: torch.Tensor, m: torch.Tensor, head_ids: torch.Tensor, chunk: int = 8192):
    """The target's greedy token (full vocabulary) and its distribution renormalised over the head ids,
    at every real position of the batch."""
    h = target.model(input_ids=x).last_hidden_state[m]
    W = target.get_output_embeddings().weight
    greedy, probs = [], []
    for i in range(0, h.shape[0], chunk):
        lg = h[i:i + chunk] @ W.T
        # argmax in the teacher's own dtype: a full-vocabulary fp32 copy of low-precision logits
        # would cost more memory traffic than the matmul, and cannot change a bf16 argmax anyway
        greedy.append(lg.argmax(-1))
        probs.append(torch.softmax(lg[:, head_ids].float(), dim=-1))
    return torch.cat(greedy), torch.cat(probs)


def _draft_head_logits(draft, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The draft's logits over its head ids at every real position of the batch."""
    h = draft.model(input_ids=x, use_cache=False).last_hidden_state[m]
    return draft.lm_head.forward_compact(h)


def _distill_loss(draft, x, m, greedy, probs, lut, alpha: float):
    """``alpha * CE(teacher probs over head) + (1 - alpha) * CE(greedy token)``; also top-1 agreement
    with the full-vocabulary greedy token (a greedy token outside the head counts as a miss)."""
    logits = _draft_head_logits(draft, x, m).float()
    logq = torch.log_softmax(logits, dim=-1)
    soft = -(probs * logq).sum(-1).mean()
    idx = lut[greedy]
    gv = idx >= 0
    hard = torch.nn.functional.cross_entropy(logits, idx.clamp(min=0), reduction="none")
    hard = (hard * gv).sum() / gv.sum().clamp(min=1)
    acc = ((logits.argmax(-1) == idx) & gv).float().mean()
    return alpha * soft + (1 - alpha) * hard, acc


def _backward_batch(draft, teacher, rows, micro_tokens: int, head_dev, lut, alpha: float, dev,
                    bf16: bool) -> tuple[float, float]:
    """Label ``rows`` with the teacher and accumulate the draft's gradients over length-sorted
    micro-batches; returns the batch's (loss, top-1 agreement), both position-weighted means."""
    n_all = sum(len(r) for r in rows)
    loss_v = acc_v = 0.0
    for group in _micro_batches(rows, micro_tokens):
        x, m = _collate(group, dev)
        greedy, probs = _teacher_targets(teacher, x, m, head_dev)
        with _autocast(dev, bf16):
            loss, acc = _distill_loss(draft, x, m, greedy, probs, lut, alpha)
        w = int(m.sum()) / n_all  # position-weighted: the same mean loss as one big batch
        (loss * w).backward()
        loss_v += float(loss.detach()) * w
        acc_v += float(acc) * w
    return loss_v, acc_v


def _autocast(dev: torch.device, enabled: bool):
    import contextlib

    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(dev.type, dtype=torch.bfloat16)


def train(args, target=None):
    """Stage 2: online distillation - each batch is labelled by the target as it is drawn."""
    from tqdm import tqdm
    from .default_pair import load_target
    from .draft_model import build_draft_from_target

    _set_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = resolve_device(args.device)
    if dev.type == "cuda":
        # TF32 for the teacher: labels stay those of an fp32 model up to near-ties
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    t_start = time.time()
    work = Path(args.work_dir)
    ckdir = work / "ckpt"
    ckdir.mkdir(parents=True, exist_ok=True)
    if target is None:
        target, _ = load_target(dtype=torch.float32, with_tokenizer=False)
    target = target.to(dev)
    V = target.config.vocab_size
    teacher_dtype = resolve_dtype(args.teacher_dtype)
    # a low-precision teacher copy (bf16 runs on CPU AMX units ~6x faster than fp32); its labels
    # can differ from the fp32 target's at near-ties, which the export metadata records
    teacher = target if teacher_dtype == torch.float32 else copy.deepcopy(target).to(dtype=teacher_dtype)
    pools = SeqPools(work / "seqs", args.max_len, val_rows=args.val_rows, seed=args.seed)
    stats = pools.stats()
    print(f"[distill] training sequences: {json.dumps(stats)}", flush=True)
    head_path = work / "head_ids.pt"
    counts = pools.token_counts(V)
    init = None
    if args.init_from:
        from .draft_model import load_draft

        init = load_draft(args.init_from, target, device=dev, dtype=torch.float32, attn_implementation="sdpa")
        n_init = init.lm_head.num_head_ids
        if args.head_size > n_init:
            # grow the head by the ids the training data uses most that it lacks (ties: lower id, i.e.
            # earlier BPE merge); a smaller --head-size keeps the draft's own head
            from .draft_model import extend_head

            have = init.lm_head.vocab_ids.cpu()
            c = counts.double().clone()
            c[have] = -1.0
            order = torch.argsort(-c, stable=True)  # stable: ties keep id order
            extend_head(init, order[: args.head_size - n_init].tolist(), target)
        head_ids = init.lm_head.vocab_ids.cpu()  # fine-tuning keeps (or grows) the head it starts from
    elif head_path.exists():
        head_ids = torch.load(head_path, weights_only=True)
    else:
        c = counts.clone()
        c[[0, 1, 2]] = c.max() + 1  # special tokens (EOS among them) always in the head
        head_ids = c.argsort(descending=True)[: args.head_size].sort().values
        torch.save(head_ids, head_path)
    print(f"[distill] head: {len(head_ids)} ids covering {float(counts[head_ids].sum() / counts.sum()):.4f} "
          f"of (weighted) target tokens", flush=True)
    if init is not None:
        draft = init
    else:
        draft = build_draft_from_target(target, head_ids, num_layers=args.layers, device=dev, dtype=torch.float32,
                                        attn_implementation="sdpa")
    draft.train()
    head_dev = head_ids.to(dev)
    lut = torch.full((V,), -1, dtype=torch.long, device=dev)
    lut[head_dev] = torch.arange(len(head_ids), device=dev)
    params = [p for n, p in draft.named_parameters() if p.requires_grad and not n.startswith("model.embed_tokens")]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    warm = max(1, int(args.warmup))

    def lr_factor(step: int, progress: float) -> float:
        return cosine_lr(step, progress, warm, args.min_lr_frac)

    take = _batch_plan(pools, args.batch_tokens, args.seed)
    names = sorted(pools.pools)
    pool_rng = random.Random(args.seed + 7)
    step, elapsed_prev, progress = 0, 0.0, 0.0  # progress in [0, 1] drives the cosine schedule
    ck = ckdir / "last.pt"
    if ck.exists() and not args.restart:
        st = torch.load(ck, weights_only=False, map_location=dev)
        draft.load_state_dict(st["model"], strict=False)
        opt.load_state_dict(st["opt"])
        step, elapsed_prev, progress = st["step"], st.get("elapsed", 0.0), st.get("progress", 0.0)
        if progress >= 1.0:  # a finished run resumed with more --steps goes on along the longer schedule
            progress = step / args.steps
        for _ in range(step):  # replay the deterministic batch plan up to `step`
            take(_pick_pool(pool_rng, names, args.gen_frac))
        print(f"[distill] resumed from step {step}", flush=True)
    # time budget for training: what the data stage left of --time-limit, minus room for the export
    train_budget = None
    if args.time_limit:
        t_run = getattr(args, "_t0", t_start)
        train_budget = max(1.0, args.time_limit - (time.time() - t_run) - args.export_reserve)
    t0 = time.time()
    progress0 = progress  # a resumed run anneals the rest of the schedule within its own budget
    ema = None
    stopped_by_time = False

    def save_ck():
        tmp = ck.with_suffix(".tmp")
        torch.save({"model": {k: v for k, v in draft.state_dict().items() if not k.startswith("model.embed_tokens")},
                    "opt": opt.state_dict(), "step": step, "progress": progress,
                    "elapsed": elapsed_prev + time.time() - t0}, tmp)
        os.replace(tmp, ck)

    pbar = tqdm(total=args.steps, initial=step, desc="distill", mininterval=10)
    while progress < 1.0:
        progress = max(progress, (step + 1) / args.steps)
        if train_budget is not None:
            tp = progress0 + (1 - progress0) * (time.time() - t0) / train_budget
            if tp > progress:
                stopped_by_time = True
                progress = tp
        for g in opt.param_groups:
            g["lr"] = args.lr * lr_factor(step, progress)
        opt.zero_grad(set_to_none=True)
        loss, acc = _backward_batch(draft, teacher, take(_pick_pool(pool_rng, names, args.gen_frac)),
                                    args.micro_tokens, head_dev, lut, args.alpha, dev, args.train_bf16)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        a = float(acc)
        ema = a if ema is None else 0.98 * ema + 0.02 * a
        pbar.update(1)
        if step % args.log_every == 0 or progress >= 1.0:
            msg = (f"[distill] step {step} progress {min(progress, 1.0):.3f} loss {loss:.4f} "
                   f"acc_ema {ema:.4f} lr {args.lr * lr_factor(step, progress):.2e} "
                   f"elapsed {elapsed_prev + time.time() - t0:.0f}s")
            if pools.val:
                msg += f" val_acc {_val_accuracy(draft, teacher, pools.val, head_dev, lut, dev, args):.4f}"
            print(msg, flush=True)
        if step % args.ckpt_every == 0 or progress >= 1.0:
            save_ck()
            if progress < 1.0 and args.export_every_ckpt:
                _export(args, draft, head_ids, stats, step, elapsed_prev + time.time() - t0, partial=True)
    pbar.close()
    train_s = elapsed_prev + time.time() - t0
    draft.eval()
    _export(args, draft, head_ids, stats, step, train_s, partial=False, stopped_by_time=stopped_by_time)
    return draft, target


@torch.no_grad()
def _val_accuracy(draft, target, rows, head_dev, lut, dev, args) -> float:
    was = draft.training
    draft.eval()
    hit = tot = 0
    for i in range(0, len(rows), 16):
        x, m = _collate(rows[i:i + 16], dev)
        greedy, _ = _teacher_targets(target, x, m, head_dev)
        with _autocast(dev, args.train_bf16):
            pred = _draft_head_logits(draft, x, m).argmax(-1)
        hit += int((pred == lut[greedy]).sum())
        tot += int(greedy.numel())
    draft.train(was)
    return hit / max(1, tot)


def _export(args, draft, head_ids, stats, step, train_s, partial: bool, stopped_by_time: bool = False):
    from .draft_model import save_draft

    dev = resolve_device(args.device)
    meta = {
        "command": args.command_line,
        "seed": args.seed,
        "steps_done": step,
        "steps_planned": args.steps,
        "batch_tokens": args.batch_tokens,
        "train_seconds": round(train_s, 1),
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "data": stats,
        "head_size": int(len(head_ids)),
        "layers": int(draft.config.num_hidden_layers),
        "teacher_dtype": args.teacher_dtype,
        "date": time.strftime("%Y-%m-%d"),
    }
    if args.init_from:
        prev = json.loads((Path(args.init_from) / "draft_config.json").read_text()).get("metadata", {})
        meta["init_from"] = {"dir": str(args.init_from), "metadata": prev}
    if stopped_by_time:
        meta["note"] = f"--time-limit {args.time_limit}s reached: cosine schedule compressed into {step} steps"
    if partial:
        meta["partial"] = True
    out = Path(args.out_dir)
    was = draft.training
    save_draft(draft.eval(), out, dtype=torch.float16, metadata=meta)
    draft.train(was)
    if not partial:
        (Path(args.work_dir) / "train_meta.json").write_text(json.dumps(meta, indent=2))
        size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
        print(f"[distill] exported draft to {out} ({size / 1e6:.1f} MB); training took {train_s:.0f}s", flush=True)


def export_checkpoint(args, target=None):
    """Export the draft from ``<work-dir>/ckpt/last.pt`` without further training."""
    from .default_pair import load_target
    from .draft_model import build_draft_from_target

    work = Path(args.work_dir)
    if target is None:
        target, _ = load_target(dtype=torch.float32, with_tokenizer=False)
    head_ids = torch.load(work / "head_ids.pt", weights_only=True)
    draft = build_draft_from_target(target, head_ids, num_layers=args.layers)
    st = torch.load(work / "ckpt" / "last.pt", weights_only=False, map_location=target.device)
    draft.load_state_dict(st["model"], strict=False)
    _export(args, draft, head_ids, {"note": "exported from checkpoint"}, st["step"], st.get("elapsed", 0.0),
            partial=False)
    return draft


# ----------------------------------------------------------------------------- evaluation

@torch.no_grad()
def _greedy_continue(model, ids: list[int], n: int, eos: set[int]) -> list[int]:
    g = _decode_equal_length(model, [ids], n, eos, False, 1.0, 1.0)[0]
    return g[:_first_eos_cut(g, eos)]


@torch.no_grad()
def _agreement(draft, prompt: list[int], cont: list[int]) -> tuple[int, int]:
    x = torch.tensor([prompt + cont])
    logits = draft(input_ids=x).logits[0]
    P = len(prompt)
    pred = logits[P - 1:P - 1 + len(cont)].argmax(-1).tolist()
    return sum(int(a == b) for a, b in zip(pred, cont)), len(cont)


def _passages(tok, path: Path, n: int, plen: int, rng: random.Random) -> list[list[int]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    ids = raw_ids(tok, text)
    out = []
    for _ in range(n):
        st = rng.randrange(0, len(ids) - plen - 1)
        out.append(ids[st:st + plen])
    return out


def pooled_rate(units: list[tuple[int, int]]) -> float:
    """Hits over tokens, pooled across ``(hits, tokens)`` units."""
    return sum(h for h, _ in units) / max(1, sum(n for _, n in units))


def bootstrap_ci(units: list[tuple[int, int]], n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`pooled_rate`, resampling whole units (prompts):
    tokens of one answer are correlated, so a per-token interval would be too narrow."""
    if not units:
        raise ValueError("bootstrap_ci needs at least one unit")
    rng = random.Random(seed)
    stats = sorted(pooled_rate([units[rng.randrange(len(units))] for _ in units]) for _ in range(n_boot))
    a = (1 - level) / 2
    return stats[int(a * (n_boot - 1))], stats[int(round((1 - a) * (n_boot - 1)))]


@torch.no_grad()
def _step_cost(model, ctx: list[int], steps: int) -> float:
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([ctx]), cache=cache, use_cache=True)
    t = ctx[-1]
    times = []
    for i in range(steps):
        s = time.perf_counter()
        lg = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits
        t = int(lg[0, -1].argmax())
        times.append(time.perf_counter() - s)
    return statistics.median(times[3:])


def evaluate_draft(draft_dir=None, data_dir=None, n_passages: int = 10, passage_len: int = 256,
                   new_tokens: int = 64, prompt_new_tokens: int = 48, threads_gen: int = 1,
                   threads_timing: int = 2, seed: int = 0, verbose: bool = True) -> dict:
    """Measure the draft against the fp32 target; returns a dict of numbers."""
    from .default_pair import DRAFT_ASSET_DIR, load_default_pair, load_target
    from .draft_model import load_draft

    res: dict = {}
    draft_dir = Path(draft_dir) if draft_dir else DRAFT_ASSET_DIR
    _set_threads(threads_timing)
    t = time.time()
    if draft_dir == DRAFT_ASSET_DIR:
        target, draft, tok = load_default_pair(draft="model")
    else:
        target, tok = load_target()
        draft = load_draft(draft_dir, target)
    res["pair_load_seconds"] = round(time.time() - t, 2)
    res["draft_size_mb"] = round(sum(f.stat().st_size for f in draft_dir.iterdir() if f.is_file()) / 1e6, 2)
    eos = eos_ids(target, tok)
    _set_threads(threads_gen)
    log = (lambda *a: print(*a, flush=True)) if verbose else (lambda *a: None)

    def counts(items, n_new):
        out = []  # (hits, tokens) per item
        for p in items:
            out.append(_agreement(draft, p, _greedy_continue(target, p, n_new, eos)))
        return out

    def run(items, n_new):
        c = counts(items, n_new)
        return pooled_rate(c), sum(n for _, n in c)

    raw = counts([raw_ids(tok, p) for p in EVAL_PROMPTS], prompt_new_tokens)
    chat = counts([chat_ids(tok, p) for p in EVAL_PROMPTS], prompt_new_tokens)
    # one unit per prompt (raw + chat form): the bootstrap resamples topics, not correlated tokens
    per_prompt = [(hr + hc, nr + nc) for (hr, nr), (hc, nc) in zip(raw, chat)]
    n1, n2 = sum(n for _, n in raw), sum(n for _, n in chat)
    a_raw, a_chat = pooled_rate(raw), pooled_rate(chat)
    res["agree_heldout_prompts_raw"] = round(a_raw, 4)
    res["agree_heldout_prompts_chat"] = round(a_chat, 4)
    res["agree_heldout_prompts"] = round(pooled_rate(per_prompt), 4)
    res["agree_heldout_prompts_ci95"] = [round(x, 4) for x in bootstrap_ci(per_prompt, seed=seed)]
    res["agree_heldout_prompts_first24"] = round(pooled_rate(per_prompt[:N_EVAL_PROMPTS_V1]), 4)
    res["heldout_prompts"] = len(EVAL_PROMPTS)
    lo, hi = res["agree_heldout_prompts_ci95"]
    log(f"[eval] held-out prompts ({len(EVAL_PROMPTS)}): {res['agree_heldout_prompts']:.3f} "
        f"(95% CI {lo:.3f}-{hi:.3f}); raw {a_raw:.3f} ({n1} tok), chat {a_chat:.3f} ({n2} tok); "
        f"first {N_EVAL_PROMPTS_V1} prompts {res['agree_heldout_prompts_first24']:.3f}")
    ddir = find_data_dir(data_dir)
    rng = random.Random(seed)
    per = {}
    tot_hit = tot_n = 0
    srcs = [ddir / "wikitext-2-raw" / "wiki.test.raw"] + sorted((ddir / "pg19").glob("*.txt"))
    for s in srcs:
        npass = n_passages if s.name == "wiki.test.raw" else max(1, n_passages // 2)
        items = _passages(tok, s, npass, passage_len, rng)
        a, n = run(items, new_tokens)
        per[s.name] = round(a, 4)
        tot_hit += a * n
        tot_n += n
        log(f"[eval] {s.name}: {a:.3f} ({n} tok)")
    res["agree_passages_by_file"] = per
    res["agree_passages"] = round(tot_hit / max(1, tot_n), 4)
    res["agree_wikitext_test"] = per.get("wiki.test.raw")
    # decode-step cost
    _set_threads(threads_timing)
    ctx = _passages(tok, srcs[0], 1, 128, rng)[0]
    ct = _step_cost(target, ctx, 40)
    cd = _step_cost(draft, ctx, 40)
    ct = min(ct, _step_cost(target, ctx, 40))
    cd = min(cd, _step_cost(draft, ctx, 40))
    res["target_step_ms"] = round(ct * 1e3, 3)
    res["draft_step_ms"] = round(cd * 1e3, 3)
    res["cost_ratio"] = round(cd / ct, 4)
    res["timing_threads"] = threads_timing
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    log(f"[eval] {json.dumps(res)}")
    return res


# ----------------------------------------------------------------------------- CLI

def run_distill(args, target=None, tok=None) -> int:
    if not getattr(args, "command_line", None):
        args.command_line = "dynatree distill " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args._t0 = time.time()
    check_distill_args(args)
    if args.out_dir is None:
        from .default_pair import DRAFT_ASSET_DIR, FEATURE_DRAFT_ASSET_DIR

        args.out_dir = str(FEATURE_DRAFT_ASSET_DIR if args.kind == "feature" else DRAFT_ASSET_DIR)
    if args.kind == "feature":
        return _run_feature(args, target, tok)
    if not args.eval_only:
        if target is None or (tok is None and args.stage in ("all", "data")):
            from .default_pair import load_target

            target, tok = load_target(dtype=torch.float32)  # once, shared by the stages
        if args.stage in ("all", "data"):
            build_data(args, target=target, tok=tok)
        if args.stage in ("all", "train"):
            train(args, target=target)
        if args.stage == "export":
            export_checkpoint(args, target=target)
    if args.evaluate or args.eval_only:
        res = evaluate_draft(args.out_dir, args.data_dir, n_passages=args.eval_passages, seed=args.seed)
        Path(args.work_dir).mkdir(parents=True, exist_ok=True)
        res = {"schema_version": EVAL_SCHEMA_VERSION, "draft_dir": str(args.out_dir),
               "config": {"eval_passages": args.eval_passages, "seed": args.seed}, **res}
        (Path(args.work_dir) / "eval.json").write_text(json.dumps(res, indent=2))
        print(json.dumps(res, indent=2))
    return 0


def _run_feature(args, target=None, tok=None) -> int:
    """``--kind feature``: data (shared with the independent draft), features, train + export, evaluate."""
    from . import distill_feature as fd

    if not args.eval_only:
        _set_threads(args.threads)
        if target is None or tok is None:
            from .default_pair import load_target

            target, tok = load_target(dtype=torch.float32)
        target = target.to(resolve_device(args.device))
        if args.stage in ("all", "data"):
            build_data(args, target=target, tok=tok)
        if args.stage in ("all", "train"):
            fd.build_features(args, target)
            fd.train_feature(args, target, tok)
        if args.stage == "export":
            raise ValueError("--stage export is for --kind model; a feature draft is exported when training ends")
    if args.evaluate or args.eval_only:
        res = fd.evaluate_feature_draft(args.out_dir, args.data_dir, n_passages=args.eval_passages, seed=args.seed)
        Path(args.work_dir).mkdir(parents=True, exist_ok=True)
        res = {"schema_version": EVAL_SCHEMA_VERSION, "draft_dir": str(args.out_dir),
               "config": {"eval_passages": args.eval_passages, "seed": args.seed, "kind": "feature"}, **res}
        (Path(args.work_dir) / "eval.json").write_text(json.dumps(res, indent=2))
        print(json.dumps(res, indent=2))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dynatree_core.distill", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    add_distill_args(parser)
    args = parser.parse_args(argv)
    args.command_line = "python -m dynatree_core.distill " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    return run_distill(args)


if __name__ == "__main__":
    sys.exit(main())
