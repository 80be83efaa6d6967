"""`python3 -m dagrl.doctor <the overrides you would give dagrl.main_dag>`: check the install and the model's
numerics at the run's own layout before spending GPU hours on it.

It composes the config and runs pre-flight exactly as dagrl.main_dag does (a bad override: the same one line,
exit 2), checks the install against dagrl/doctor/versions.py (a known-bad combination: one line each, exit 2),
then builds the run's Megatron actor (its TP/PP/VPP/EP, from model.path) and its rollout engine, syncs the weights
for real and compares log-probs and hidden states (dagrl/doctor/numerics.py). Launch it as the run is launched
(torchrun for more than one process). Exit 0: the weights map exactly (an FP8 rollout's: within its rounding) and
every gap is within its floor; 1: a finding, named in the verdict line. `trainer.parity_check=true` runs the
numerics inside a run before step 1 and logs them as `doctor/...` metrics.
"""

from __future__ import annotations

import logging
import os

from dagrl.config.tree import Cfg

logger = logging.getLogger(__name__)


def needs(cfg: Cfg) -> set[str]:
    """What of the stack the run uses beyond the core, for the environment check."""
    from dagrl.utils import precision

    rollout = cfg.actor_rollout_ref.rollout
    used = {rollout.name}
    dtypes = (cfg.actor_rollout_ref.actor.megatron.param_dtype, rollout.dtype)
    if any(precision.resolve(dtype) == "bfloat16" for dtype in dtypes):
        used.add("bf16")
    if rollout.quantization == "fp8":
        used.add("fp8")
    return used


def layout_text(cfg: Cfg, shape, actor) -> str:
    """The report's header: the layout, the actor's layer spec (its kernels set the actor's own rounding: Transformer
    Engine's fused norms and GEMMs, or Megatron's local modules) and the rollout."""
    from dagrl.engine.megatron.hf_config import layer_spec_name

    layout = shape.parallel
    return (
        f"TP{layout.tensor_model_parallel_size} PP{layout.pipeline_model_parallel_size}"
        f" VPP{layout.virtual_pipeline_model_parallel_size or 1} CP{layout.context_parallel_size}"
        f" EP{layout.expert_model_parallel_size}, {layer_spec_name(actor.modules)} spec,"
        f" {cfg.actor_rollout_ref.rollout.name} rollout"
        + (" (fp8)" if cfg.actor_rollout_ref.rollout.quantization == "fp8" else "")
    )


def examine(cfg: Cfg, shape, actor, rollout, tokenizer, prompt_tokens: int = 16, response_tokens: int = 16):
    """The numerics of the run's own engines (collective): a Diagnosis."""
    from dagrl.doctor import fp8
    from dagrl.doctor.numerics import diagnose
    from dagrl.trainer.build import run_dtype
    from dagrl.utils import precision

    import torch

    rollout_dtype = getattr(torch, run_dtype(cfg, precision.ROLLOUT_DTYPE))
    bucket_bytes = int(cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes) << 20
    return diagnose(
        actor,
        rollout,
        tokenizer,
        os.path.expanduser(cfg.actor_rollout_ref.model.path),
        rollout_dtype,
        bucket_bytes,
        prompt_tokens=prompt_tokens,
        response_tokens=response_tokens,
        fp8_layout=fp8.layout(cfg, shape),
    )


def before_training(cfg: Cfg, ctx) -> dict[str, float]:
    """trainer.parity_check: the doctor on the run's own actor and rollout before step 1; its report goes to the
    log (a warning when it has a finding, which does not stop the run) and its figures come back as metrics."""
    from dagrl.config.errors import ConfigError
    from dagrl.doctor import environment
    from dagrl.doctor.report import metrics, render

    if ctx.rollout is None:  # the training pool of a two-pool run: the rollout lives in other processes
        raise ConfigError(
            "trainer.parity_check",
            "trainer.parity_check=true needs the rollout beside the actor (actor_rollout_ref.hybrid_engine=true): "
            "set it false for separate pools",
        )
    for problem in environment.problems(environment.current(), needs(cfg)):
        logger.warning("%s", problem)
    from dagrl.nodes.common import rollout_session

    with rollout_session(ctx):  # woken (and put back to sleep) as a step wakes it: offloads, memory, versions
        diagnosis = examine(cfg, ctx.shape, ctx.actor, ctx.rollout, ctx.tokenizer)
    if ctx.rank == 0:
        report = render(diagnosis, layout_text(cfg, ctx.shape, ctx.actor))
        (logger.info if diagnosis.ok else logger.warning)("doctor:\n%s", report)
    return metrics(diagnosis)
