from __future__ import annotations

from tests.reliability.corpus.case import MEGATRON, WORLD, Case, world

TOPIC = "Parallel layout, batch sizes and packing"
CASES: tuple[Case, ...] = (
    Case(
        "token_budget_too_small",
        "`actor.use_dynamic_bsz=true` with a budget below one prompt + response",
        ("actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4"),
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4", "max_prompt_length + max_response_length"),
    ),
    Case(
        "cp_without_packing",
        "`context_parallel_size=2` without `model.use_remove_padding`",
        (f"{MEGATRON}.context_parallel_size=2",),
        ("actor_rollout_ref.model.use_remove_padding=true",),
    ),
    Case(
        "cp_in_fp32",
        "`context_parallel_size=2` with fp32 parameters (TE's THD attention has no fp32 kernel)",
        (
            f"{MEGATRON}.context_parallel_size=2",
            "actor_rollout_ref.model.use_remove_padding=true",
            f"{MEGATRON}.param_dtype=float32",
        ),
        (f"{MEGATRON}.param_dtype=bfloat16",),
    ),
    Case(
        "cp_on_a_cpu_machine",
        "`context_parallel_size=2` (packed, bf16) on a machine without a GPU",
        (
            *world(2),
            "trainer.default_local_dir={ws}/run",
            f"{MEGATRON}.context_parallel_size=2",
            "actor_rollout_ref.model.use_remove_padding=true",
            f"{MEGATRON}.param_dtype=bfloat16",
        ),
        (f"{MEGATRON}.context_parallel_size=2", "this machine has no GPU", "context_parallel_size=1 here"),
        env={"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29646"},
    ),
    Case(
        "heads_not_divisible_by_tp",
        "TP=3 with 4 attention heads (3 processes)",
        (*world(3), f"{MEGATRON}.tensor_model_parallel_size=3"),
        (f"{MEGATRON}.tensor_model_parallel_size=3", "num_attention_heads=4", "pick a divisor"),
        env={"WORLD_SIZE": "3"},
    ),
    Case(
        "kv_heads_not_divisible_by_tp",
        "TP=4 with 2 KV heads (4 processes)",
        (*world(4), f"{MEGATRON}.tensor_model_parallel_size=4"),
        (f"{MEGATRON}.tensor_model_parallel_size=4", "num_key_value_heads=2"),
        env={"WORLD_SIZE": "4"},
    ),
    Case(
        "layers_not_divisible_by_pp_vpp",
        "PP=2 x VPP=2 with 2 layers",
        (*world(2), f"{MEGATRON}.pipeline_model_parallel_size=2", f"{MEGATRON}.virtual_pipeline_model_parallel_size=2"),
        ("pipeline_model_parallel_size=2 x virtual_pipeline_model_parallel_size=2", "num_hidden_layers=2"),
        env=WORLD,
    ),
    Case(
        "vpp_without_pp",
        "VPP=2 with PP=1",
        (f"{MEGATRON}.virtual_pipeline_model_parallel_size=2",),
        ("virtual_pipeline_model_parallel_size=2", "pipeline_model_parallel_size>1"),
    ),
    Case(
        "world_not_divisible_by_tp",
        "TP=2 on a 1-process launch",
        (f"{MEGATRON}.tensor_model_parallel_size=2",),
        (f"{MEGATRON}.tensor_model_parallel_size", "not divisible by 2"),
    ),
    Case(
        "world_not_divisible_by_pp",
        "PP=3 on a 1-process launch (the message names the key that was set)",
        (f"{MEGATRON}.pipeline_model_parallel_size=3",),
        ("(1 x 3 x 1): 1 is not divisible by 3", f"change {MEGATRON}.pipeline_model_parallel_size"),
    ),
    Case(
        "world_size_mismatch",
        "trainer.n_gpus_per_node=2 but one process started",
        world(2),
        ("trainer.n_gpus_per_node", "torchrun --nproc-per-node 2"),
    ),
    Case(
        "batch_not_divisible_by_dp",
        "train_batch_size=3 over 2 data-parallel ranks",
        (*world(2), "data.train_batch_size=3"),
        ("data.train_batch_size", "3 is not divisible by 2"),
        env=WORLD,
    ),
    Case(
        "batch_times_n_not_divisible_by_dp",
        "ppo_mini_batch_size x rollout.n = 1 over 2 data-parallel ranks",
        (
            *world(2),
            "actor_rollout_ref.rollout.n=1",
            "algorithm.adv_estimator=reinforce_plus_plus",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        ),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "1 is not divisible by 2"),
        env=WORLD,
    ),
    Case(
        "mini_batch_not_dividing_batch",
        "ppo_mini_batch_size=3 with train_batch_size=4",
        ("actor_rollout_ref.actor.ppo_mini_batch_size=3",),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "not divisible by 3"),
    ),
    Case(
        "micro_batch_not_dividing",
        "ppo_micro_batch_size_per_gpu=3 with 4 responses per mini-batch",
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "not divisible by 3"),
    ),
    Case(
        "batch_larger_than_data",
        "train_batch_size=64 with 32 training rows",
        ("data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=64"),
        ("data.train_batch_size=64", "32 training rows"),
    ),
    Case(
        "micro_larger_than_mini",
        "`ppo_micro_batch_size_per_gpu=8` with 4 responses per mini-batch",
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4 is not divisible by 8"),
    ),
    Case(
        "mini_larger_than_batch",
        "`ppo_mini_batch_size=8` with train_batch_size=4",
        ("actor_rollout_ref.actor.ppo_mini_batch_size=8",),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "4 is not divisible by 8"),
    ),
    Case(
        "pp_more_than_layers",
        "PP=4 (4 processes) for a model with 2 layers",
        (*world(4), f"{MEGATRON}.pipeline_model_parallel_size=4"),
        (f"{MEGATRON}.pipeline_model_parallel_size=4", "num_hidden_layers=2"),
        env={"WORLD_SIZE": "4"},
    ),
    Case(
        "expert_parallel_on_dense_model",
        "`expert_model_parallel_size=2` for a model without experts",
        (*world(2), f"{MEGATRON}.expert_model_parallel_size=2"),
        (f"{MEGATRON}.expert_model_parallel_size=2", "no experts"),
        env=WORLD,
    ),
    Case(
        "expert_tp_zero",
        "`megatron.expert_tensor_parallel_size=0`",
        (f"{MEGATRON}.expert_tensor_parallel_size=0",),
        ("expert_tensor_parallel_size=0", "null or a positive integer"),
    ),
    Case(
        "rollout_tp_with_hf",
        "`actor_rollout_ref.rollout.tensor_model_parallel_size=2` with the hf rollout",
        ("actor_rollout_ref.rollout.tensor_model_parallel_size=2",),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size=1", "rollout.name=vllm"),
    ),
)
