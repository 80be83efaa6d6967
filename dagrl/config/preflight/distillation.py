"""Pre-flight of on-policy distillation (distillation.*, dag=opd): the graph and the switch agree, and the teacher
is a model the student's tokens mean the same to, in a shape the actor's layout can build. The teacher's
per-token log-probs are compared with the student's token by token, so a teacher with another tokenizer would
train the student on noise without any error."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from dagrl.config.errors import ConfigError, require
from dagrl.config.model_dir import read_hf_config
from dagrl.config.model_files import _json, check_weight_files, highest_token_id
from dagrl.config.model_shapes import check_weight_shapes, position_limit
from dagrl.config.tree import Cfg


KEY = "distillation.teacher_model.model_path"
SWITCH = "distillation.enabled"


def check_graph(cfg: Cfg, roles: set[str]) -> None:
    """distillation.enabled and a teacher node in the graph go together (the graph is what runs)."""
    has_teacher = "teacher" in roles
    require(
        not cfg.distillation.enabled or has_teacher,
        SWITCH,
        f"{SWITCH}=true but the graph has no teacher node: run dag=opd (its teacher_log_prob and distill nodes), "
        f"or add them to dag.nodes as conf/dag/opd.yaml does",
    )
    require(
        cfg.distillation.enabled or not has_teacher,
        SWITCH,
        f"the graph has a teacher node (dag=opd) but {SWITCH}=false: set {SWITCH}=true, or run dag=grpo",
    )
    if not cfg.distillation.enabled:
        return
    loss = cfg.distillation.distillation_loss
    require(
        loss.use_policy_gradient,
        "distillation.distillation_loss.use_policy_gradient",
        "distillation.distillation_loss.use_policy_gradient=false (the KL back-propagated as a supervised loss) "
        "is not in dagrl: the teacher's reverse KL trains the student as a per-token reward; set it true",
    )
    require(
        bool(cfg.distillation.teacher_model.model_path),
        KEY,
        f"{KEY} is not set: point it at the teacher's HF model directory (a model with the student's tokenizer, "
        f"e.g. a larger model of the same family or a checkpoint merged with scripts/model_merger.py)",
    )


def vocabulary(model_dir: Path) -> tuple[dict | None, str]:
    """The token -> id map the model's tokenizer files give (vocabulary and added tokens), and where from; None
    when the files hold none that can be read without loading the tokenizer."""
    tokenizer = _json(model_dir / "tokenizer.json")
    if isinstance(tokenizer, dict) and isinstance((tokenizer.get("model") or {}).get("vocab"), dict):
        ids = dict(tokenizer["model"]["vocab"])
        ids.update(
            {
                t["content"]: t["id"]
                for t in tokenizer.get("added_tokens") or []
                if isinstance(t, dict) and "content" in t and "id" in t
            }
        )
        return ids, "tokenizer.json"
    vocab = _json(model_dir / "vocab.json")
    return (vocab, "vocab.json") if isinstance(vocab, dict) else (None, "")


def check_same_tokens(student_path: str, teacher_path: str) -> None:
    """Every token id means the same token to both models, where both directories say."""
    student_dir, teacher_dir = Path(os.path.expanduser(student_path)), Path(os.path.expanduser(teacher_path))
    (mine, source), (theirs, _) = vocabulary(student_dir), vocabulary(teacher_dir)
    if mine is None or theirs is None:
        return
    differ = sorted(token for token in mine.keys() | theirs.keys() if mine.get(token) != theirs.get(token))
    require(
        not differ,
        KEY,
        f"the teacher's tokenizer ({teacher_dir}) differs from the student's ({student_dir}/{source}): "
        f"{len(differ)} tokens have other ids (first: {differ[0] if differ else ''!r}), so the teacher would "
        f"score other tokens than the student sampled; use a teacher with the student's tokenizer",
    )


def check_teacher(
    cfg: Cfg, student_config: dict, parallel, world_size: int, sequence_length: int, planning: bool
) -> None:
    """The teacher's config.json, vocabulary, positions, weights and layout, when distillation is on."""
    if not cfg.distillation.enabled or not cfg.distillation.teacher_model.model_path:
        return
    from dagrl.engine.megatron.preflight import check_layout

    teacher_path = cfg.distillation.teacher_model.model_path
    teacher_config = read_hf_config(teacher_path, key=KEY)
    student_dir = Path(os.path.expanduser(cfg.actor_rollout_ref.model.path))
    highest = highest_token_id(student_dir)
    top = highest[0] if highest else student_config["vocab_size"] - 1
    require(
        teacher_config["vocab_size"] > top,
        KEY,
        f"the teacher's vocab_size={teacher_config['vocab_size']} ({teacher_path}/config.json) has no row for "
        f"the student's token id {top}: use a teacher with the student's tokenizer",
    )
    limit = position_limit(teacher_config)
    require(
        not isinstance(limit, int) or sequence_length <= limit,
        KEY,
        f"data.max_prompt_length + data.max_response_length = {sequence_length} is longer than the teacher's "
        f"max_position_embeddings={limit} ({teacher_path}/config.json): use a teacher with as many positions, "
        f"or lower data.max_prompt_length or data.max_response_length",
    )
    try:  # the actor's layout builds the teacher: its heads and layers must split the same way
        check_layout(SimpleNamespace(_name_or_path=teacher_path, **teacher_config), parallel, world_size)
    except ValueError as error:
        raise ConfigError(KEY, f"the teacher ({teacher_path}) is built in the actor's layout: {error}") from None
    if planning:  # a plan reads config.json only
        return
    check_same_tokens(cfg.actor_rollout_ref.model.path, teacher_path)
    check_weight_files(teacher_path, KEY)
    check_weight_shapes(teacher_path, teacher_config, KEY)


def teacher_config(cfg: Cfg) -> dict | None:
    """The teacher's config.json when distillation is on (dagrl.plan's memory; pre-flight has read it), else None."""
    if not cfg.distillation.enabled:
        return None
    return read_hf_config(cfg.distillation.teacher_model.model_path, key=KEY)
