"""Model names that cannot load fail fast and say why; loads print one line (dynatree_core.pairs.loading)."""

from __future__ import annotations

import contextlib
import io
import socket

import pytest

from dynatree_core.pairs import loading
from dynatree_core.pairs.loading import ModelSourceError, announce, check_model_source


def test_local_paths_are_accepted_and_missing_paths_named(tmp_path):
    assert check_model_source(str(tmp_path), "target") == "local"
    with pytest.raises(ModelSourceError, match="no such file or directory") as e:
        check_model_source(str(tmp_path / "missing"), "target")
    assert str(tmp_path / "missing") in str(e.value)
    with pytest.raises(ModelSourceError, match="non-empty"):
        check_model_source("  ", "draft")


def _source_error(name: str, flag: str) -> str:
    with pytest.raises(ModelSourceError) as e:
        check_model_source(name, flag)
    return str(e.value)


def test_offline_by_environment_fails_without_touching_the_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout=3.0: pytest.fail("the network was probed"))
    msg = _source_error("no/such-model", "--target")
    assert "'no/such-model'" in msg and "HF_HUB_OFFLINE" in msg and "check the name" in msg


def _patched_socket(monkeypatch, reachable: bool) -> list:
    """socket.create_connection as the loader sees it, without the network: a DNS failure (an
    unreachable hub) or a connection that opens; returns the (host, port, timeout) it was asked for."""
    asked: list = []

    def create_connection(address, timeout=None):
        asked.append((*address, timeout))
        if not reachable:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return contextlib.nullcontext()

    monkeypatch.setattr(loading.socket, "create_connection", create_connection)
    return asked


def test_unreachable_hub_fails_at_once_naming_model_and_hub(monkeypatch):
    for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    asked = _patched_socket(monkeypatch, reachable=False)
    assert loading.hub_reachable(timeout=2.0) is False
    assert asked == [("hub.invalid", 443, 2.0)]  # one connection to the endpoint's host, https port
    msg = _source_error("EleutherAI/pythia-70m-typo", "--draft")
    assert "EleutherAI/pythia-70m-typo" in msg and "hub.invalid" in msg and "unreachable" in msg


def test_hub_reachable_is_one_connection_to_the_endpoints_host_and_port(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example:8080")
    asked = _patched_socket(monkeypatch, reachable=True)
    assert loading.hub_reachable(timeout=1.5) is True
    assert asked == [("mirror.example", 8080, 1.5)]


def test_reachable_hub_reports_a_misspelt_name(monkeypatch):
    import huggingface_hub

    for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(huggingface_hub, "repo_exists", lambda name, **k: name == "real/model")
    assert check_model_source("real/model") == "hub"
    with pytest.raises(ModelSourceError, match="does not exist on the Hugging Face hub"):
        check_model_source("reel/model")


def test_from_pretrained_checks_the_name_before_loading(monkeypatch):
    from dynatree_core.pairs.pair import ModelPair

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError, match="no/such-target"):
        ModelPair.from_pretrained("no/such-target", "no/such-draft", device="cpu")


def test_announce_prints_one_line_and_hides_transformers_bars():
    from transformers.utils import logging as hf_logging

    out = io.StringIO()
    with announce("a thing", stream=out):
        assert not hf_logging.is_progress_bar_enabled()
        from transformers import modeling_gguf_pytorch_utils as g

        bar = g.tqdm(range(3), file=out)
        list(bar)
    text = out.getvalue()
    assert text.startswith("loading a thing ...") and " done (" in text and text.count("\n") == 1
    assert hf_logging.is_progress_bar_enabled()  # restored
