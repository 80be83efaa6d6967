"""The CLI: early errors (exit 2, one line, fast, no heavy imports), --cfg job, +keys under free-form maps."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from tests.conftest import cpu_run_overrides

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args, timeout=60):
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dagrl.main_dag", *args], capture_output=True, text=True, timeout=timeout
    )
    return proc, time.perf_counter() - start


# A pre-flight error comes before anything is built or written (the tests assert no run directory): about 3 s on an
# idle 2-core machine and up to ~10 s on a loaded one, so the bound catches a pre-flight grown slow, not the load.
PREFLIGHT_S = 30


def error_line(proc):
    lines = [line for line in proc.stderr.splitlines() if line.startswith("dagrl: error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_misspelled_key_names_the_closest(tmp_path):
    proc, seconds = run_cli("trainer.totl_epochs=3")
    assert proc.returncode == 2
    assert "did you mean 'trainer.total_epochs'" in error_line(proc)
    assert seconds < PREFLIGHT_S


def test_plus_key_outside_free_form_maps_fails():
    proc, _ = run_cli("+trainer.my_new_key=1")
    assert proc.returncode == 2 and "'+' adds keys only under" in error_line(proc)


def test_free_form_map_needs_plus_and_reaches_config():
    with pytest.raises(ConfigError, match=r"write it as \+"):
        compose(["actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method=uniform"])
    cfg = compose(
        [
            "+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method=uniform",
            "+custom_reward_function.reward_kwargs.bonus=0.5",
        ]
    )
    assert cfg["actor_rollout_ref"]["actor"]["megatron"]["override_transformer_config"] == {
        "recompute_method": "uniform"
    }
    assert cfg["custom_reward_function"]["reward_kwargs"] == {"bonus": 0.5}


def test_cfg_job_prints_composed_config():
    proc, _ = run_cli("--cfg", "job", "trainer.total_epochs=7", "actor_rollout_ref.rollout.n=4")
    assert proc.returncode == 0, proc.stderr
    assert "total_epochs: 7" in proc.stdout and "'n': 4" in proc.stdout


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"actor_rollout_ref.rollout.prompt_length": 64}, "conflicts with data.max_prompt_length"),
        ({"actor_rollout_ref.actor.optim.clip_grad": 0.5}, "conflicts with actor_rollout_ref.actor.grad_clip"),
        ({"data.train_batch_size": 3}, "ppo_mini_batch_size"),
        ({"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3}, "ppo_micro_batch_size_per_gpu"),
        ({"data.train_files": "/nonexistent/train.parquet"}, "/nonexistent/train.parquet"),
        ({"actor_rollout_ref.model.path": "/nonexistent/model"}, "actor_rollout_ref.model.path"),
        ({"actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2}, "world size"),
        (
            {"actor_rollout_ref.actor.megatron.context_parallel_size": 2},
            "set actor_rollout_ref.model.use_remove_padding=true",
        ),
        (
            {
                "actor_rollout_ref.actor.megatron.context_parallel_size": 2,
                "actor_rollout_ref.model.use_remove_padding": True,
            },
            "set actor_rollout_ref.actor.megatron.param_dtype=bfloat16",
        ),
        (
            {"actor_rollout_ref.actor.use_dynamic_bsz": True, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 16},
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16 must be an integer >= max_prompt_length",
        ),
        (
            {"critic.use_dynamic_bsz": True, "critic.forward_max_token_len_per_gpu": 0},
            "critic.forward_max_token_len_per_gpu=0 must be",
        ),
        ({"actor_rollout_ref.actor.tis_imp_ratio_cap": 2}, "rollout.calculate_log_probs=true"),
        ({"actor_rollout_ref.rollout.name": "vllm"}, "vLLM is not installed"),
        ({"trainer.ray_address": "auto"}, "set trainer.launcher=ray"),
        ({"trainer.n_gpus_per_node": 8}, "torchrun --nproc-per-node 8"),
        ({"algorithm.adv_estimator": "nope"}, "algorithm.adv_estimator='nope' is not one of"),
        ({"custom_reward_function.path": "/nonexistent/reward.py"}, "/nonexistent/reward.py"),
    ],
)
def test_preflight_errors_exit_2_fast(tiny_model, tiny_data, tmp_path, extra, message):
    proc, seconds = run_cli(*cpu_run_overrides(tiny_model, tiny_data, tmp_path / "ckpt", **extra))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in error_line(proc)
    assert seconds < PREFLIGHT_S
    assert not (tmp_path / "ckpt").exists()  # nothing written before the checks pass


def test_aliases_with_equal_values_are_accepted():
    cfg = compose(["data.max_prompt_length=64", "actor_rollout_ref.rollout.prompt_length=64"])
    assert cfg["actor_rollout_ref"]["rollout"]["prompt_length"] == 64


def test_list_index_overrides_reach_the_config_and_an_index_past_the_end_fails():
    # Hydra sets list items by index (checked against the list's length) and a graph's nodes by id, in the graph
    # the dag group chose (ppo's critic_update is its own; its score node is grpo's, which ppo extends)
    cfg = compose(["trainer.logger.1=jsonl", "dag=ppo", "dag.nodes.critic_update.fn=tests.dag_test_nodes:noop"])
    assert cfg["trainer"]["logger"] == ["console", "jsonl"]
    assert cfg["dag"]["nodes"]["critic_update"]["fn"] == "tests.dag_test_nodes:noop"
    proc, _ = run_cli("--cfg", "job", "dag.nodes.score.fn=x:y")
    assert proc.returncode == 0 and "fn: x:y" in proc.stdout, proc.stderr
    proc, _ = run_cli("trainer.logger.2=jsonl")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "trainer.logger has 2 items (indices 0..1)" in error_line(proc)


def test_plain_overrides_run_the_early_composition_which_equals_hydras_own(monkeypatch):
    """The early check's composition is the job's (one composition per launch, not Hydra's second one): the same
    config Hydra's main composes; flags and hydra.* overrides still go through Hydra's main."""
    import dagrl.main_dag as main_dag

    ran, hydra_calls = [], []
    monkeypatch.setattr(main_dag, "run", ran.append)
    overrides = ["data.train_batch_size=8", "actor_rollout_ref.rollout.n=3", "dag=ppo"]
    monkeypatch.setattr(sys, "argv", ["main_dag", *overrides])
    monkeypatch.setattr(main_dag, "hydra_main", lambda: hydra_calls.append(sys.argv[1:]))
    main_dag.main()
    assert len(ran) == 1 and not hydra_calls
    assert ran[0]["data"]["train_batch_size"] == 8 and ran[0]["actor_rollout_ref"]["rollout"]["n"] == 3
    for extra in (["hydra.verbose=true"], ["--cfg", "job"]):
        monkeypatch.setattr(sys, "argv", ["main_dag", *overrides, *extra])
        main_dag.main()
    assert len(ran) == 1 and len(hydra_calls) == 2
    monkeypatch.undo()
    monkeypatch.setattr(main_dag, "run", ran.append)
    monkeypatch.setattr(sys, "argv", ["main_dag", *overrides])
    main_dag.hydra_main()  # Hydra's own main, composing from sys.argv
    assert ran[1] == ran[0]


CORRECTION = "algorithm.rollout_correction"


@pytest.mark.parametrize(
    "override,fix",
    [
        (
            f"{CORRECTION}.rollout_is=token",
            "write actor_rollout_ref.actor.tis_imp_ratio_cap=C for its rollout_is_threshold",
        ),
        (f"{CORRECTION}.rollout_is_threshold=3", "write actor_rollout_ref.actor.tis_imp_ratio_cap=3"),
        (f"{CORRECTION}.rollout_rs=seq_mean_k1", "write actor_rollout_ref.actor.mis_ratio_low=1/U"),
        # verl's k1 is log(pi_rollout / pi_old), the inverse of dagrl's ratio: L_U becomes 1/U, 1/L
        (
            f"{CORRECTION}.rollout_rs_threshold=0.8_1.25",
            "write actor_rollout_ref.actor.mis_ratio_low=0.8 actor_rollout_ref.actor.mis_ratio_high=1.25",
        ),
        (
            f"{CORRECTION}.rollout_rs_threshold=0.5_1.6",
            "write actor_rollout_ref.actor.mis_ratio_low=0.625 actor_rollout_ref.actor.mis_ratio_high=2",
        ),
        (f"{CORRECTION}.rollout_rs_threshold=2", "mis_ratio_low=0.5 actor_rollout_ref.actor.mis_ratio_high=2"),
        # no exact counterpart: the key's line says what dagrl has instead
        (f"{CORRECTION}.rollout_is=sequence", "sequence-level IS is not supported"),
        (f"{CORRECTION}.rollout_is_threshold=0.5_2", "IcePop's 'lower_upper' band is not supported"),
        (f"{CORRECTION}.rollout_rs=token_k1", "other rejection options are not supported"),
        (f"{CORRECTION}.rollout_rs_threshold=1.1_2", "'L_U' (or U alone: L = 1/U) is"),
        (f"{CORRECTION}.bypass_mode=true", "dagrl always recomputes pi_old"),
        (f"{CORRECTION}.loss_type=reinforce", "actor_rollout_ref.actor.policy_loss.loss_mode"),
        (f"{CORRECTION}.rollout_is_batch_normalize=true", "not normalized to mean 1"),
        (f"~{CORRECTION}", "actor_rollout_ref.actor.policy_loss.off_policy=decoupled"),
    ],
)
def test_verls_rollout_correction_keys_name_dagrls(override, fix):
    with pytest.raises(ConfigError) as info:
        compose([override])
    key = override.split("=")[0].lstrip("~")
    message = str(info.value)
    assert info.value.key == key and len(message.splitlines()) == 1
    assert message.startswith(f"'{key}' is verl's; ") and fix in message


def test_verls_rollout_correction_is_answered_on_the_command_line():
    proc, seconds = run_cli(f"{CORRECTION}.rollout_rs=seq_mean_k1", f"{CORRECTION}.rollout_rs_threshold=0.5_2")
    assert proc.returncode == 2 and seconds < PREFLIGHT_S
    assert "actor_rollout_ref.actor.mis_ratio_low=1/U" in error_line(proc)


def test_config_dir_adds_group_options_that_dag_can_choose(tmp_path):
    """--config-dir DIR: DIR/dag/my_graph.yaml is chosen with dag=my_graph (Hydra searches DIR, and the early check
    of overrides does too) and may extend dagrl's graphs by name; an option in neither directory is named with
    both."""
    (tmp_path / "dag").mkdir()
    (tmp_path / "dag" / "my_graph.yaml").write_text(
        "defaults:\n  - grpo\n  - _self_\nnodes:\n  reward: {deps: [old_log_prob]}\n  ref_log_prob: null\n"
    )
    proc, _ = run_cli("--config-dir", str(tmp_path), "dag=my_graph", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    nodes = yaml.safe_load(proc.stdout)["dag"]["nodes"]
    assert nodes["reward"] == {
        "role": "reward",
        "fn": "dagrl.nodes.reward:apply_kl_in_reward",
        "deps": ["old_log_prob"],
    }
    assert nodes["ref_log_prob"] is None and list(nodes)[:2] == ["weight_sync", "rollout"]
    proc, _ = run_cli(f"--config-dir={tmp_path}", "dag=my_grap", "--cfg", "job")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"dagrl: error: override 'dag=my_grap': conf/dag/ or {tmp_path}/dag/ has no 'my_grap': choose one of dapo, "
        f"grpo, my_graph, opd, ppo"
    ), proc.stderr
