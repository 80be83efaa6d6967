from __future__ import annotations

from tests.reliability.corpus.case import MODEL_KEY, Case
from tests.reliability.corpus.model_makers import model_copy

TOPIC = "Runs that would train nothing, or the wrong thing"
CASES: tuple[Case, ...] = (
    Case(
        "greedy_training_groups",
        "`actor_rollout_ref.rollout.do_sample=false` with grpo (a group of identical responses: every advantage 0)",
        ("actor_rollout_ref.rollout.do_sample=false",),
        ("actor_rollout_ref.rollout.do_sample", "do_sample=true"),
    ),
    Case(
        "grpo_with_one_sample",
        "GRPO (the default estimator) with `actor_rollout_ref.rollout.n=1`: no group to compare against",
        ("actor_rollout_ref.rollout.n=1",),
        ("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=grpo", "2 or more"),
    ),
    Case(
        "rloo_with_one_sample",
        "RLOO with `rollout.n=1`",
        ("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=rloo"),
        ("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=rloo"),
    ),
    Case(
        "dynamic_sampling_with_one_sample",
        "DAPO dynamic sampling with `rollout.n=1` (no group ever varies)",
        (
            "actor_rollout_ref.rollout.n=1",
            "algorithm.adv_estimator=reinforce_plus_plus",
            "dag=dapo",
            "algorithm.filter_groups.enable=true",
        ),
        ("actor_rollout_ref.rollout.n=1", "filter_groups.enable=true"),
    ),
    Case(
        "val_only_without_val_files",
        "`trainer.val_only=true` with data.val_files=null (nothing to validate)",
        ("trainer.val_only=true", "data.val_files=null"),
        ("trainer.val_only=true", "set data.val_files"),
    ),
    Case(
        "near_zero_temperature_groups",
        "`actor_rollout_ref.rollout.temperature=1e-8` with grpo (greedy in all but name: identical groups)",
        ("actor_rollout_ref.rollout.temperature=1e-8",),
        ("actor_rollout_ref.rollout.temperature=1e-08 is below 0.001", "temperature to 0.6-1.0"),
    ),
    Case(
        "top_k_one_groups",
        "`actor_rollout_ref.rollout.top_k=1` with grpo (only the likeliest token: identical groups)",
        ("actor_rollout_ref.rollout.top_k=1",),
        ("actor_rollout_ref.rollout.top_k=1", "top_k=-1 (off)"),
    ),
    Case(
        "graph_without_actor_update",
        "`dag.nodes.actor_update=null` (a graph that samples and scores but never updates the policy)",
        ("dag.nodes.actor_update=null",),
        ("dag.nodes", "no actor update", "dagrl.nodes.actor:update_actor", "trainer.val_only=true"),
    ),
    Case(
        "classifier_as_policy",
        "`model.path` a sequence-classification reward model (architectures: ...ForSequenceClassification)",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("has a classifier head", "LlamaForSequenceClassification", "ForCausalLM"),
        make=model_copy(patch={"architectures": ["LlamaForSequenceClassification"], "num_labels": 1}),
    ),
    Case(
        "quantized_policy",
        "`model.path` an FP8 release (config.json quantization_config)",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("is a quantized checkpoint", "quant_method=fp8", "unquantized release"),
        make=model_copy(patch={"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}),
    ),
    Case(
        "run_name_with_now",
        "`trainer.experiment_name=run_${now:%H%M%S}` naming the run directory (every relaunch a fresh start)",
        (  # (format strings: {{ }} is a brace)
            "trainer.experiment_name=run_${{now:%H%M%S}}",
            "trainer.default_local_dir={ws}/runs/${{trainer.experiment_name}}",
        ),
        ("trainer.experiment_name=run_${now:%H%M%S} changes at every launch", "give trainer.experiment_name a fixed"),
    ),
)
