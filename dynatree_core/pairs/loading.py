"""Getting weights onto the machine: a model name checked before any download, quiet loading, and
loading a Hugging Face pair (target, tokenizer, draft).

:func:`check_model_source` answers in milliseconds whether a name can load (a path, the Hugging Face
cache, else one short TCP connection to the hub and a lookup of the name; it never downloads), so an
offline machine fails fast with :class:`ModelSourceError` instead of a minute of network retries.
:func:`quiet_loading` hides transformers' progress bars, so a load is the one line :func:`announce`
prints; :func:`load_hf_target` and :func:`load_hf_draft` load and check the two models.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from typing import Any, Iterator
from urllib.parse import urlparse


class ModelSourceError(ValueError):
    """A model name that cannot be resolved here (the message says why and what to do)."""


def _hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def hub_offline_by_env() -> bool:
    """True when the user switched the hub off (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connection to the hub's host: False on DNS failure, refusal or timeout.

    A closed network fails the DNS lookup at once, so this costs milliseconds where a
    download attempt costs a minute of retries."""
    url = urlparse(_hub_endpoint())
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _looks_like_path(name: str) -> bool:
    # Hub ids are "name" or "owner/name"; anything else (./x, /x, ~/x, a/b/c, x.gguf) is a path.
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name


def _in_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers always brings huggingface_hub
        return False
    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def check_model_source(name: str, role: str = "model", timeout: float = 3.0) -> str:
    """Where ``name`` will load from: ``"local"``, ``"cache"`` or ``"hub"``; otherwise raise
    :class:`ModelSourceError` naming the model, the reason and the fix, within about ``timeout``
    seconds (no retries, nothing downloaded)."""
    if not isinstance(name, str) or not name.strip():
        raise ModelSourceError(f"{role} model name must be a non-empty string, got {name!r}")
    expanded = os.path.expanduser(name)
    if os.path.exists(expanded):
        return "local"
    if _looks_like_path(name):
        raise ModelSourceError(f"{role} model {name!r}: no such file or directory")
    if _in_cache(name):
        return "cache"
    if hub_offline_by_env():
        raise ModelSourceError(
            f"{role} model {name!r} is not a local path and not in the Hugging Face cache, and the hub is switched "
            f"off (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): check the name, or pass a local directory")
    if not hub_reachable(timeout):
        raise ModelSourceError(
            f"{role} model {name!r} is not a local path and not in the Hugging Face cache, and the hub "
            f"({urlparse(_hub_endpoint()).hostname}) is unreachable from this machine (offline?): check the name, "
            f"or pass a local directory")
    try:
        from huggingface_hub import repo_exists

        exists = repo_exists(name)
    except Exception:  # gated/private repos, rate limits: let the real load report it
        return "hub"
    if not exists:
        raise ModelSourceError(f"{role} model {name!r} does not exist on the Hugging Face hub: is the name spelt right?")
    return "hub"


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Hide transformers' per-load progress bars (weights, GGUF de-quantisation) and hub retry
    chatter; restored afterwards."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    patched = None
    try:
        # The GGUF converter calls tqdm.auto.tqdm directly, outside transformers' switch.
        from transformers import modeling_gguf_pytorch_utils as gguf_utils

        patched = gguf_utils.tqdm

        def _silent(*args, **kwargs):  # type: ignore[no-untyped-def]
            kwargs["disable"] = True
            return patched(*args, **kwargs)

        gguf_utils.tqdm = _silent
    except (ImportError, AttributeError):
        patched = None
    try:
        yield
    finally:
        if patched is not None:
            gguf_utils.tqdm = patched
        hf_logging.set_verbosity(level)
        if was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def announce(what: str, stream=None) -> Iterator[None]:
    """Print ``loading WHAT ...`` then ``done (X s)`` on the same line (stderr), around a load."""
    stream = sys.stderr if stream is None else stream
    t0 = time.perf_counter()
    print(f"loading {what} ...", end="", file=stream, flush=True)
    try:
        with quiet_loading():
            yield
    except BaseException:
        print(" failed", file=stream, flush=True)
        raise
    print(f" done ({time.perf_counter() - t0:.1f} s)", file=stream, flush=True)


def load_hf_target(name: str, device: Any, device_map: Any, split_kwargs: dict[str, Any], **load: Any
                   ) -> tuple[Any, Any]:
    """The target causal LM and its tokenizer, on ``device`` or split by ``device_map`` (accelerate
    places and hooks the modules then; moving the model afterwards is not allowed)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name)
    if device_map is None:
        return AutoModelForCausalLM.from_pretrained(name, **load).to(device).eval(), tok
    return AutoModelForCausalLM.from_pretrained(name, device_map=device_map, **split_kwargs, **load).eval(), tok


def load_hf_draft(name: str, target: Any, tok: Any, device: Any, target_name: str, device_map: Any, **load: Any
                  ) -> Any:
    """The draft for ``target``: a feature-draft directory (checked against the target) or a causal
    LM whose tokenizer must equal the target's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dynatree_core.drafters.feature_draft import is_feature_draft_dir, load_feature_draft

    if is_feature_draft_dir(name):
        if target.get_input_embeddings().weight.device.type == "meta":
            raise ValueError(f"a feature draft borrows the target's input embeddings, but device_map="
                             f"{device_map!r} offloads them (to cpu or disk); keep them on a device, e.g. "
                             "a device_map placing the target's embed_tokens on the first GPU")
        return load_feature_draft(name, target, tokenizer=tok, device=device, dtype=load["dtype"])
    dtok = AutoTokenizer.from_pretrained(name)
    if dtok.get_vocab() != tok.get_vocab():
        raise ValueError(f"draft and target tokenizers differ ({name!r} vs {target_name!r}); speculative "
                         "decoding needs one shared vocabulary")
    return AutoModelForCausalLM.from_pretrained(name, **load).to(device).eval()

