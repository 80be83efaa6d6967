"""The training loop: resume, validate, run the graph every step, log, checkpoint. `Trainer` is the colocated
trainer (every rank draws, generates and trains); the training pool of a run with separate pools is the same loop
with its batches from the rollout pool (trainer/pools/training.py, which overrides the hooks marked below)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import torch

from dagrl.config.errors import RunError
from dagrl.config.shape import RunShape
from dagrl.config.tree import Cfg
from dagrl.dag.graph import Graph, graph_from_config, imported, run_graph
from dagrl.data.batch import Batch
from dagrl.data.sampler import ORDERS
from dagrl.nodes.context import WeightVersions
from dagrl.nodes.layout import check_graph as check_layout_node
from dagrl.trainer.checkpoint import CONFIG_FILE, CheckpointManager, finished_step, resume_target
from dagrl.trainer.ledger import LEDGER_FILE, PromptLedger, in_flight_records, step_records
from dagrl.trainer.partial_state import read_partial, restore_partial, write_partials
from dagrl.trainer.pools.schedule import Schedule
from dagrl.trainer.runner import StepRunner
from dagrl.trainer.timing import Timer, node_timer
from dagrl.trainer.tracking import Tracker, mlflow_tracking_uri, tensorboard_dir
from dagrl.trainer.validation import ValidationCut, dump_rollouts, validate_only
from dagrl.utils import dist
from dagrl.utils import watchdog
from dagrl.utils.faults import fault_point
from dagrl.utils.preemption import restart_count

logger = logging.getLogger(__name__)


def step_graph(cfg: Cfg, shape: RunShape) -> Graph:
    """The run's whole graph, its reshard node checked against the layout (separate pools each run a part of it):
    pre-flight's, with the switches that are on (dag.switches), dagrl's node functions imported; built here only for
    a shape made without pre-flight."""
    graph = imported(shape.graph) if shape.graph is not None else graph_from_config(cfg.dag)
    check_layout_node(graph, shape.placement.world_size if shape.placement else dist.world_size())
    return graph


class Trainer(StepRunner):
    """The colocated trainer: one process's part of a run where every rank draws, generates and trains."""

    def __init__(self, cfg: Cfg, shape: RunShape, graph: Graph | None = None) -> None:
        super().__init__(cfg, shape, graph if graph is not None else step_graph(cfg, shape))
        trainer = cfg.trainer
        self.checkpoints = CheckpointManager(
            trainer.default_local_dir, trainer.max_actor_ckpt_to_keep, self.rank, dist.barrier
        )
        self.start_validated: bool | None = None  # resume: whether the run that saved the start step validated it
        self.consecutive_skips = 0
        self.preemption_grace_s = trainer.preemption_grace_s
        self.stop_store = None  # the store the stop decision is shared through beyond this pool (none colocated)
        self.ledger: PromptLedger | None = None  # rank 0's, opened by fit
        self.ledger_resume: tuple[dict | None, Path | None] = (None, None)  # (its length, its file) at the checkpoint
        self.loggers = [trainer.logger] if isinstance(trainer.logger, str) else list(trainer.logger)
        self.tensorboard_dir = tensorboard_dir(trainer.tensorboard_dir, trainer.default_local_dir)
        self.jsonl_path = os.path.join(os.path.expanduser(trainer.default_local_dir), "metrics.jsonl")

    def engines(self) -> dict:
        # a run that already finished builds no model or engine: fit says so and returns
        self.finished_at = None if self.cfg.trainer.val_only else finished_step(self.cfg.trainer, self.total_steps)
        return {} if self.finished_at is not None else {**self.build_models(), "rollout": self.start_rollout()}

    # ---- checkpoints ----------------------------------------------------------------------------
    def resume(self) -> int:
        """Load the checkpoint trainer.resume_mode asks for; return its step (0 when starting fresh)."""
        self.checkpoints.clear_partial()
        path = resume_target(self.cfg.trainer)
        self.checkpoints.set_aside_damaged(path)
        if path is None:
            return 0
        loading = time.perf_counter()
        state = torch.load(path / "data.pt", weights_only=True)  # no pickle from a checkpoint directory
        self.ctx.actor.load_checkpoint(str(path / "actor"))
        if self.ctx.critic is not None:  # pre-flight (check_resume) made sure the checkpoint has critic/
            self.ctx.critic.load_checkpoint(str(path / "critic"))
        self.sampler.load_state_dict(state["sampler"])
        if self.sampler.order != ORDERS[0]:
            logger.info(
                "%s predates dagrl's drawing of verl's prompt order (%s): the run goes on in the %s order it "
                "began with",
                path,
                ORDERS[0],
                self.sampler.order,
            )
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        self.resume_rollout(path, state)
        self.ledger_resume = (state.get("prompt_ledger"), path.parent / LEDGER_FILE)
        if self.ledger_resume[0] is None:
            logger.warning("%s predates the prompt ledger: its steps have no lines in %s", path, LEDGER_FILE)
        self.start_validated = state.get("validated")  # None: a checkpoint from before the record
        self.ctx.versions = WeightVersions(actor=state["global_step"], rollout=-1)
        logger.info("resumed from %s (step %d) in %.1f s", path, state["global_step"], time.perf_counter() - loading)
        return int(state["global_step"])

    def save(self, step: int, validated: bool) -> None:
        """Checkpoint `step` (`validated`: whether its weights were validated before the save, so that a resume
        from it does not validate them again); a model whose state holds NaN/inf stops the run instead (its
        checkpoint would poison every resume), leaving the last good checkpoint as the newest."""
        for name, engine in (("actor", self.ctx.actor), ("critic", self.ctx.critic)):
            if engine is not None and not engine.state_is_finite():
                latest = self.checkpoints.latest()
                raise RunError(
                    f"step {step}: the {name}'s parameters or optimizer state hold NaN/inf, so no "
                    f"checkpoint is saved (check the optimizer settings, e.g. {name} optim.lr); "
                    f"last good checkpoint: {latest[1] if latest else 'none'} (kept unchanged)"
                )

        def write(directory: Path) -> None:
            watchdog.beat("checkpoint: actor", step)
            self.ctx.actor.save_checkpoint(str(directory / "actor"))
            if "hf_model" in self.cfg.actor_rollout_ref.actor.checkpoint.save_contents:
                self.save_hf_model(directory / "actor")
            if self.ctx.critic is not None:
                watchdog.beat("checkpoint: critic", step)
                self.ctx.critic.save_checkpoint(str(directory / "critic"))
            write_partials(directory, self.partial_states())
            fault_point("between_shards", step)
            if self.rank == 0:
                torch.save(
                    {
                        "global_step": step,
                        "sampler": self.sampler.state_dict(),
                        "kl_ctrl": self.kl_ctrl.state_dict(),
                        "prompt_ledger": self.ledger.state() if self.ledger is not None else None,
                        "validated": validated,
                    },
                    directory / "data.pt",
                )
                (directory / CONFIG_FILE).write_text(json.dumps(self.cfg.snapshot(), indent=1))

        self.checkpoints.save(step, write, hooks=lambda phase: fault_point(phase, step))

    def save_hf_model(self, actor_dir: Path) -> None:
        """actor/huggingface (verl's layout): the actor's weights as an HF model directory, with config and
        tokenizer files from model.path. Collective (the weight export); rank 0 writes."""
        from dagrl.engine.megatron.hf_export import HF_DIR, write_hf_model

        bucket_bytes = self.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes << 20
        write_hf_model(
            self.ctx.actor.export_weights(bucket_bytes),
            actor_dir / HF_DIR,
            os.path.expanduser(self.cfg.actor_rollout_ref.model.path),
            write=self.rank == 0,
        )

    # ---- the loop -------------------------------------------------------------------------------
    def fit(self) -> None:
        start_step = self.finished_at if self.finished_at is not None else self.resume()
        if self.cfg.trainer.val_only:
            return validate_only(self, start_step)
        if start_step >= self.total_steps:
            logger.info(
                "this run already finished: checkpoint at step %d of %d in %s; nothing to do",
                start_step,
                self.total_steps,
                self.cfg.trainer.default_local_dir,
            )
            self.nothing_to_do(start_step)
            return
        trainer = self.cfg.trainer
        schedule = Schedule.of(self.cfg, start_step, self.total_steps, self.start_validated)
        tracker = Tracker(
            trainer.project_name,
            trainer.experiment_name,
            self.loggers,
            self.tensorboard_dir,
            self.jsonl_path,
            self.total_steps,
            start_step,
            enabled=self.rank == 0,
            config=self.cfg.to_dict,
            mlflow_uri=mlflow_tracking_uri(trainer.default_local_dir),
            keep_through=start_step if start_step > 0 else -1,
            validates=schedule.validated,
        )
        try:
            if self.rank == 0:  # cut what steps after the checkpoint (or an end of run) wrote: they run again
                ledger = Path(os.path.expanduser(trainer.default_local_dir)) / LEDGER_FILE
                self.ledger = PromptLedger(ledger, *self.ledger_resume)
            self.begin(start_step)
            watchdog.started()
            restarts, stop = restart_count(), None
            try:
                if schedule.validated(start_step):
                    tracker.log(self.validate(start_step), start_step)
            except ValidationCut:
                pass  # the stop below: nothing trained since the start, nothing to save
            stop = self.stop.agreed(self.stop_store)  # a stop signal during start-up: no step begins
            if stop:
                logger.warning(
                    "stopped on %s before step %d: nothing to save; relaunch to resume", stop, start_step + 1
                )
                self.end(stopped=True)
                return
            self.stop.keeps_work = True  # from here a stop signal waits for the step's end and its checkpoint
            checked = {}  # trainer.parity_check's figures, logged with step 1
            if trainer.parity_check:
                from dagrl.doctor import before_training

                checked = before_training(self.cfg, self.ctx)
            for step in range(start_step + 1, self.total_steps + 1):
                metrics = self.profiler.run(step, self.train_step)
                metrics.update(checked)
                checked = {}
                if restarts:
                    metrics["training/restarts"] = float(restarts)
                metrics.update(self.trained(step, schedule))
                last = step == self.total_steps
                validated = schedule.validated(step)
                if validated:
                    start = time.perf_counter()
                    try:
                        metrics.update(self.validate(step))
                    except ValidationCut:  # a stop signal: the checkpoint now, the weights validated on resume
                        validated = False
                    metrics["timing_s/testing"] = time.perf_counter() - start
                tracker.log(metrics, step)
                self.check_skips(metrics, step)
                save_freq = trainer.save_freq
                saved = save_freq > 0 and (step % save_freq == 0 or last)
                if saved:
                    self.save(step, validated)
                if last:  # after the checkpoint's ledger length: a resume drops them
                    self.write_ledger(in_flight_records(step, self.in_flight_uids()))
                tracker.advance()
                stop = None if last else self.stop.agreed(self.stop_store)
                if stop:
                    self.stop_after(step, stop, saved, validated)
                    break
            self.end(stopped=stop is not None)
            if self.rank == 0:
                latest = self.checkpoints.latest()
                where = f"{trainer.default_local_dir} (newest: {latest[1].name})" if latest else "none written"
                logger.info("%s", tracker.summary(self.total_steps, where, self.jsonl_path, self.tensorboard_dir))
        finally:
            self.stop.keeps_work = False
            tracker.close()
            if self.ledger is not None:
                self.ledger.close()

    def validation_stopped(self) -> bool:
        """A scheduler's stop (SIGTERM/SIGUSR1) cuts validation, to save within its grace; Ctrl-C lets the step's
        validation finish before its checkpoint (there is no grace to keep)."""
        return self.stop.agreed(self.stop_store) not in (None, "SIGINT")

    def stop_after(self, step: int, signal_name: str, saved: bool, validated: bool) -> None:
        """Preemption or Ctrl-C: checkpoint `step` (unless just saved) so that the relaunched run resumes from it."""
        if not saved:
            self.save(step, validated)
        if signal_name == "SIGINT":  # Ctrl-C: no grace to compare with; main prints the line and exits 130
            self.stop.stopped_after(step, self.total_steps, leader=self.rank == 0)
            return
        seconds, grace = self.stop.seconds_since(), self.preemption_grace_s
        logger.warning(
            "stopped on %s after step %d of %d: checkpoint global_step_%d written %.1f s after the signal "
            "(trainer.preemption_grace_s=%g%s); relaunch to resume",
            signal_name,
            step,
            self.total_steps,
            step,
            seconds,
            grace,
            "" if seconds <= grace else ": NOT within it, raise the grace",
        )

    def check_skips(self, metrics: dict[str, float], step: int) -> None:
        """Stop (before saving) after trainer.max_consecutive_skips steps whose updates were all skipped."""
        skipped_all = metrics.get("actor/skipped_steps", 0.0) >= 1.0
        self.consecutive_skips = self.consecutive_skips + 1 if skipped_all else 0
        limit = self.cfg.trainer.max_consecutive_skips
        if limit > 0 and self.consecutive_skips >= limit:
            latest = self.checkpoints.latest()
            raise RunError(
                f"{self.consecutive_skips} consecutive steps (up to {step}) had non-finite loss or gradients and "
                f"were skipped (trainer.max_consecutive_skips={limit}); last good checkpoint: "
                f"{latest[1] if latest else 'none'} (kept unchanged)"
            )

    def train_step(self, step: int) -> dict[str, float]:
        self.ctx.step = step
        self.ctx.dropped, self.drawn = {}, []
        carried = self.ctx.partial.ledger_uids() if self.ctx.partial is not None else []
        timer = Timer()
        start = time.perf_counter()
        batch = self.take_batch(step)
        fault_point("rollout", step)
        batch, metrics = run_graph(self.graph, self.ctx, batch, timer=node_timer(timer, step))
        seconds = time.perf_counter() - start
        if self.cfg.trainer.rollout_data_dir:
            dump_rollouts(self, step, batch)
        self.record_prompts(step, batch, carried)
        # the batch is in the actor layout: each DP shard is held by the TP x PP x CP ranks of one model-parallel
        # group; count tokens per GPU
        tokens = float(batch["attention_mask"].sum()) / self.shape.layout.model_parallel_size
        metrics.update({f"timing_s/{name}": value for name, value in timer.seconds.items()})
        metrics.update(
            {"timing_s/step": seconds, "perf/throughput": tokens / seconds, "training/global_step": float(step)}
        )
        return self.step_metrics(metrics)

    # ---- the prompt ledger (dagrl/trainer/ledger.py) ---------------------------------------------
    def record_prompts(self, step: int, batch: Batch, carried: list[str]) -> None:
        """The step's ledger lines from every rank's view (collective): the prompts trained on (actor layout),
        those drawn or carried in (rollout layout), those still in flight and why nodes dropped the others. The
        ranks of a model-parallel or rollout-TP group hold the same prompts: the sets dedupe them."""
        parts = self.ledger_views(list(dict.fromkeys(batch.get("ledger_uid", []))), carried)
        reasons = {uid: reason for *_, dropped in parts for uid, reason in dropped.items()}
        self.write_ledger(
            step_records(
                step,
                (u for part in parts for u in part[0]),
                (u for part in parts for u in part[1]),
                (u for part in parts for u in part[2]),
                reasons,
            )
        )

    def write_ledger(self, records: list[dict]) -> None:
        if self.ledger is not None:
            self.ledger.append(records)

    # ---- where the step's batch comes from: drawn and generated here (the training pool overrides these) ------
    def resume_rollout(self, path: Path, state: dict) -> None:
        """The checkpoint's rollout state (besides the sampler): this rank's partial-rollout buffer."""
        if self.ctx.partial is not None:
            restore_partial(self.ctx, self.train_data, read_partial(path, self.rollout_dp_rank))

    def nothing_to_do(self, start_step: int) -> None:
        """The run had finished before this launch."""

    def begin(self, start_step: int) -> None:
        """Before the first validation and step."""

    def take_batch(self, step: int) -> Batch:
        """The batch the step's graph starts from: this rank's share of the step's prompts."""
        return self.local_prompts(step)

    def step_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """The step's metrics, from this rank's."""
        return dist.mean_over_ranks(metrics)

    def trained(self, step: int, schedule: Schedule) -> dict[str, float]:
        """After the step's graph, before its validation; metrics of what it did."""
        return {}

    def end(self, stopped: bool) -> None:
        """After the last step, or (`stopped`) the step a stop signal ended the run after."""

    def partial_states(self) -> dict[int, list]:
        """The partial-rollout buffers this rank saves, by rollout shard: its own, if it leads a rollout-TP group."""
        if self.ctx.partial is not None and self.shape.layout.is_rollout_tp_leader(self.rank):
            return {self.rollout_dp_rank: self.ctx.partial.state_dict()}
        return {}

    def ledger_views(self, trained: list[str], carried: list[str]) -> list[tuple]:
        """Every rank's (trained, drawn or carried in, in flight, dropped with reasons) of the step (collective)."""
        in_flight = self.ctx.partial.ledger_uids() if self.ctx.partial is not None else []
        return dist.all_gather_objects((trained, [*carried, *self.drawn], in_flight, self.ctx.dropped))

    def in_flight_uids(self) -> list[str]:
        """Prompts still in a partial-rollout buffer after the last step (collective)."""
        if self.ctx.partial is None:
            return []
        return [uid for part in dist.all_gather_objects(self.ctx.partial.ledger_uids()) for uid in part]
