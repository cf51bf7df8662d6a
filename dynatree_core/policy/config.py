"""Method names -> decoder configs (torch-free): :data:`CONFIG_CLASSES` is the one place a method's
name becomes its config, and the config classes are re-exported here.

Every decoder is the same loop with a different tree policy: each config lowers to one
:class:`GrowthRule` (``config.growth_rule()``), which :mod:`dynatree_core.policy.growth` grows.

* ``ar``          -> an empty tree (the target verifies only the root)
* ``linear``      -> a chain of K nodes (breadth 1, depth K)
* ``fixed_tree``  -> breadth B everywhere, depth D, pruning τ, budget N_max
* ``dynatree``    -> confidence-dependent breadth, probability-gated depth, pruning, budget, the
                     sliding-window history adapter (and a cost-aware variant)
* ``eagle2``      -> top-k expansion of the most probable frontier, then a global rerank to n_total
* ``sequoia``     -> a static tree shape from Sequoia's dynamic program over an acceptance vector

The classes live in :mod:`~dynatree_core.policy.configs` and :mod:`~dynatree_core.policy.dynatree_config`.
"""


from __future__ import annotations

from typing import Any, Union

from dynatree_core.policy.configs import (EAGLE2_HELP, FIXED_TREE_HELP, KV_MODES, SEQUOIA_HELP, ARConfig,
                                          DecoderConfig, Eagle2Config, FixedTreeConfig, KVMode, LinearConfig,
                                          SequoiaConfig)
from dynatree_core.policy.dynatree_config import ABLATION_VARIANTS, DynaTreeConfig, HistoryConfig
from dynatree_core.policy.growth_rule import DEFAULT_TRACE_TOP_K, PARAMETER_HELP, GrowthRule

__all__ = ["ABLATION_VARIANTS", "AnyConfig", "ARConfig", "CONFIG_CLASSES", "DEFAULT_TRACE_TOP_K", "DecoderConfig",
           "DynaTreeConfig", "EAGLE2_HELP", "Eagle2Config", "FIXED_TREE_HELP", "FixedTreeConfig", "GrowthRule",
           "HistoryConfig", "KVMode", "KV_MODES", "LinearConfig", "METHODS", "PARAMETER_HELP", "SEQUOIA_HELP",
           "SequoiaConfig", "check_method", "config_from_dict", "default_config", "resolve_config"]

AnyConfig = Union[ARConfig, LinearConfig, FixedTreeConfig, DynaTreeConfig, Eagle2Config, SequoiaConfig]

CONFIG_CLASSES: dict[str, type[DecoderConfig]] = {
    "ar": ARConfig,
    "linear": LinearConfig,
    "fixed_tree": FixedTreeConfig,
    "dynatree": DynaTreeConfig,
    "eagle2": Eagle2Config,
    "sequoia": SequoiaConfig,
}
METHODS: tuple[str, ...] = tuple(CONFIG_CLASSES)


def check_method(method: str) -> str:
    if method not in CONFIG_CLASSES:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method


def default_config(method: str) -> DecoderConfig:
    return CONFIG_CLASSES[check_method(method)]()


def config_from_dict(d: dict[str, Any]) -> DecoderConfig:
    """Inverse of :meth:`DecoderConfig.to_dict` (used by trace and benchmark JSON)."""
    d = dict(d)
    method = check_method(d.pop("method"))
    if method == "dynatree" and isinstance(d.get("history"), dict):
        d["history"] = HistoryConfig(**d["history"])
    if method == "sequoia" and d.get("acceptance") is not None:
        d["acceptance"] = tuple(d["acceptance"])
    return CONFIG_CLASSES[method](**d)


def resolve_config(method: str, config: DecoderConfig | None) -> DecoderConfig:
    """The config to run ``method`` with; a mismatching config type is an error."""
    check_method(method)
    if config is None:
        return default_config(method)
    expected = CONFIG_CLASSES[method]
    if not isinstance(config, expected):
        raise TypeError(f"config for method={method!r} must be a {expected.__name__}, got {type(config).__name__}")
    return config

