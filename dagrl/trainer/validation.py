"""Validation: sample the validation set with the rollout's current weights and score it
(val-core/<source>/acc/mean@n). A stop signal cuts it between generations (`ValidationCut`), so that a preempted
run's checkpoint lands within the scheduler's grace instead of after the whole validation set; with separate pools
it runs in the rollout pool, which a signal to either pool cuts (the role's `validation_stopped`)."""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np
import torch

from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.nodes.common import rollout_session, sample, sampling_seed
from dagrl.placement import WorldLayout
from dagrl.trainer.timing import Progress
from dagrl.trainer.tracking import Tracker, dump_generations, generation_records, log_generations, mlflow_tracking_uri
from dagrl.utils import dist
from dagrl.utils import watchdog
from dagrl.utils.watchdog import beat

logger = logging.getLogger(__name__)


class ValidationCut(Exception):
    """A stop signal came during validation: it stopped between two generations, its metrics unlogged."""


def validate(trainer, step: int) -> dict[str, float]:
    """val-core/* (and val-aux/* of multi-turn runs) of the rollout's current weights on the validation set, labelled
    `step`; collective over the rollout's ranks."""
    cfg = trainer.cfg.actor_rollout_ref.rollout
    val = cfg.val_kwargs
    sampling = SamplingSpec(
        n=val.n,
        temperature=val.temperature,
        top_p=val.top_p,
        top_k=val.top_k,
        do_sample=val.do_sample,
        response_length=trainer.shape.response_length,
    )
    rollout_dp = trainer.shape.layout.rollout_dp
    positions = np.array_split(np.arange(len(trainer.val_data)), rollout_dp)[trainer.rollout_dp_rank]
    chunk = max(trainer.cfg.data.train_batch_size * cfg.n // rollout_dp, 1)
    records: list[dict] = []
    turn_metrics: dict[str, list[tuple[float, int]]] = defaultdict(list)  # multi-turn, with row counts
    # rank 0's share stands for every rank's (np.array_split gives it the largest)
    total = len(trainer.val_data)
    progress = Progress(
        f"validation (step {step})", total, "prompts", logger.info if trainer.rank == 0 else logger.debug
    )
    largest = len(np.array_split(np.arange(total), rollout_dp)[0])  # every rank checks for a stop as often
    with rollout_session(trainer.ctx):
        for start in range(0, largest, chunk):
            if trainer.validation_stopped():  # collective: every rank stops before the same generation
                logger.warning(
                    "validation (step %d) stopped by %s after %d of %d prompts",
                    step,
                    trainer.stop.signal or "a stop signal on another rank",
                    start,
                    len(positions),
                )
                raise ValidationCut(step)
            if start >= len(positions):
                continue
            progress.update(round(total * start / max(len(positions), 1)))
            beat("validation", step)
            prompts = trainer.val_data.rows(positions[start : start + chunk])
            seed = sampling_seed(cfg.seed, step, trainer.rollout_dp_rank, f"val{start}")
            batch, sampled = sample(trainer.ctx, prompts, sampling, seed)
            for key, value in sampled.items():
                if not key.startswith("timing_s/"):  # validation's own time is timing_s/testing
                    turn_metrics[key].append((value, len(batch)))
            scores, _ = trainer.ctx.reward_fn(batch, trainer.tokenizer)
            records.extend(generation_records(batch, scores, trainer.tokenizer))
    progress.finish()
    records = _gather_records(records, trainer.shape.layout)
    if trainer.cfg.trainer.validation_data_dir and trainer.rank == 0:
        dump_generations(trainer.cfg.trainer.validation_data_dir, step, records)
    if trainer.cfg.trainer.log_val_generations > 0 and trainer.rank == 0:
        log_generations(records, trainer.cfg.trainer.log_val_generations, step)
    metrics = val_metrics(records, sampling.n)
    if turn_metrics:
        means = {
            f"val-aux/{key}": sum(v * w for v, w in pairs) / sum(w for _, w in pairs)
            for key, pairs in turn_metrics.items()
        }
        metrics.update(dist.mean_over_ranks(means))
    return metrics


def _gather_records(records: list[dict], layout: WorldLayout) -> list[dict]:
    """Every rank's validation records, one copy per rollout-TP group."""
    if dist.world_size() == 1:
        return records
    gathered: list[list[dict]] = [None] * dist.world_size()  # type: ignore[list-item]
    torch.distributed.all_gather_object(gathered, records)
    return [record for rank, part in enumerate(gathered) if layout.is_rollout_tp_leader(rank) for record in part]


def val_metrics(records: list[dict], n: int) -> dict[str, float]:
    """val-core/<data_source>/acc/mean@n: mean over prompts of the mean score of their n responses."""
    by_source: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        by_source[record["data_source"]][record["index"]].append(record["score"])
    metrics = {}
    for source, prompts in by_source.items():
        metrics[f"val-core/{source}/acc/mean@{n}"] = float(np.mean([np.mean(s) for s in prompts.values()]))
    return metrics


def validate_only(trainer, step: int) -> None:
    """trainer.val_only: validate the weights the run starts from (step 0: model.path; else the checkpoint
    resumed), log the metrics at that step and exit: no training step, no checkpoint."""
    config = trainer.cfg.trainer
    tracker = Tracker(
        config.project_name,
        config.experiment_name,
        trainer.loggers,
        trainer.tensorboard_dir,
        trainer.jsonl_path,
        trainer.total_steps,
        step,
        enabled=trainer.rank == 0,
        config=trainer.cfg.to_dict,
        mlflow_uri=mlflow_tracking_uri(config.default_local_dir),
    )
    try:
        watchdog.started()
        metrics = trainer.validate(step)
        tracker.log(metrics, step)
    except ValidationCut:
        return  # stopped by a signal: nothing to save, nothing logged
    finally:
        tracker.close()
    if trainer.rank == 0:
        logger.info(
            "trainer.val_only: validated the weights of step %d (%s) and stopped without training",
            step,
            ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items())),
        )


def dump_rollouts(trainer, step: int, batch) -> None:
    """trainer.rollout_data_dir: the step's trained responses as <dir>/<step>.jsonl (collective). The batch is in
    the actor layout, where the ranks of one model-parallel group hold the same rows: one copy per DP rank."""
    records = generation_records(batch, batch["token_level_scores"], trainer.tokenizer)
    gathered = dist.all_gather_objects((trainer.shape.layout.dp_rank(trainer.rank), records))
    if trainer.rank == 0:
        shards = dict(reversed(gathered))  # the first rank of each DP rank
        dump_generations(
            trainer.cfg.trainer.rollout_data_dir,
            step,
            [{"step": step, **record} for dp_rank in sorted(shards) for record in shards[dp_rank]],
        )
