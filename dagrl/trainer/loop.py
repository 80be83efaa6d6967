"""The training loop: resume, validate, run the graph every step, log, checkpoint."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import torch

from dagrl.agent.setup import build_agent_loop
from dagrl.algo.kl import KLController
from dagrl.config.derived import needs_reference, total_steps
from dagrl.config.errors import RunError
from dagrl.config.schema.root import typed
from dagrl.config.tree import Cfg
from dagrl.config.shape import RunShape
from dagrl.dag.graph import graph_from_config, run_graph
from dagrl.data.batch import Batch
from dagrl.data.sampler import ORDERS, EpochSampler, rank_share
from dagrl.nodes.context import StepContext, WeightVersions
from dagrl.nodes.layout import check_graph as check_layout_node
from dagrl.trainer import build
from dagrl.trainer.checkpoint import CONFIG_FILE, CheckpointManager, finished_step, resume_target
from dagrl.trainer.ledger import LEDGER_FILE, PromptLedger, in_flight_records, step_records
from dagrl.trainer.partial_state import read_partial, read_partials, restore_partial, write_partials
from dagrl.trainer.profiler import StepProfiler
from dagrl.trainer.timing import Timer, node_timer
from dagrl.trainer.tracking import Tracker, mlflow_tracking_uri, tensorboard_dir
from dagrl.trainer.validation import dump_rollouts, validate_only
from dagrl.utils import dist
from dagrl.utils import watchdog
from dagrl.utils.faults import fault_point
from dagrl.utils.preemption import StopRequest, restart_count

logger = logging.getLogger(__name__)


class Trainer:
    """One process's part of a run: colocated, every part; with separate pools (shape.pool "rollout" or "train",
    trainer/pools.py) the rollout side or the training side of the same graph, engines and checkpoints."""

    def __init__(self, cfg: Cfg, shape: RunShape, bridge=None) -> None:
        self.cfg, self.shape = cfg, shape
        self.rank, self.world = dist.rank(), dist.world_size()
        trainer = cfg.trainer
        started = time.perf_counter()
        say = logger.info if self.rank == 0 else logger.debug  # start-up progress: minutes pass before step 1
        self.graph = graph_from_config(cfg.dag)
        check_layout_node(self.graph, shape.placement.world_size if shape.placement else self.world)
        self.feed = None  # the training pool's link to the rollout pool
        if shape.two_pools:
            from dagrl.trainer.pools import Feed, split_graph

            self.graph = split_graph(self.graph)[0 if shape.pool == "rollout" else 1]
            if shape.pool == "train":
                self.feed = Feed(bridge, leader=self.rank == 0)
        self.message: dict | None = None  # training pool: the rollout pool's message of the current step
        self.rollout_resume: dict | None = None  # training pool: the checkpoint's rollout state, for the rollout pool
        self.start_validated: bool | None = None  # resume: whether the run that saved the start step validated it
        self.tokenizer = build.load_tokenizer(cfg.actor_rollout_ref.model.path)
        agent = build_agent_loop(cfg, self.tokenizer)  # before any model: a template it cannot use stops here
        tools = agent.schemas if agent is not None else None
        self.train_data = build.build_dataset(cfg, cfg.data.train_files, self.tokenizer, shape, tools)
        self.val_data = (
            build.build_dataset(cfg, cfg.data.val_files, self.tokenizer, shape, tools) if cfg.data.val_files else None
        )
        self.sampler = EpochSampler(
            len(self.train_data), cfg.data.train_batch_size, seed=cfg.data.seed, shuffle=cfg.data.shuffle
        )
        self.total_steps = total_steps(cfg, len(self.train_data))
        say(
            "data: %d training prompts, %d steps of %d; %s validation prompts (%.1f s)",
            len(self.train_data),
            self.total_steps,
            cfg.data.train_batch_size,
            len(self.val_data) if self.val_data is not None else "no",
            time.perf_counter() - started,
        )
        self.checkpoints = CheckpointManager(
            trainer.default_local_dir, trainer.max_actor_ckpt_to_keep, self.rank, dist.barrier
        )
        kl = cfg.algorithm.kl_ctrl
        self.kl_ctrl = KLController(kl.type, kl.kl_coef, kl.target_kl, kl.horizon)
        actor = reference = critic = teacher = rollout = None
        # a colocated run that already finished builds no model or engine: fit says so and returns
        self.finished_at = None if trainer.val_only or shape.two_pools else finished_step(trainer, self.total_steps)
        build_engines = self.finished_at is None
        if build_engines and shape.pool != "rollout":
            say(
                "building the actor%s from %s",
                " and the reference" if needs_reference(cfg) else "",
                cfg.actor_rollout_ref.model.path,
            )
            built = time.perf_counter()
            actor, reference = build.build_actor_and_reference(cfg, shape, self.total_steps)
            critic = build.build_critic(cfg, shape, self.total_steps) if "critic" in self.graph.roles() else None
            if "teacher" in self.graph.roles():
                say("building the teacher from %s", cfg.distillation.teacher_model.model_path)
                teacher = build.build_teacher(cfg, shape)
            say("models built in %.1f s", time.perf_counter() - built)
        if build_engines and shape.pool != "train":
            say("starting the %s rollout engine", cfg.actor_rollout_ref.rollout.name)
            device = torch.cuda.current_device() if torch.cuda.is_available() else 0  # set by the process group
            built = time.perf_counter()
            rollout = build.build_rollout(cfg, shape, self.tokenizer, build.device_for_rank(device))
            say("rollout engine started in %.1f s", time.perf_counter() - built)
        if shape.pool == "rollout":  # the rollout's own GPUs: weights come from the training pool, nothing to offload
            from dagrl.trainer.pools import WeightInbox

            actor, rollout.colocated = WeightInbox(), False
        if rollout is not None and rollout.colocated:  # asleep until the first rollout wakes it: what loads before
            rollout.sleep()  # step 1 (a resume's optimizer state beside the actor's own) gets the engine's memory
        self.ctx = StepContext(
            cfg=typed(cfg),
            shape=shape,
            actor=actor,
            rollout=rollout,
            reference=reference,
            reward_fn=build.build_reward_fn(cfg, shape),
            tokenizer=self.tokenizer,
            kl_ctrl=self.kl_ctrl,
            versions=WeightVersions(),
            rank=self.rank,
            critic=critic,
            draw_prompts=self.local_prompts,
            agent=agent,
            teacher=teacher,
        )
        if cfg.async_training.partial_rollout and shape.pool != "train":
            from dagrl.nodes.partial_rollout import PartialRolloutBuffer

            self.ctx.partial = PartialRolloutBuffer(agent)
        self.consecutive_skips = 0
        self.stop = StopRequest(trainer)  # SIGTERM/SIGUSR1/Ctrl-C: stop after the current step with a checkpoint
        if bridge is not None:  # ...unless the other pool was killed: then now (Bridge.check_peers_alive)
            stop = self.stop  # not the trainer: the bridge outlives it, and the trainer's engines hold process groups
            bridge.stop_signal = lambda: stop.signal
        self.preemption_grace_s = trainer.preemption_grace_s
        self.ledger: PromptLedger | None = None  # rank 0's, opened by fit
        self.ledger_resume: tuple[dict | None, Path | None] = (None, None)  # (its length, its file) at the checkpoint
        self.drawn: list[str] = []  # ledger uids this rank drew in the current step
        self.loggers = [trainer.logger] if isinstance(trainer.logger, str) else list(trainer.logger)
        self.tensorboard_dir = tensorboard_dir(trainer.tensorboard_dir, trainer.default_local_dir)
        self.jsonl_path = os.path.join(os.path.expanduser(trainer.default_local_dir), "metrics.jsonl")
        self.profiler = StepProfiler(cfg.global_profiler)  # global_profiler.*: trainer/profiler.py
        say("ready in %.0f s", time.perf_counter() - started)

    @property
    def rollout_dp_rank(self) -> int:
        """Consecutive ranks form one rollout-TP group and share a data shard."""
        return self.shape.layout.rollout_dp_rank(self.rank)

    # ---- checkpoints ----------------------------------------------------------------------------
    def resume(self) -> int:
        """Load the checkpoint trainer.resume_mode asks for; return its step (0 when starting fresh)."""
        self.checkpoints.clear_partial()
        path = resume_target(self.cfg.trainer)
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
        if self.ctx.partial is not None:
            restore_partial(self.ctx, self.train_data, read_partial(path, self.rollout_dp_rank))
        if self.feed is not None:  # the rollout pool continues from the checkpoint's rollout state
            shards = self.shape.placement.pool("rollout").size // self.shape.rollout_tp
            self.rollout_resume = {"sampler": state["sampler"], "partials": read_partials(path, shards)}
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

    def partial_states(self) -> dict[int, list]:
        """The partial-rollout buffers this rank saves, by rollout shard: its own (colocated), or every shard's as
        the rollout pool sent them with the step's batch (the training pool's rank 0)."""
        if self.feed is not None:
            partials = self.message["partials"] if self.message is not None and self.rank == 0 else None
            return dict(enumerate(partials)) if partials is not None else {}
        if self.ctx.partial is not None and self.shape.layout.is_rollout_tp_leader(self.rank):
            return {self.rollout_dp_rank: self.ctx.partial.state_dict()}
        return {}

    def restore_rollout_state(self, state: dict) -> None:
        """The rollout pool: the sampler and this shard's partial-rollout buffer the training pool resumed with."""
        self.sampler.load_state_dict(state["sampler"])
        if self.ctx.partial is not None and state["partials"] is not None:
            restore_partial(self.ctx, self.train_data, state["partials"][self.rollout_dp_rank])

    def save_hf_model(self, actor_dir: Path) -> None:
        """actor/huggingface (verl's layout): the actor's weights as an HF model directory, with config and
        tokenizer files from model.path. Collective (the weight export); rank 0 writes."""
        from dagrl.engine.megatron.checkpoint import HF_DIR, write_hf_model

        bucket_bytes = self.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes << 20
        write_hf_model(
            self.ctx.actor.export_weights(bucket_bytes),
            actor_dir / HF_DIR,
            os.path.expanduser(self.cfg.actor_rollout_ref.model.path),
            write=self.rank == 0,
        )

    # ---- validation -----------------------------------------------------------------------------
    def validate(self, step: int) -> dict[str, float]:
        fault_point("validation", step)
        if self.feed is not None:  # validation runs in the rollout pool
            return self.feed.val(step)
        from dagrl.trainer.validation import validate

        return validate(self, step)

    # ---- the loop -------------------------------------------------------------------------------
    def local_prompts(self, step: int, round_index: int = 0) -> Batch:
        """This rank's rollout-DP shard of the sampler's next global batch (round > 0: extra prompts a node
        draws within the step, e.g. dynamic sampling)."""
        epoch, indices = self.sampler.next_batch()
        mine = rank_share(len(indices), self.rollout_dp_rank, self.shape.layout.rollout_dp)
        batch = self.train_data.rows(indices[mine])  # only this rank's rows are read and tokenized
        # unique over ranks, steps and rounds
        batch["uid"] = [f"{step}:{round_index}:{int(position)}" for position in mine]
        batch["position"] = [int(position) for position in indices[mine]]  # the dataset row
        batch["ledger_uid"] = [f"{epoch}:{int(position)}" for position in indices[mine]]  # unique over the run
        self.drawn.extend(batch["ledger_uid"])
        return batch

    def fit(self) -> None:
        from dagrl.trainer.pools import Schedule

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
            if self.feed is not None:
                self.feed.start(start_step, None)  # the rollout pool has nothing to do either
                self.feed.close()
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
        bucket_bytes = int(self.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes) << 20
        try:
            if self.rank == 0:  # cut what steps after the checkpoint (or an end of run) wrote: they run again
                ledger = Path(os.path.expanduser(trainer.default_local_dir)) / LEDGER_FILE
                self.ledger = PromptLedger(ledger, *self.ledger_resume)
            if self.feed is not None:
                self.feed.start(start_step, self.rollout_resume, self.start_validated)
                self.feed.push(self.ctx.actor, start_step, bucket_bytes)
            watchdog.started()
            if schedule.validated(start_step):
                tracker.log(self.validate(start_step), start_step)
            restarts, stop = restart_count(), None
            self.stop.keeps_work = True  # from here a stop signal waits for the step's end and its checkpoint
            for step in range(start_step + 1, self.total_steps + 1):
                metrics = self.profiler.run(step, self.train_step)
                if restarts:
                    metrics["training/restarts"] = float(restarts)
                if self.feed is not None and schedule.pushed(step):
                    self.feed.push(self.ctx.actor, step, bucket_bytes)
                    metrics.update(self.feed.metrics)
                last = step == self.total_steps
                if schedule.validated(step):
                    start = time.perf_counter()
                    metrics.update(self.validate(step))
                    metrics["timing_s/testing"] = time.perf_counter() - start
                tracker.log(metrics, step)
                self.check_skips(metrics, step)
                save_freq = trainer.save_freq
                saved = save_freq > 0 and (step % save_freq == 0 or last)
                if saved:
                    self.save(step, schedule.validated(step))
                if last:  # after the checkpoint's ledger length: a resume drops them
                    self.write_ledger(in_flight_records(step, self.in_flight_uids()))
                tracker.advance()
                stop = None if last else self.stop.agreed(self.feed.bridge.store if self.feed else None)
                if stop:
                    self.stop_after(step, stop, saved, schedule.validated(step))
                    break
            if self.feed is not None:
                self.feed.close(stopped=stop is not None)
            if self.rank == 0:
                latest = self.checkpoints.latest()
                where = f"{trainer.default_local_dir} (newest: {latest[1].name})" if latest else "none written"
                logger.info("%s", tracker.summary(self.total_steps, where, self.jsonl_path, self.tensorboard_dir))
        finally:
            self.stop.keeps_work = False
            tracker.close()
            if self.ledger is not None:
                self.ledger.close()

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
        if self.feed is None:
            batch = self.local_prompts(step)
        else:  # the rollout pool generated and scored this step's batch
            from dagrl.trainer.pools import batch_of

            self.message, waited = self.feed.take(step)
            self.sampler.load_state_dict(self.message["sampler"])  # what this step's checkpoint resumes from
            batch = batch_of(self.message)
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
        if self.feed is None:
            return dist.mean_over_ranks(metrics)
        metrics["timing_s/trainer_wait"] = waited
        return {**self.message["metrics"], **dist.mean_over_ranks(metrics)}

    # ---- the prompt ledger (dagrl/trainer/ledger.py) ---------------------------------------------
    def record_prompts(self, step: int, batch: Batch, carried: list[str]) -> None:
        """The step's ledger lines from every rank's view (collective): the prompts trained on (actor layout),
        those drawn or carried in (rollout layout), those still in flight and why nodes dropped the others. The
        ranks of a model-parallel or rollout-TP group hold the same prompts: the sets dedupe them. With separate
        pools the rollout pool's view came with the batch."""
        trained = list(dict.fromkeys(batch.get("ledger_uid", [])))
        if self.feed is not None:
            message = self.message
            parts = [(uids, [], [], {}) for uids in dist.all_gather_objects(trained)]
            parts.append(([], [*message["carried"], *message["drawn"]], message["in_flight"], message["dropped"]))
        else:
            in_flight = self.ctx.partial.ledger_uids() if self.ctx.partial is not None else []
            parts = dist.all_gather_objects((trained, [*carried, *self.drawn], in_flight, self.ctx.dropped))
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

    def in_flight_uids(self) -> list[str]:
        """Prompts still in a partial-rollout buffer after the last step (collective when colocated)."""
        if self.feed is not None:
            return list(self.message["in_flight"]) if self.message is not None else []
        if self.ctx.partial is None:
            return []
        return [uid for part in dist.all_gather_objects(self.ctx.partial.ledger_uids()) for uid in part]

    def write_ledger(self, records: list[dict]) -> None:
        if self.ledger is not None:
            self.ledger.append(records)
