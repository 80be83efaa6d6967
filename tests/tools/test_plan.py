"""python3 -m dagrl.plan: rank groups (against Megatron-Core's own), parameter counts (against HF models and the
model cards), the batch schedule of the example scripts, the memory arithmetic, and the one-line exit-2 error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.plan import presets
from dagrl.placement import WorldLayout
from dagrl.plan.memory import Recompute, RunSettings, recompute_from_config, stage_memory
from dagrl.plan.model import ModelShape, lora_layer_params, rank_params
from dagrl.placement.groups import megatron_groups, orthogonal_groups
from dagrl.config.derived import skips_old_log_prob
from tests.conftest import make_arithmetic_rows
from tests.helpers import write_parquet

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def preset_shape(family: str, size: str, **overrides) -> ModelShape:
    return ModelShape.from_hf({"model_type": family, **presets.config_fields(family, size, **overrides)})


def config_dir(path: Path, family: str, size: str) -> Path:
    """A model directory with config.json only (what dagrl.plan reads), as init_random_model --config-only."""
    presets.hf_config(family, size).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("plan_data")
    write_parquet(str(folder / "test.parquet"), make_arithmetic_rows(32, "test", seed=1))
    return write_parquet(str(folder / "train.parquet"), make_arithmetic_rows(256, "train", seed=0))


# ---- rank groups ---------------------------------------------------------------------------------------
def test_tp2_pp2_dp2_by_hand():
    groups = megatron_groups(WorldLayout.of(8, tp=2, pp=2))
    assert groups.tp == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups.dp == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups.pp == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert groups.cp == [[r] for r in range(8)]
    assert groups.rollout_tp == [[r] for r in range(8)]
    with pytest.raises(ValueError, match="not divisible by TP x PP x CP = 3x1x1"):
        WorldLayout.of(8, tp=3)
    with pytest.raises(ValueError, match="not divisible by expert-TP x EP x PP = 1x3x1"):
        WorldLayout.of(8, ep=3, etp=1)
    with pytest.raises(ValueError, match="not divisible by rollout TP 3"):
        WorldLayout.of(8, rollout_tp=3)


def test_rollout_groups_are_consecutive_tp_blocks():
    groups = megatron_groups(WorldLayout.of(8, rollout_tp=2, tp=4))
    assert groups.rollout_tp == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups.rollout_dp == [[0, 2, 4, 6], [1, 3, 5, 7]]


LAYOUTS = [  # world, tp, pp, cp, ep, etp
    (8, 2, 2, 1, 2, None),
    (8, 1, 2, 2, 1, None),
    (16, 2, 2, 2, 4, 1),
    (16, 2, 4, 2, 4, 1),  # AReaL's folding: attention d1p4t2c2, experts d1p4t1e4
    (12, 2, 3, 1, 2, 1),
]


@pytest.fixture(scope="module")
def megatron_differences() -> list[str]:
    """compare_with_megatron for every layout of LAYOUTS in one fresh interpreter (torch.distributed and Megatron's
    parallel state are process-global, and other tests of this session may hold them; one interpreter imports
    megatron-core once for all): per layout, the difference it found, "" where there was none."""
    code = (
        "import json; from tests.tools.test_plan import LAYOUTS, compare_with_megatron; "
        "print(json.dumps([compare_with_megatron(*layout) for layout in LAYOUTS]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("layout", range(len(LAYOUTS)), ids=["-".join(map(str, layout)) for layout in LAYOUTS])
def test_groups_equal_megatron_parallel_state_on_a_fake_world(megatron_differences, layout):
    assert megatron_differences[layout] == "", LAYOUTS[layout]


def compare_with_megatron(world, tp, pp, cp, ep, etp) -> str:
    """Build Megatron-Core's groups for every rank of a fake world (torch's "fake" backend) and compare: the first
    difference, "" where there is none."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from torch.testing._internal.distributed.fake_pg import FakeStore

    ours = megatron_groups(WorldLayout.of(world, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp))
    getters = {
        "tp": ps.get_tensor_model_parallel_group,
        "pp": ps.get_pipeline_model_parallel_group,
        "dp": ps.get_data_parallel_group,
        "cp": ps.get_context_parallel_group,
        "dp_cp": lambda: ps.get_data_parallel_group(with_context_parallel=True),
        "ep": ps.get_expert_model_parallel_group,
        "expert_tp": ps.get_expert_tensor_parallel_group,
        "expert_dp": ps.get_expert_data_parallel_group,
    }
    for rank in range(world):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        try:
            ps.initialize_model_parallel(
                tensor_model_parallel_size=tp,
                pipeline_model_parallel_size=pp,
                context_parallel_size=cp,
                expert_model_parallel_size=ep,
                expert_tensor_parallel_size=etp,
                create_gloo_process_groups=False,
            )
            for kind, getter in getters.items():
                theirs = dist.get_process_group_ranks(getter())
                mine = next(g for g in getattr(ours, kind) if rank in g)
                if mine != theirs:
                    return f"rank {rank}'s {kind} group: ours {mine}, Megatron's {theirs}"
        finally:
            ps.destroy_model_parallel()
            dist.destroy_process_group()
    return ""


def test_plan_prints_attention_and_expert_groups_apart(tmp_path, prompts):
    """AReaL's folding on 16 ranks: attention TP2 CP2 PP4 (d1p4t2c2), experts EP4 expert-TP1 PP4 (d1p4t1e4)."""
    from dagrl.config.validate import preflight
    from dagrl.plan import make_plan
    from dagrl.plan.report import render

    model = config_dir(tmp_path / "qwen3-30b-a3b", "qwen3_moe", "30b-a3b")
    megatron = "actor_rollout_ref.actor.megatron"
    cfg = Cfg(
        compose(
            [
                f"actor_rollout_ref.model.path={model}",
                f"data.train_files={prompts}",
                "data.train_batch_size=16",
                "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.model.use_remove_padding=true",
                "actor_rollout_ref.rollout.n=2",
                f"{megatron}.sequence_parallel=true",
                "trainer.nnodes=2",
                "trainer.n_gpus_per_node=8",
                f"trainer.default_local_dir={tmp_path / 'ckpt'}",
                f"{megatron}.param_dtype=bfloat16",
                f"{megatron}.tensor_model_parallel_size=2",
                f"{megatron}.pipeline_model_parallel_size=4",
                f"{megatron}.context_parallel_size=2",
                f"{megatron}.expert_model_parallel_size=4",
                f"{megatron}.expert_tensor_parallel_size=1",
            ]
        )
    )
    lines = render(make_plan(cfg, preflight(cfg, world_size=16))).splitlines()
    attention = lines.index("  actor/reference attention: TP=2 CP=2 DP=1 PP=4, sequence parallel on (d1p4t2c2)")
    experts = lines.index(
        "  actor/reference experts: EP=4 expert-TP=1 expert-DP=1 PP=4 (d1p4t1e4), over the same ranks"
    )
    assert lines[attention + 1 : experts] == [
        "  TP groups         [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]",
        "  CP groups         [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]",
        "  DP groups         size 1 (not split)",
        "  PP groups         [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]",
    ]
    assert lines[experts + 1 : experts + 4] == [
        "  EP groups         [0,1,2,3] [4,5,6,7] [8,9,10,11] [12,13,14,15]",
        "  expert-TP groups  size 1 (not split)",
        "  expert-DP groups  size 1 (not split)",
    ]


def test_orthogonal_groups_equal_megatron_rank_generator():
    from megatron.core.parallel_state import RankGenerator

    for tp, cp, dp, pp in [(2, 1, 3, 2), (1, 2, 2, 4), (4, 2, 1, 1), (2, 2, 2, 2)]:
        generator = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
        for token in ("tp", "cp", "dp", "pp", "dp-cp", "tp-pp", "tp-cp"):
            assert orthogonal_groups(
                {"tp": tp, "cp": cp, "dp": dp, "pp": pp}, tuple(token.split("-"))
            ) == generator.get_ranks(token), (tp, cp, dp, pp, token)


# ---- parameter counts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("family", presets.FAMILIES)
@pytest.mark.parametrize("tie", [False, True])
def test_param_count_equals_hf_numel(family, tie, tmp_path):
    model = presets.random_model(family, "tiny", num_layers=3, tie=tie)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())  # what the plan reads, as saved
    assert ModelShape.from_hf(config).total_params() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "family,size,total,non_embedding",
    [
        ("qwen3", "0.6b", 0.6e9, 0.44e9),
        ("qwen3", "1.7b", 1.7e9, 1.4e9),
        ("qwen3", "4b", 4.0e9, 3.6e9),
        ("qwen3", "8b", 8.2e9, 6.95e9),
        ("qwen3", "14b", 14.8e9, 13.2e9),
        ("qwen3", "32b", 32.8e9, 31.2e9),
        ("qwen3_moe", "30b-a3b", 30.5e9, 29.9e9),
    ],
)
def test_large_presets_match_the_model_cards(family, size, total, non_embedding):
    """The presets' counts round to the figures of the Qwen3 model cards (by config only: nothing allocated)."""
    shape = preset_shape(family, size)
    embeddings = shape.vocab * shape.hidden * (1 if shape.tied else 2)
    assert abs(shape.total_params() / total - 1) < 0.03  # the cards round to 2-3 digits
    assert abs((shape.total_params() - embeddings) / non_embedding - 1) < 0.03
    if shape.moe:
        assert abs(shape.active_params() / 3.3e9 - 1) < 0.03


@pytest.mark.parametrize("family,tie,pp", [("qwen3", False, 4), ("qwen3", True, 2), ("qwen3_moe", False, 2)])
def test_pipeline_stages_add_up_to_the_model(family, tie, pp):
    shape = preset_shape(family, "tiny", num_layers=4, tie=tie)
    stages = [rank_params(shape, tp=1, pp=pp, ep=1, etp=1, stage=s) for s in range(pp)]
    extra_copy = shape.vocab * shape.hidden if tie and pp > 1 else 0  # the last stage's embedding copy
    assert sum(s.total for s in stages) == shape.total_params() + extra_copy
    sharded = rank_params(shape, tp=2, pp=1, ep=2 if shape.moe else 1, etp=1, stage=0)
    assert sharded.total < stages[0].total + stages[-1].total


def test_interleaved_stages_hold_every_pp_th_chunk():
    from dagrl.plan.model import stage_layers

    shape = preset_shape("qwen3", "tiny", num_layers=12)
    assert stage_layers(shape, 2, 0, vpp=3) == [range(0, 2), range(4, 6), range(8, 10)]
    assert stage_layers(shape, 2, 1, vpp=3) == [range(2, 4), range(6, 8), range(10, 12)]
    # training the top 3 layers (9, 10, 11) puts gradients on stage 0 too: layer 9 is in its last chunk
    trained = [
        rank_params(shape, tp=1, pp=2, ep=1, etp=1, stage=s, vpp=3, trainable_top_layers=3).trainable for s in (0, 1)
    ]
    assert trained == [shape.layer_params(), 2 * shape.layer_params() + shape.hidden]


def test_trainable_top_layers_limit_gradients_to_those_layers():
    shape = preset_shape("qwen3", "tiny", num_layers=4)
    first, last = (rank_params(shape, tp=1, pp=2, ep=1, etp=1, stage=s, trainable_top_layers=1) for s in (0, 1))
    assert first.trainable == 0
    assert last.trainable == shape.layer_params() + shape.hidden  # top layer + final norm


# ---- schedule and the scripts --------------------------------------------------------------------------
def run_plan_via_script(script: str, model: Path, data: str, tmp_path: Path, *extra: str):
    env = {
        **ENV,
        "DAGRL_PLAN": "1",
        "MODEL_PATH": str(model),
        "TRAIN_DATA_PATH": data,
        "TEST_DATA_PATH": str(Path(data).with_name("test.parquet")),  # held-out rows: the train file is refused there
        "BASE_CKPT_PATH": str(tmp_path / "ckpts"),
    }
    return subprocess.run(
        ["bash", str(ROOT / "examples" / "grpo_trainer" / script), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )


def test_plan_of_the_seed_script(tmp_path, prompts):
    proc = run_plan_via_script(
        "run_qwen3-8b-megatron.sh", config_dir(tmp_path / "qwen3-8b", "qwen3", "8b"), prompts, tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for expected in (
        "8.19B params",
        "TP=2 PP=4 CP=1 DP=1",
        "TP groups         [0,1] [2,3] [4,5] [6,7]",
        "PP groups         [0,2,4,6] [1,3,5,7]",
        "rollout (vllm): TP=2 DP=4",
        "rollout DP groups [0,2,4,6] [1,3,5,7]",
        "128 prompts x n=8 = 1024 responses",
        "rollout: 4 DP rank(s) x 32 prompts (256 responses) each",
        "actor:   1 DP rank(s) x 1024 responses each",
        "update:  8 mini-batch(es) x ppo_epochs 1 = 8 optimizer step(s) per training step",
        "per rank and mini-batch: 128 responses = 16 micro-batch(es) of 8",
        "pipeline bubble 16% (16 micro-batches over 4 stages)",
        "old log-prob: 64 micro-batch(es) of 16 per rank",
        "ref log-prob: none",
        "vLLM weights + KV cache (while awake)",
        "fits",
    ):
        assert expected in out, expected
    # an H100-sized GPU does not hold what fits an H200: the warning names the fixes
    small = run_plan_via_script(
        "run_qwen3-8b-megatron.sh", tmp_path / "qwen3-8b", prompts, tmp_path, "--gpu-memory-gb", "40"
    )
    assert small.returncode == 0 and "WARNING: estimated peak" in small.stdout and "fits" not in small.stdout


def test_a_plan_needs_no_data_files_and_says_what_it_cannot_count(tmp_path):
    """A layout needs the model's config.json only: without the data the plan runs and says the step count is
    unknown (or takes trainer.total_training_steps); a training run with the same command still refuses."""
    model, missing = config_dir(tmp_path / "qwen3-8b", "qwen3", "8b"), str(tmp_path / "nowhere" / "train.parquet")
    proc = run_plan_via_script("run_qwen3-8b-megatron.sh", model, missing, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "(data files not found: steps per epoch unknown, set trainer.total_training_steps" in proc.stdout
    assert "TP=2 PP=4 CP=1 DP=1" in proc.stdout and "fits" in proc.stdout
    counted = run_plan_via_script(
        "run_qwen3-8b-megatron.sh", model, missing, tmp_path, "trainer.total_training_steps=30"
    )
    assert "steps per epoch unknown, 30 steps (trainer.total_training_steps)" in counted.stdout
    env = {**ENV, "PYTHONPATH": str(ROOT)}
    train = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagrl.main_dag",
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={missing}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert train.returncode == 2 and "does not exist" in train.stderr


def test_plan_of_the_moe_script(tmp_path, prompts):
    model = config_dir(tmp_path / "qwen3-30b-a3b", "qwen3_moe", "30b-a3b")
    proc = run_plan_via_script("run_qwen3-30b-a3b-megatron.sh", model, prompts, tmp_path)
    assert proc.returncode == 0, proc.stderr
    for expected in (
        "128 experts (top-8, FFN 768)",
        "actor/reference attention: TP=4 CP=1 DP=2 PP=1, sequence parallel on (d2p1t4c1)",
        "actor/reference experts: EP=8 expert-TP=1 expert-DP=1 PP=1 (d1p1t1e8)",
        "EP groups         [0,1,2,3,4,5,6,7]",
        "DP groups         [0,4] [1,5] [2,6] [3,7]",
        "recompute selective (layernorm, moe_act)",
        "offload: params, grads, optimizer",
        "16 micro-batch(es) of 4",
        "fits",
    ):
        assert expected in proc.stdout, expected


def test_old_log_prob_is_skipped_only_with_one_optimizer_step_and_nothing_else_needing_it():
    one_step = ["actor_rollout_ref.actor.ppo_mini_batch_size=1024"]
    assert skips_old_log_prob(Cfg(compose(one_step)))
    for extra in (
        [],
        ["actor_rollout_ref.actor.ppo_epochs=2"],
        ["algorithm.use_kl_in_reward=true"],
        ["actor_rollout_ref.rollout.calculate_log_probs=true"],
    ):
        overrides = extra if not extra else one_step + extra
        assert not skips_old_log_prob(Cfg(compose(overrides))), overrides


# ---- memory arithmetic ---------------------------------------------------------------------------------
def test_memory_components_follow_the_layout():
    shape = preset_shape("qwen3", "8b")
    run = RunSettings(
        bf16=True,
        distributed_optimizer=True,
        sequence_length=3072,
        response_length=2048,
        micro_batch=8,
        micro_batches=16,
        gpu_memory_utilization=0.5,
    )
    one = stage_memory(shape, WorldLayout.of(2, tp=2, sequence_parallel=True), run, 0)
    two = stage_memory(shape, WorldLayout.of(4, tp=2, sequence_parallel=True), run, 0)
    params = rank_params(shape, tp=2, pp=1, ep=1, etp=1, stage=0).total
    assert one.parts["weights"] == pytest.approx(params * 2 / 2**30)
    assert one.parts["gradients"] == pytest.approx(params * 4 / 2**30)
    assert one.parts["optimizer"] == pytest.approx(params * 12 / 2**30)
    assert two.parts["optimizer"] == pytest.approx(one.parts["optimizer"] / 2)  # sharded over DP
    assert one.parts["vllm"] == pytest.approx(0.5 * 141)
    offloaded = stage_memory(
        shape,
        WorldLayout.of(2, tp=2, sequence_parallel=True),
        RunSettings(**{**run.__dict__, "param_offload": True, "grad_offload": True, "optimizer_offload": True}),
        0,
    )
    assert offloaded.phases["rollout"] == pytest.approx(
        one.phases["rollout"] - one.parts["weights"] - one.parts["gradients"] - one.parts["optimizer"]
    )
    assert offloaded.phases["update"] == pytest.approx(one.phases["update"])
    # the reference follows its own offload flag, not the actor's
    with_ref = RunSettings(**{**run.__dict__, "reference": True})
    ref_kept = stage_memory(
        shape, WorldLayout.of(2, tp=2), RunSettings(**{**with_ref.__dict__, "param_offload": True}), 0
    )
    ref_off = stage_memory(
        shape, WorldLayout.of(2, tp=2), RunSettings(**{**with_ref.__dict__, "ref_param_offload": True}), 0
    )
    base = stage_memory(shape, WorldLayout.of(2, tp=2), with_ref, 0)
    assert ref_kept.phases["rollout"] == pytest.approx(base.phases["rollout"] - base.parts["weights"])
    assert ref_off.phases["rollout"] == pytest.approx(base.phases["rollout"] - base.parts["reference"])
    assert ref_off.phases["update"] == pytest.approx(base.phases["update"] - base.parts["reference"])
    full = stage_memory(
        shape,
        WorldLayout.of(2, tp=2, sequence_parallel=True),
        RunSettings(**{**run.__dict__, "recompute": Recompute("full", "uniform", 1)}),
        0,
    )
    assert full.parts["activations"] < one.parts["activations"] / 5


def test_recompute_settings_follow_transformer_config():
    assert recompute_from_config(True, {}) == Recompute("full", "uniform", 1)
    assert recompute_from_config(True, {"recompute_num_layers": 4}).num_layers == 4
    selective = recompute_from_config(True, {"recompute_granularity": "selective", "recompute_modules": ["moe"]})
    assert selective == Recompute("selective", None, None, ("moe",))
    assert recompute_from_config(False, {}).granularity is None


# ---- errors --------------------------------------------------------------------------------------------
def test_bad_layout_exits_2_with_the_trainers_line(tmp_path, prompts):
    from tests.helpers import make_tiny_tokenizer

    model = config_dir(tmp_path / "qwen3-8b", "qwen3", "8b")
    make_tiny_tokenizer(str(model))  # the trainer's pre-flight also wants a tokenizer (the plan does not)
    overrides = [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={prompts}",
        "data.train_batch_size=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.rollout.n=2",
        "trainer.n_gpus_per_node=8",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
    ]
    ok = subprocess.run(
        [sys.executable, "-m", "dagrl.plan", *overrides], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    bad = overrides[:-1] + ["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=8"]  # 36 layers
    plan = subprocess.run(
        [sys.executable, "-m", "dagrl.plan", *bad], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    train = subprocess.run(
        [sys.executable, "-m", "dagrl.main_dag", *bad],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "WORLD_SIZE": "8"},
    )
    assert plan.returncode == 2 and train.returncode == 2
    assert plan.stdout == ""
    line = plan.stderr.strip().splitlines()[-1]
    assert line.startswith("dagrl: error:") and "pipeline_model_parallel_size=8" in line and "36" in line
    assert line in train.stderr.strip().splitlines()  # with this machine's own problems (vLLM not installed)
    assert not (tmp_path / "ckpt").exists()


def test_critic_is_planned_for_a_graph_with_a_critic(tmp_path, prompts):
    from dagrl.plan import make_plan
    from dagrl.config.validate import preflight
    from dagrl.plan.memory import critic_params
    from dagrl.plan.report import render

    shape = preset_shape("qwen3", "tiny", num_layers=4)
    layout = WorldLayout.of(4, tp=2, pp=2)
    actor_last = rank_params(shape, tp=2, pp=2, ep=1, etp=1, stage=1)
    lm_head_shard = shape.vocab * shape.hidden // 2
    assert critic_params(shape, layout, 1).total == actor_last.total - lm_head_shard + shape.hidden + 1
    assert critic_params(shape, layout, 0).trainable == rank_params(shape, tp=2, pp=2, ep=1, etp=1, stage=0).total
    targets = ("linear_qkv", "linear_proj")  # with LoRA: the frozen decoder gains adapters, the head trains whole
    adapters = 2 * lora_layer_params(shape, 8, targets, tp=2)  # this stage's 2 layers
    for stage, head in ((0, 0), (1, shape.hidden + 1)):
        lora = critic_params(shape, layout, stage, lora_rank=8, lora_targets=targets)
        assert lora.total == critic_params(shape, layout, stage).total + adapters
        assert (lora.trainable_dense, lora.trainable_expert) == (adapters + head, 0)

    model = config_dir(tmp_path / "qwen3-1.7b", "qwen3", "1.7b")
    base = [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={prompts}",
        "data.train_batch_size=32",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.name=vllm",
        "trainer.n_gpus_per_node=4",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ]
    plans = {}
    for name, extra in (
        ("grpo", []),
        ("ppo", ["dag=ppo", "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4"]),
        (
            "ppo_lora",
            [
                "dag=ppo",
                "algorithm.adv_estimator=gae",
                "critic.ppo_micro_batch_size_per_gpu=4",
                "critic.model.lora.rank=8",
            ],
        ),
    ):
        cfg = Cfg(compose(base + extra))
        plans[name] = make_plan(cfg, preflight(cfg, world_size=4))
    assert plans["grpo"].schedule.critic is None and "critic update" not in plans["grpo"].memory[0].phases
    ppo = plans["ppo"]
    assert ppo.schedule.critic.micro_batch == 4 and ppo.schedule.critic.micro_batches_per_mini_batch == 4
    grpo_stage, ppo_stage = plans["grpo"].memory[0], ppo.memory[0]
    assert ppo_stage.phases["rollout"] == pytest.approx(grpo_stage.phases["rollout"] + ppo_stage.parts["critic state"])
    assert ppo_stage.phases["critic update"] > ppo_stage.parts["critic state"]
    # fp32: the frozen decoder keeps its 4 weight bytes of 16 a parameter (no grad, no Adam state), adapters beside
    lora_stage = plans["ppo_lora"].memory[0]
    assert "critic LoRA rank 8" in render(plans["ppo_lora"]) and "critic LoRA" not in render(ppo)
    assert ppo_stage.parts["critic state"] / 4 < lora_stage.parts["critic state"] < ppo_stage.parts["critic state"] / 3


@pytest.mark.parametrize("rollout, merge, merged", [("vllm", False, False), ("vllm", True, True), ("hf", False, True)])
def test_plan_counts_the_merged_forward_where_the_rollout_serves_the_merge(tmp_path, prompts, rollout, merge, merged):
    """The actor computes on W + BA when the rollout serves the merge (merged sync, or the hf rollout merging the
    adapter it loads): one linear's merged weight then lives beside the frozen base during each forward."""
    from dagrl.config.validate import preflight
    from dagrl.plan import make_plan
    from dagrl.plan.model import lora_merge_bytes

    model = config_dir(tmp_path / "qwen3-1.7b", "qwen3", "1.7b")
    cfg = Cfg(
        compose(
            [
                f"actor_rollout_ref.model.path={model}",
                f"data.train_files={prompts}",
                "data.train_batch_size=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                "actor_rollout_ref.rollout.n=4",
                f"actor_rollout_ref.rollout.name={rollout}",
                "actor_rollout_ref.model.lora.rank=8",
                f"actor_rollout_ref.model.lora.merge={merge}",
                "trainer.n_gpus_per_node=1",
                f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            ]
        )
    )
    plan = make_plan(cfg, preflight(cfg, world_size=1))
    assert plan.run.lora_merged is merged and len(plan.run.lora_targets) == 4
    expected = lora_merge_bytes(plan.model, plan.run.lora_targets, 1, 2 if plan.run.bf16 else 4) if merged else 0
    assert plan.memory[0].parts["lora merge"] * 2**30 == pytest.approx(expected)
    weight = 2 if plan.run.bf16 else 4
    assert expected in (0, 2048 * 12288 * (4 + weight))  # the largest, fused gate/up (2048 x 2*6144): fp32, then W's


# dagrl's actor update peak (torch.cuda.max_memory_allocated, GiB) measured by benchmarks/actor_mfu.py on 2xH200:
# seq 4096 (1024 prompt + 3072 response), 8 micro-batches of 1 per DP rank, bf16, distributed optimizer.
MEASURED_UPDATE_PEAK_GIB = {"8b-tp2-sp": 87.3, "1.7b-dp2": 40.2}


@pytest.mark.parametrize("case", sorted(MEASURED_UPDATE_PEAK_GIB))
def test_memory_estimate_is_within_20_percent_of_the_measured_h200_peak(case, tmp_path, prompts):
    from dagrl.config.validate import preflight
    from dagrl.plan import make_plan

    size = case.split("-")[0]
    layout = (
        [
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.actor.megatron.sequence_parallel=true",
        ]
        if "tp2" in case
        else []
    )
    cfg = Cfg(
        compose(
            [
                f"actor_rollout_ref.model.path={config_dir(tmp_path / size, 'qwen3', size)}",
                f"data.train_files={prompts}",
                "data.max_prompt_length=1024",
                "data.max_response_length=3072",
                "actor_rollout_ref.rollout.name=vllm",
                f"data.train_batch_size={8 if 'tp2' in case else 16}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={8 if 'tp2' in case else 16}",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                "actor_rollout_ref.actor.megatron.param_dtype=bfloat16",
                "actor_rollout_ref.actor.megatron.use_distributed_optimizer=true",
                "trainer.n_gpus_per_node=2",
                "algorithm.adv_estimator=reinforce_plus_plus",  # one response per prompt, as the measured runs had
                f"trainer.default_local_dir={tmp_path / 'ckpt'}",
                *layout,
            ]
        )
    )
    planned = make_plan(cfg, preflight(cfg, world_size=2)).memory[0].phases["update"]
    measured = MEASURED_UPDATE_PEAK_GIB[case]
    assert abs(planned - measured) <= 0.2 * measured, (case, planned, measured)


# ---- two pools (actor_rollout_ref.hybrid_engine=false) -------------------------------------------------
def two_pool_overrides(
    model: Path, prompts: str, tmp_path: Path, rollout_gpus: int = 2, train_gpus: int = 4, tp: int = 2
) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={prompts}",
        "data.train_batch_size=32",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={tp}",
        "actor_rollout_ref.hybrid_engine=false",
        f"rollout.n_gpus_per_node={rollout_gpus}",
        f"trainer.n_gpus_per_node={train_gpus}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ]


def test_two_pool_plan_shows_both_pools_in_global_ranks(tmp_path, prompts):
    overrides = two_pool_overrides(config_dir(tmp_path / "qwen3-1.7b", "qwen3", "1.7b"), prompts, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "dagrl.plan", *overrides], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    for expected in (
        "pools: rollout ranks 0-1 (1 node x 2), train ranks 2-5 (1 node x 4)",
        "Training pool (ranks 2-5): 1 node(s) x 4 GPU(s) = 4 ranks",
        "TP=2 PP=1 CP=1 DP=2",
        "TP groups         [2,3] [4,5]",
        "DP groups         [2,4] [3,5]",
        "Rollout pool (ranks 0-1): 1 node(s) x 2 GPU(s) = 2 rank(s)",
        "rollout (vllm): TP=2 DP=1",
        "rollout TP groups [0,1]",
        "rollout: 1 DP rank(s) x 32 prompts (128 responses) each (rollout pool)",
        "actor:   2 DP rank(s) x 64 responses each (training pool)",
        "Memory estimate per GPU of the training pool",
        "Memory estimate per GPU of the rollout pool",
        "vllm weights (bf16, 1/2 each)",
        "KV cache + working memory",
    ):
        assert expected in proc.stdout, expected
    training = proc.stdout.split("Memory estimate per GPU of the training pool")[1].split("rollout pool")[0]
    assert "vLLM weights + KV cache" not in training and "    rollout " not in training  # no engine there
    # a pool of one rank is named as such
    one = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagrl.plan",
            *overrides,
            "rollout.n_gpus_per_node=1",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert one.returncode == 0, one.stderr
    assert "pools: rollout rank 0 (1 node x 1), train ranks 1-4 (1 node x 4)" in one.stdout
    assert "TP groups         [1,2] [3,4]" in one.stdout


def test_two_pool_memory_splits_actor_and_engine(tmp_path, prompts):
    from dagrl.config.validate import planned_world_size, preflight
    from dagrl.plan import make_plan
    from dagrl.plan.memory import GIB

    overrides = two_pool_overrides(config_dir(tmp_path / "qwen3-1.7b", "qwen3", "1.7b"), prompts, tmp_path)
    cfg = Cfg(compose(overrides))
    shape = preflight(cfg, world_size=planned_world_size(cfg))
    assert shape.pool == "train"
    plan = make_plan(cfg, shape)
    assert plan.two_pools and plan.groups.tp[0] == [2, 3] and plan.groups.dp == [[2, 4], [3, 5]]
    assert plan.rollout_pool.groups.rollout_tp == [[0, 1]] and plan.rollout_pool.layout.rollout_dp == 1
    assert make_plan(cfg, shape.in_pool("rollout")).groups == plan.groups  # either pool's shape plans the run

    colocated_cfg = Cfg(
        compose(
            [o for o in overrides if not o.startswith("rollout.")]  # the same 4-rank layout
            + ["actor_rollout_ref.hybrid_engine=true"]
        )
    )
    colocated = make_plan(colocated_cfg, preflight(colocated_cfg, world_size=4))
    assert colocated.layout.model == plan.layout.model and colocated.groups.tp == [[0, 1], [2, 3]]
    train, together = plan.memory[0], colocated.memory[0]
    assert train.parts["vllm"] == 0 and "rollout" not in train.phases
    assert train.phases["update"] == pytest.approx(together.phases["update"])  # vLLM sleeps there (free_cache_engine)
    assert train.peak < together.peak  # the rollout phase's vLLM share is gone
    assert together.peak == pytest.approx(together.phases["rollout"])

    engine = plan.rollout_pool.memory
    assert engine.peak > 0 and "optimizer" not in engine.parts and "gradients" not in engine.parts
    assert engine.parts["rollout weights"] == pytest.approx(plan.model.total_params() * 2 / 2 / GIB)  # bf16, / TP 2
    assert engine.peak == pytest.approx(0.5 * 141 + 2.0)  # gpu_memory_utilization x GPU + the assumed overhead
    assert engine.peak < together.peak

    hf_cfg = Cfg(
        compose(
            overrides + ["actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
        )
    )
    hf = make_plan(hf_cfg, preflight(hf_cfg, world_size=6)).rollout_pool.memory
    assert (
        hf.parts["rollout weights"] == pytest.approx(plan.model.total_params() * 2 / GIB) and hf.parts["kv cache"] == 0
    )


@pytest.mark.parametrize(
    "change,key",
    [
        (dict(train_gpus=3), "actor_rollout_ref.actor.megatron.tensor_model_parallel_size"),  # TP2 on 3 training ranks
        (dict(rollout_gpus=3), "actor_rollout_ref.rollout.tensor_model_parallel_size"),  # rollout TP2 on 3 ranks
    ],
)
def test_a_pool_that_cannot_hold_its_layout_exits_2(tmp_path, prompts, change, key):
    overrides = two_pool_overrides(config_dir(tmp_path / "qwen3-1.7b", "qwen3", "1.7b"), prompts, tmp_path, **change)
    proc = subprocess.run(
        [sys.executable, "-m", "dagrl.plan", *overrides], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("dagrl: error:")
        and key in lines[0]
        and "3 is not divisible by 2" in lines[0]
    ), proc.stderr
