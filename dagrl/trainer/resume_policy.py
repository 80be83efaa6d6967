"""What a resumed run may change: every key whose value differs from the config saved in the checkpoint gets one
line at start, `applied` or `refused`; any refused key stops the run in pre-flight.

Applied is the default: most keys are read afresh every step (the loss, rollout and reward settings, the run
length, loggers), and the optimizer's schedule is rebuilt from the current config on load (Megatron's
override_opt_param_scheduler), so a new `optim.lr` takes effect from the first resumed step. Refused are the keys
the saved state was built for, where the resumed run would silently train on other rows or misread the state.
actor_rollout_ref.model.path is refused when it names another model while the saved one is still here: a resume
loads the checkpoint's weights, so the new model's would never be trained (a model moved, or a resume on another
machine, where the saved directory is gone, is applied: the same model at a new path).

The dtypes are compared as resolved on each side (`auto` by the machine, `bf16` as `bfloat16`), the saved
param_dtype as the actor checkpoint records it: `auto` that chose bf16 on the saving machine and chooses bf16 here is
no change, and `auto` that chose otherwise on another machine is one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from dagrl.config.errors import ConfigError
from dagrl.config.tree import leaves
from dagrl.utils import precision
from dagrl.utils.paths import another_model

logger = logging.getLogger(__name__)

_SAMPLER = "the sampler's saved position indexes the rows these settings select"
REFUSED = {
    "data.train_files": _SAMPLER,
    "data.train_batch_size": _SAMPLER,
    "data.seed": _SAMPLER,
    "data.shuffle": _SAMPLER,
    "data.filter_overlong_prompts": _SAMPLER,
    "actor_rollout_ref.model.trainable_top_layers": "the saved optimizer state covers the trained layers only",
    "critic.model.trainable_top_layers": "the saved optimizer state covers the trained layers only",
}
for _lora in ("actor_rollout_ref.model.lora", "critic.model.lora"):
    REFUSED[f"{_lora}.rank"] = "the checkpoint holds adapters of the saved rank"
    REFUSED[f"{_lora}.target_modules"] = "the checkpoint holds adapters on the saved linears"
_LOAD_CONTENTS = "actor_rollout_ref.actor.checkpoint.load_contents"
# where the choice of resume is itself the change, or the key names the run's files rather than a setting
NOT_SETTINGS = ("trainer.resume_mode", "trainer.resume_from_path", "trainer.default_local_dir")
MODEL_PATH = "actor_rollout_ref.model.path"
DISTRIBUTED_OPTIMIZER = "actor_rollout_ref.actor.megatron.use_distributed_optimizer"  # the critic's too


def refusal(key: str, now: dict[str, Any], old: Any = None) -> str | None:
    """Why a resume may not change `key` from `old` (None: it may), given the current config's leaves `now`."""
    if key in REFUSED:
        return REFUSED[key]
    if key == MODEL_PATH and another_model(old, now.get(key)):
        return (
            f"the checkpoint holds the weights trained from {old}, and a resume loads those: {now.get(key)} would "
            f"give only its config and tokenizer, not its weights"
        )
    if key == "data.max_prompt_length" and now.get("data.filter_overlong_prompts"):
        return _SAMPLER + " (data.filter_overlong_prompts=true drops rows by this length)"
    if key == precision.PARAM_DTYPE and "optimizer" in (now.get(_LOAD_CONTENTS) or ["optimizer"]):
        return (
            "Megatron's optimizer state of bfloat16 parameters holds fp32 main copies, that of float32 ones "
            "none; `auto` chooses by the machine, so name the saved dtype, or restore the weights alone with "
            f"{_LOAD_CONTENTS}=[model,extra]"
        )
    if key == DISTRIBUTED_OPTIMIZER and "optimizer" in (now.get(_LOAD_CONTENTS) or ["optimizer"]):
        return (
            "the saved optimizer state is in the format of the optimizer that wrote it (plain or distributed), "
            f"which the other does not read; restore the weights alone with {_LOAD_CONTENTS}=[model,extra]"
        )
    if key == "async_training.partial_rollout":
        return "the checkpoint's pool of partial rollouts (prompts in flight) is carried by partial rollout only"
    if key in (
        "actor_rollout_ref.rollout.n",
        "data.max_response_length",
        "actor_rollout_ref.rollout.response_length",
    ) and now.get("async_training.partial_rollout"):
        return "the partial rollouts carried in the checkpoint were sampled for the saved group size and length"
    if key == "algorithm.kl_ctrl.kl_coef" and now.get("algorithm.kl_ctrl.type") == "adaptive":
        return "the adaptive KL controller continues from its saved coefficient"
    return None


def changed_keys(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, saved value, current value) of every leaf that differs, in key order ("(absent)" where one side
    lacks the key: a checkpoint of an older dagrl)."""
    old, new = leaves(saved), leaves(current)
    for side in (old, new):
        side.update({key: precision.resolve(side[key]) for key in precision.KEYS if key in side})
    return [
        (key, old.get(key, "(absent)"), new.get(key, "(absent)"))
        for key in sorted(old.keys() | new.keys())
        if key not in NOT_SETTINGS and old.get(key, "(absent)") != new.get(key, "(absent)")
    ]


def typed(value: Any) -> str:
    """A saved value as the command line takes it back: null and true/false, not Python's None and True; a list
    as one quoted shell word, '[a,b]'."""
    if isinstance(value, list):
        return "'[" + ",".join(typed(item) for item in value) + "]'"
    if value is None:
        return "null"
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def check_changed_settings(checkpoint: Path, config_file: str, current: dict[str, Any], log: bool) -> list[str]:
    """The start lines for a resume from `checkpoint` (one per changed key); ConfigError naming every refused key.
    A checkpoint saved without its config (older dagrl) is compared with nothing."""
    path = checkpoint / config_file
    if not path.is_file():
        if log:
            logger.debug("resume from %s: no %s saved with it; settings are not compared", checkpoint, config_file)
        return []
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(
            "trainer.default_local_dir",
            f"{path} cannot be read ({error}): restore it from the run's copy, or resume from another checkpoint",
        ) from error
    recorded = _recorded_param_dtype(checkpoint)
    if recorded is not None:  # what the weights are, whatever the saved config said (`auto`, an alias)
        saved = _with_leaf(saved, precision.PARAM_DTYPE, recorded)
    lines, refused, changes, now, saved_leaves = [], [], [], leaves(current), leaves(saved)
    for key, old, new in changed_keys(saved, current):
        why = refusal(key, now, old)
        verdict = f"refused ({why})" if why else "applied"
        lines.append(f"resume from {checkpoint.name}: {key} changed {old!r} -> {new!r}: {verdict}")
        if why:
            refused.append((key, f"{key}={typed(old)}"))  # as typed on the command line: null, not None
            changes.append(f"{key} (the checkpoint's {typed(old)}, now {typed(new)})")
    if log:
        for line in lines:
            (logger.warning if "refused" in line else logger.info)(line)
    if refused:
        first = refused[0][0]
        raise ConfigError(
            first,
            f"resuming from {checkpoint} with changed {', '.join(changes)}, which a resume cannot change "
            f"({refusal(first, now, saved_leaves.get(first))}): set them back to the saved values "
            f"({' '.join(setting for _, setting in refused)}), or start a new run in another trainer.default_local_dir",
        )
    return lines


def _recorded_param_dtype(checkpoint: Path) -> str | None:
    """The dtype the checkpoint's actor part records (None: no actor part, or one of a dagrl that did not record it)."""
    actor = checkpoint / "actor"
    if not (actor / "metadata.json").is_file():
        return None
    from dagrl.engine.megatron.checkpoint import describe

    try:
        return describe(str(actor))["param_dtype"]
    except ValueError:  # not written by dagrl: check_resume has said so already
        return None


def _with_leaf(data: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of the nested `data` with the leaf `key` set."""
    import copy

    data = copy.deepcopy(data)
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return data
