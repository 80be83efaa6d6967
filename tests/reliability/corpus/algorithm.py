from __future__ import annotations

from tests.reliability.corpus.case import PPO_GAE, Case
from tests.reliability.corpus.model_makers import critic_with_other_vocab, critic_with_positions

TOPIC = "The critic, the advantage estimator and algorithm.*"
CASES: tuple[Case, ...] = (
    Case(
        "gae_without_critic",
        "`algorithm.adv_estimator=gae` on the GRPO graph (no critic)",
        ("algorithm.adv_estimator=gae",),
        ("algorithm.adv_estimator=gae", "dag=ppo"),
    ),
    Case(
        "critic_warmup_without_critic",
        "`trainer.critic_warmup=2` on the GRPO graph (the actor would not learn)",
        ("trainer.critic_warmup=2",),
        ("trainer.critic_warmup=2", "dag=ppo"),
    ),
    Case(
        "critic_warmup_whole_run",
        "`trainer.critic_warmup=5` in a 2-step PPO run (the actor never trained)",
        (*PPO_GAE, "trainer.critic_warmup=5"),
        ("trainer.critic_warmup=5", "this run has 2 step(s)", "below 2"),
    ),
    Case(
        "critic_lr_above_one",
        "`critic.optim.lr=2` (dag=ppo)",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.optim.lr=2"),
        ("critic.optim.lr=2", "<= 1"),
    ),
    Case(
        "critic_forward_micro_zero",
        "`critic.forward_micro_batch_size_per_gpu=0`",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.forward_micro_batch_size_per_gpu=0"),
        ("critic.forward_micro_batch_size_per_gpu=0",),
    ),
    Case(
        "critic_token_budget_word",
        "`critic.ppo_max_token_len_per_gpu=lots`",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.ppo_max_token_len_per_gpu=lots"),
        ("critic.ppo_max_token_len_per_gpu='lots'", "critic.forward_max_token_len_per_gpu takes the value"),
    ),
    Case(
        "critic_model_other_vocab",
        "critic.model.path with another vocabulary than the actor's",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.model.path={ws}/critic"),
        ("critic.model.path has vocab_size 800", "same tokenizer"),
        make=critic_with_other_vocab,
    ),
    Case(
        "critic_positions_too_short",
        "critic.model.path with max_position_embeddings=32 < prompt + response 38",
        (*PPO_GAE, "critic.model.path={ws}/critic"),
        ("critic's max_position_embeddings=32", "critic.model.path"),
        make=critic_with_positions(32),
    ),
    Case(
        "target_kl_negative",
        "`algorithm.kl_ctrl.target_kl=-0.1` with the adaptive controller",
        ("algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=-0.1"),
        ("algorithm.kl_ctrl.target_kl=-0.1", ">= 0"),
    ),
    Case(
        "max_gen_batches_word",
        "`filter_groups.max_num_gen_batches=ten`",
        ("algorithm.filter_groups.max_num_gen_batches=ten",),
        ("max_num_gen_batches='ten'", "an integer"),
    ),
    Case(
        "max_gen_batches_negative",
        "`algorithm.filter_groups.max_num_gen_batches=-2`",
        ("dag=dapo", "algorithm.filter_groups.max_num_gen_batches=-2"),
        ("max_num_gen_batches=-2", "an integer >= 0", "0 = a whole epoch of prompts"),
    ),
)
