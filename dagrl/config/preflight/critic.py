"""Pre-flight of critic.* and trainer.critic_warmup (only PPO builds a critic, but a bad value should fail before a
job is queued)."""

from __future__ import annotations

from dagrl.algo.catalog import ADV_ESTIMATORS
from dagrl.config.checks import alias, as_config_error, divides, positive_int
from dagrl.config.derived import total_steps
from dagrl.config.errors import require
from dagrl.config.model_dir import read_hf_config
from dagrl.config.preflight.graph import graph_roles
from dagrl.config.preflight.optim import check_optim
from dagrl.config.tree import Cfg
from dagrl.placement import WorldLayout


def check_critic(cfg: Cfg, hf_config: dict, world: WorldLayout) -> float | None:
    """critic.* and trainer.critic_warmup, checked on every run (only PPO builds a critic, but a bad value should
    fail before a job is queued). Returns the critic's grad clip."""
    actor_dp = world.dp
    critic = cfg.critic
    n, train = cfg.actor_rollout_ref.rollout.n, cfg.data.train_batch_size
    mini = positive_int(cfg, "critic.ppo_mini_batch_size")
    micro = positive_int(cfg, "critic.ppo_micro_batch_size_per_gpu")
    positive_int(cfg, "critic.forward_micro_batch_size_per_gpu")
    positive_int(cfg, "critic.ppo_epochs")
    divides(train, mini, "critic.ppo_mini_batch_size", "data.train_batch_size by critic.ppo_mini_batch_size")
    divides(
        mini * n,
        actor_dp,
        "critic.ppo_mini_batch_size",
        f"critic.ppo_mini_batch_size x rollout.n over {actor_dp} actor-DP ranks",
    )
    divides(
        mini * n // actor_dp,
        micro,
        "critic.ppo_micro_batch_size_per_gpu",
        "responses per critic mini-batch per rank by critic.ppo_micro_batch_size_per_gpu",
    )
    # (the critic's keys' types and ranges, its grad clip's included, are the schema's: dagrl/config/schema/)
    grad_clip = alias(cfg, "critic.grad_clip", "critic.optim.clip_grad")
    check_optim(cfg, "critic.optim")
    if critic.model.path:
        critic_hf = read_hf_config(critic.model.path, key="critic.model.path")
        require(
            critic_hf.get("vocab_size") == hf_config.get("vocab_size"),
            "critic.model.path",
            f"critic.model.path has vocab_size {critic_hf.get('vocab_size')}, the actor's model "
            f"{hf_config.get('vocab_size')}: the critic reads the actor's token ids, so use a model with the "
            f"same tokenizer (or leave critic.model.path null)",
        )
        from types import SimpleNamespace
        from dagrl.engine.megatron.preflight import check_layout

        with as_config_error("critic.model.path"):  # the critic reuses the actor's parallel layout
            check_layout(SimpleNamespace(**critic_hf), world.model, world.world_size)
    warmup = cfg.trainer.critic_warmup
    has_critic = "critic" in graph_roles(cfg)
    require(
        warmup == 0 or has_critic,
        "trainer.critic_warmup",
        f"trainer.critic_warmup={warmup} holds the actor back while a critic warms up, but the graph has no "
        f"critic node (the actor would just not learn): set it to 0, or use dag=ppo",
    )
    estimator = ADV_ESTIMATORS.get(cfg.algorithm.adv_estimator)
    readers = [e.name for e in ADV_ESTIMATORS if "values" in e.needs]
    require(
        not has_critic or estimator is None or "values" in estimator.needs,
        "algorithm.adv_estimator",
        f"the graph has a critic node but algorithm.adv_estimator={cfg.algorithm.adv_estimator} never uses its "
        f"values: set algorithm.adv_estimator={' or '.join(readers)} (or use a graph without a critic)",
    )
    return grad_clip


def check_critic_warmup(cfg: Cfg, train_rows: int) -> None:
    """trainer.critic_warmup steps train only the critic (nodes/actor.py: steps 1..N): N at or beyond the run's
    last step would end the run with the actor never updated."""
    warmup = cfg.trainer.critic_warmup
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup <= 0:
        return
    total = total_steps(cfg, train_rows)
    require(
        total is None or warmup < total,
        "trainer.critic_warmup",
        f"trainer.critic_warmup={warmup} trains only the critic for the first {warmup} step(s), but this run has "
        f"{total} step(s) (trainer.total_training_steps / total_epochs): the actor would never be updated; set "
        f"trainer.critic_warmup below {total}, or run more steps",
    )
