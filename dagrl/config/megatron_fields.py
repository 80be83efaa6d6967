"""The field names of megatron.core's TransformerConfig (and its base ModelParallelConfig), read from the installed
source files with `ast`: pre-flight imports no megatron, so a misspelt override_transformer_config key is found in a
second instead of after the models' build starts."""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

SOURCES = (
    ("core/transformer/transformer_config.py", "TransformerConfig"),
    ("core/model_parallel_config.py", "ModelParallelConfig"),
)


@functools.lru_cache(maxsize=1)
def transformer_config_fields() -> frozenset[str] | None:
    """The annotated class attributes of TransformerConfig and ModelParallelConfig; None when megatron-core or
    either class is not where this expects (then the engine's own check at build time stands)."""
    spec = importlib.util.find_spec("megatron")  # a top-level spec: nothing of megatron is executed
    if spec is None or not spec.submodule_search_locations:
        return None
    fields: set[str] = set()
    for relative, name in SOURCES:
        source = next(
            (Path(root) / relative for root in spec.submodule_search_locations if (Path(root) / relative).is_file()),
            None,
        )
        if source is None:
            return None
        tree = ast.parse(source.read_text(encoding="utf-8"))
        found = next((node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name), None)
        if found is None:
            return None
        fields.update(
            item.target.id
            for item in found.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        )
    return frozenset(fields)


# model.enable_gradient_checkpointing: every layer recomputed, one a unit (unless the map sets recompute_granularity)
FULL_RECOMPUTE = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
# megatron.use_deterministic_algorithms: Megatron's deterministic code paths (the embedding's backward by indexing,
# TransformerEngine attention's guard), and off what has no deterministic kernel: the fused cross entropy and TP
# communication overlap (Megatron-LM's --deterministic-mode refuses both), the fused bias-dropout-add (AReaL's switch
# turns it off too)
DETERMINISTIC = dict(
    deterministic_mode=True, cross_entropy_loss_fusion=False, tp_comm_overlap=False, bias_dropout_fusion=False
)


def dagrl_fields(gradient_checkpointing: bool, deterministic: bool, overrides: dict) -> dict:
    """The TransformerConfig fields dagrl's own switches set; override_transformer_config is applied after them
    (pre-flight refuses a map that contradicts the deterministic ones)."""
    fields: dict = {}
    if gradient_checkpointing and "recompute_granularity" not in overrides:
        fields.update(FULL_RECOMPUTE)
    if deterministic:
        fields.update(DETERMINISTIC)
    return fields
