"""What every process of a run holds, whichever role it plays (the colocated trainer, the training pool or the
rollout pool): the config, tokenizer, data and sampler, its part of the graph, the engines its role needs in a
`StepContext`, its stop request and profiler; it draws this rank's prompts and validates."""

from __future__ import annotations

import logging
import time

import torch

from dagrl.agent.setup import build_agent_loop
from dagrl.algo.kl import KLController
from dagrl.config.derived import needs_reference, total_steps
from dagrl.config.schema.root import typed
from dagrl.config.shape import RunShape
from dagrl.config.tree import Cfg
from dagrl.dag.graph import Graph
from dagrl.data.batch import Batch
from dagrl.data.sampler import EpochSampler, rank_share
from dagrl.nodes.context import StepContext, WeightVersions
from dagrl.trainer import build
from dagrl.trainer.profiler import StepProfiler
from dagrl.utils import dist
from dagrl.utils.faults import fault_point
from dagrl.utils.preemption import StopRequest

logger = logging.getLogger(__name__)


class StepRunner:
    """One process's part of a run. A role says which engines it builds (`engines`) and whether it generates
    (`generates`: its partial-rollout buffer lives here); the colocated trainer does both sides."""

    generates = True

    def __init__(self, cfg: Cfg, shape: RunShape, graph: Graph) -> None:
        self.cfg, self.shape, self.graph = cfg, shape, graph
        self.rank = dist.rank()
        started = time.perf_counter()
        self.say = logger.info if self.rank == 0 else logger.debug  # start-up progress: minutes pass before step 1
        self.tokenizer = build.load_tokenizer(cfg.actor_rollout_ref.model.path)
        self.agent = build_agent_loop(cfg, self.tokenizer)  # before any model: a template it cannot use stops here
        tools = self.agent.schemas if self.agent is not None else None
        self.train_data = build.build_dataset(cfg, cfg.data.train_files, self.tokenizer, shape, tools)
        self.val_data = (
            build.build_dataset(cfg, cfg.data.val_files, self.tokenizer, shape, tools) if cfg.data.val_files else None
        )
        self.sampler = EpochSampler(
            len(self.train_data), cfg.data.train_batch_size, seed=cfg.data.seed, shuffle=cfg.data.shuffle
        )
        self.total_steps = total_steps(cfg, len(self.train_data))
        self.say("graph: %s", graph.describe())  # the one that runs: dag.nodes with the switches that are on
        self.say(
            "data: %d training prompts, %d steps of %d; %s validation prompts (%.1f s)",
            len(self.train_data),
            self.total_steps,
            cfg.data.train_batch_size,
            len(self.val_data) if self.val_data is not None else "no",
            time.perf_counter() - started,
        )
        kl = cfg.algorithm.kl_ctrl
        self.kl_ctrl = KLController(kl.type, kl.kl_coef, kl.target_kl, kl.horizon)
        self.finished_at: int | None = None  # the step of a colocated run that already finished (Trainer.engines)
        engines = self.engines()
        rollout = engines.get("rollout")
        if rollout is not None and rollout.colocated:  # asleep until the first rollout wakes it: what loads before
            rollout.sleep()  # step 1 (a resume's optimizer state beside the actor's own) gets the engine's memory
        self.ctx = StepContext(
            cfg=typed(cfg),
            shape=shape,
            actor=engines.get("actor"),
            rollout=rollout,
            reference=engines.get("reference"),
            reward_fn=build.build_reward_fn(cfg, shape),
            tokenizer=self.tokenizer,
            kl_ctrl=self.kl_ctrl,
            versions=WeightVersions(),
            rank=self.rank,
            critic=engines.get("critic"),
            draw_prompts=self.local_prompts,
            agent=self.agent,
            teacher=engines.get("teacher"),
        )
        if cfg.async_training.partial_rollout and self.generates:
            from dagrl.nodes.partial_rollout import PartialRolloutBuffer

            self.ctx.partial = PartialRolloutBuffer(self.agent)
        self.stop = StopRequest(cfg.trainer)  # SIGTERM/SIGUSR1/Ctrl-C: stop after the current step with a checkpoint
        self.drawn: list[str] = []  # ledger uids this rank drew in the current step
        self.profiler = StepProfiler(cfg.global_profiler)  # global_profiler.*: trainer/profiler.py
        self.say("ready in %.0f s", time.perf_counter() - started)

    def engines(self) -> dict:
        """This role's engines by StepContext field (actor, reference, critic, teacher, rollout); absent: None."""
        raise NotImplementedError

    def build_models(self) -> dict:
        """The actor and the reference, and the critic and the teacher where the graph has those roles."""
        cfg, shape = self.cfg, self.shape
        self.say(
            "building the actor%s from %s",
            " and the reference" if needs_reference(cfg) else "",
            cfg.actor_rollout_ref.model.path,
        )
        built = time.perf_counter()
        models = dict(zip(("actor", "reference"), build.build_actor_and_reference(cfg, shape, self.total_steps)))
        if "critic" in self.graph.roles():
            models["critic"] = build.build_critic(cfg, shape, self.total_steps)
        if "teacher" in self.graph.roles():
            self.say("building the teacher from %s", cfg.distillation.teacher_model.model_path)
            models["teacher"] = build.build_teacher(cfg, shape)
        self.say("models built in %.1f s", time.perf_counter() - built)
        return models

    def start_rollout(self):
        """The rollout engine on this rank's device."""
        self.say("starting the %s rollout engine", self.cfg.actor_rollout_ref.rollout.name)
        device = torch.cuda.current_device() if torch.cuda.is_available() else 0  # set by the process group
        built = time.perf_counter()
        rollout = build.build_rollout(self.cfg, self.shape, self.tokenizer, build.device_for_rank(device))
        self.say("rollout engine started in %.1f s", time.perf_counter() - built)
        return rollout

    @property
    def rollout_dp_rank(self) -> int:
        """Consecutive ranks form one rollout-TP group and share a data shard."""
        return self.shape.layout.rollout_dp_rank(self.rank)

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

    def validate(self, step: int) -> dict[str, float]:
        fault_point("validation", step)
        return self.validation_metrics(step)

    def validation_stopped(self) -> bool:
        """Whether a stop signal cuts the validation under way (collective over the validating ranks); a role
        whose ranks cannot agree on it there validates to the end."""
        return False

    def validation_metrics(self, step: int) -> dict[str, float]:
        """The validation set sampled and scored with the rollout's current weights (trainer/validation.py)."""
        from dagrl.trainer.validation import validate

        return validate(self, step)
