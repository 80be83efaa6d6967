"""Checkpoint contents (save_contents/load_contents), starting from a Megatron dist checkpoint, the HF export (the
trainer's actor/huggingface and scripts/model_merger.py), the reference's own offload flag, and checkpoints that
cross tensor- and expert-parallel layouts.

The multi-process cases are jobs of the shared 2-rank engine world (world.py): prepare_world_job and run_world_job.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from dagrl.placement import ParallelLayout  # noqa: E402 - after the sys.path insert above
from engine_helpers import (  # noqa: E402 - after the sys.path insert above
    ADAM,
    actor_engine,
    exported,
    fresh_parallel_state,
    hf_log_probs,
    make_batch,
    merge_args,
    run_merger,
    sum_loss,
)
from tiny_models import load_hf, make_model_dir  # noqa: E402 - after the sys.path insert above

MERGER = ROOT / "scripts" / "model_merger.py"
MOE_OPTIMIZERS = {"moe": {}, "moe_distopt": {"use_distributed_optimizer": True}}  # world job: engine kwargs


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("models") / "qwen3", "qwen3", seed=5)


# ---- contents and the start from a dist checkpoint ----------------------------------------------------


def test_start_from_a_dist_checkpoint_gives_the_saved_model(qwen3, tmp_path):
    batch = make_batch(rows=4)
    actor = actor_engine(qwen3, ADAM)
    actor.train_step(batch, sum_loss, 2, 1.0)
    actor.save_checkpoint(str(tmp_path / "ckpt"))
    want, _ = actor.compute_log_prob(batch, 2, 1.0, with_entropy=False)

    started = actor_engine(qwen3, dist_checkpoint_path=str(tmp_path / "ckpt"))  # config from qwen3, weights from ckpt
    trained = exported(actor)
    assert all(torch.equal(tensor, trained[name]) for name, tensor in exported(started).items())
    got, _ = started.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    assert (got - want).abs().max() <= 1e-5
    untrained, _ = hf_log_probs(load_hf(qwen3), batch)
    assert (untrained - want).abs().max() > 1e-3  # the step moved the weights: the HF files were not read


def test_save_contents_and_load_contents(qwen3, tmp_path):
    from dagrl.engine.megatron.checkpoint import describe

    batch = make_batch(rows=4)
    weights_only = actor_engine(qwen3, ADAM, save_contents=("model", "hf_model"))
    weights_only.train_step(batch, sum_loss, 2, 1.0)
    weights_only.save_checkpoint(str(tmp_path / "model_only"))
    info = describe(str(tmp_path / "model_only"))
    assert info["contents"] == ["model"] and info["model_path"] == str(qwen3) and info["param_dtype"] == "float32"

    # Resuming it restores the weights, and the optimizer starts afresh: as a run started from those weights.
    resumed = actor_engine(qwen3, ADAM)
    resumed.load_checkpoint(str(tmp_path / "model_only"))
    started = actor_engine(qwen3, ADAM, dist_checkpoint_path=str(tmp_path / "model_only"))
    assert resumed.train_step(batch, sum_loss, 2, 1.0) == started.train_step(batch, sum_loss, 2, 1.0)
    with pytest.raises(ValueError, match="load_contents"):
        actor_engine(qwen3, ADAM, load_contents=("model", "optimizer")).load_checkpoint(str(tmp_path / "model_only"))

    # load_contents=[model] of a full bf16 checkpoint: the weights (and the fp32 main params behind them), not the
    # Adam state; with the Adam state the next step would differ.
    full = actor_engine(qwen3, ADAM, param_dtype=torch.bfloat16)
    full.train_step(batch, sum_loss, 2, 1.0)
    full.save_checkpoint(str(tmp_path / "full"))
    assert describe(str(tmp_path / "full"))["contents"] == ["model", "optimizer", "extra"]
    continued = full.train_step(batch, sum_loss, 2, 1.0)
    partial = actor_engine(qwen3, ADAM, param_dtype=torch.bfloat16, load_contents=("model",))
    partial.load_checkpoint(str(tmp_path / "full"))
    fresh = actor_engine(qwen3, ADAM, param_dtype=torch.bfloat16, dist_checkpoint_path=str(tmp_path / "full"))
    stepped = partial.train_step(batch, sum_loss, 2, 1.0)
    assert stepped == fresh.train_step(batch, sum_loss, 2, 1.0)
    assert stepped["actor/grad_norm"] == continued["actor/grad_norm"] and stepped["loss"] == continued["loss"]
    assert not all(torch.equal(a, b) for a, b in zip(exported(partial).values(), exported(full).values()))


# ---- HF export and the merger ---------------------------------------------------------------------------


def test_merged_checkpoint_loads_in_transformers_with_the_engines_log_probs(tiny_model, tmp_path):
    """A trained actor's checkpoint with the trainer's HF export beside it; the merger rebuilds the same HF model
    from the dist checkpoint alone."""
    from transformers import AutoTokenizer

    from dagrl.engine.megatron.hf_export import HF_DIR, write_hf_model

    batch = make_batch(rows=4)
    actor = actor_engine(tiny_model, ADAM)
    actor.train_step(batch, sum_loss, 2, 1.0)
    actor_dir = tmp_path / "global_step_1" / "actor"
    actor.save_checkpoint(str(actor_dir))
    write_hf_model(actor.export_weights(1 << 14), actor_dir / HF_DIR, tiny_model, write=True, shard_bytes=1 << 16)
    assert len(list((actor_dir / HF_DIR).glob("model-*-of-*.safetensors"))) > 1  # sharded, with an index
    want, want_entropy = actor.compute_log_prob(batch, 2, 1.0, with_entropy=True)

    merged = tmp_path / "merged"
    run_merger(*merge_args(tmp_path / "global_step_1", merged, "--hf_model_path", str(tiny_model)))
    got, got_entropy = hf_log_probs(load_hf(merged), batch)
    assert (got - want).abs().max() <= 1e-5 and (got_entropy - want_entropy).abs().max() <= 1e-5
    assert (merged / "config.json").read_text() == (tiny_model / "config.json").read_text()
    assert AutoTokenizer.from_pretrained(merged).get_vocab() == AutoTokenizer.from_pretrained(tiny_model).get_vocab()
    got, _ = hf_log_probs(load_hf(actor_dir / HF_DIR), batch)  # the trainer's export loads alike
    assert (got - want).abs().max() <= 1e-5
    run_merger("test", "--backend", "megatron", "--local_dir", str(actor_dir), "--test_hf_dir", str(actor_dir / HF_DIR))


@pytest.mark.slow
def test_trainer_writes_the_hf_copy_into_the_checkpoint(tiny_model, tiny_data, tmp_path):
    """save_contents with hf_model: global_step_N/actor/huggingface, written before the checkpoint is published,
    equals what the merger makes of the dist checkpoint beside it."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from tests.conftest import cpu_run_overrides
    from tests.helpers import run_in_session

    out = tmp_path / "run"
    args = cpu_run_overrides(
        tiny_model,
        tiny_data,
        out,
        **{
            "trainer.total_training_steps": 1,
            "trainer.save_freq": 1,
            "trainer.test_freq": -1,
            "trainer.val_before_train": False,
            "actor_rollout_ref.actor.checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
        },
    )
    code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *args])
    assert code == 0, stderr[-3000:]
    hf_dir = out / "global_step_1" / "actor" / "huggingface"
    assert AutoTokenizer.from_pretrained(hf_dir).get_vocab() == AutoTokenizer.from_pretrained(tiny_model).get_vocab()
    trained, initial = load_file(str(hf_dir / "model.safetensors")), load_file(str(tiny_model / "model.safetensors"))
    assert set(trained) == set(initial) and not all(torch.equal(trained[n], initial[n]) for n in trained)
    run_merger("test", "--backend", "megatron", "--local_dir", str(out / "global_step_1"), "--test_hf_dir", str(hf_dir))


def test_a_checkpoint_of_other_layer_names_is_refused_in_one_line(qwen3, tmp_path, capsys):
    """TransformerEngine layers name fused norms and grouped experts differently from the local spec built here."""
    actor_engine(qwen3).save_checkpoint(str(tmp_path / "ckpt"))
    common = torch.load(tmp_path / "ckpt" / "common.pt", weights_only=False)
    assert common["dagrl"]["layer_spec"] == "local"
    common["dagrl"]["layer_spec"] = "transformer_engine"
    torch.save(common, tmp_path / "ckpt" / "common.pt")
    with pytest.raises(ValueError, match="transformer_engine layer spec"):
        actor_engine(qwen3, dist_checkpoint_path=str(tmp_path / "ckpt"))
    run_merger(*merge_args(tmp_path / "ckpt", tmp_path / "out"), code=2)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "TransformerEngine" in lines[0]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: root / "missing", "no such directory"),
        (lambda root: root, "is not a dagrl checkpoint (no metadata.json)"),
    ],
)
def test_merger_refuses_what_is_not_a_checkpoint_in_one_line(tmp_path, make, message):
    done = subprocess.run(
        [sys.executable, str(MERGER), *merge_args(make(tmp_path), tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("model_merger: error: --local_dir") and message in lines[0]


# ---- config: pre-flight and the reference's offload flag ------------------------------------------------


def compose_cfg(tiny_model, tiny_data, tmp_path, **extra):
    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from tests.conftest import cpu_run_overrides

    return Cfg(compose(cpu_run_overrides(tiny_model, tiny_data, tmp_path / "run", **extra)))


@pytest.mark.parametrize(
    "overrides, key, message",
    [
        (
            {"actor_rollout_ref.actor.megatron.use_dist_checkpointing": True},
            "dist_checkpointing_path",
            "needs actor_rollout_ref.actor.megatron.dist_checkpointing_path",
        ),
        (
            {
                "actor_rollout_ref.actor.megatron.use_dist_checkpointing": True,
                "actor_rollout_ref.actor.megatron.dist_checkpointing_path": "/nonexistent/ckpt",
            },
            "dist_checkpointing_path",
            "no such directory",
        ),
        (
            {"actor_rollout_ref.actor.megatron.dist_checkpointing_path": "/nonexistent/ckpt"},
            "dist_checkpointing_path",
            "use_dist_checkpointing=false",
        ),
        (
            {"actor_rollout_ref.actor.checkpoint.save_contents": "[optimizer,hf_model]"},
            "save_contents",
            "include model",
        ),
        ({"actor_rollout_ref.actor.checkpoint.load_contents": "[model,weights]"}, "load_contents", "must be a list of"),
        ({"actor_rollout_ref.ref.megatron.param_offload": "maybe"}, "ref.megatron.param_offload", "true or false"),
    ],
)
def test_preflight_checks_the_checkpoint_keys(tiny_model, tiny_data, tmp_path, overrides, key, message):
    from dagrl.config.errors import ConfigError
    from dagrl.config.validate import preflight

    with pytest.raises(ConfigError) as error:
        preflight(compose_cfg(tiny_model, tiny_data, tmp_path, **overrides))
    assert key in error.value.key and message in str(error.value) and "\n" not in str(error.value)


def test_preflight_accepts_a_dist_checkpoint_dir(tiny_model, tiny_data, tmp_path):
    from dagrl.config.validate import preflight

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "metadata.json").write_text("{}")
    preflight(
        compose_cfg(
            tiny_model,
            tiny_data,
            tmp_path,
            **{
                "actor_rollout_ref.actor.megatron.use_dist_checkpointing": True,
                "actor_rollout_ref.actor.megatron.dist_checkpointing_path": str(tmp_path / "ckpt"),
                "actor_rollout_ref.actor.checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
            },
        )
    )


def test_resuming_parts_the_checkpoint_lacks_fails_in_preflight(tiny_model, tiny_data, tmp_path):
    """load_contents asking for parts the checkpoint to resume does not hold (auto or resume_path), or a PPO run
    resuming a checkpoint without critic/, stops in pre-flight (before any model is built) in one line naming the
    key; asking for what is there passes."""
    from dagrl.config.errors import ConfigError
    from dagrl.config.validate import preflight
    from dagrl.trainer.checkpoint import CheckpointManager

    actor = actor_engine(tiny_model, save_contents=("model",))
    root = tmp_path / "run"  # compose_cfg's trainer.default_local_dir

    def write(tmp):  # the actor's part, and the data.pt every trainer checkpoint has (pre-flight looks for it)
        actor.save_checkpoint(str(tmp / "actor"))
        torch.save({"global_step": 2}, tmp / "data.pt")

    CheckpointManager(str(root), None, 0, lambda: None).save(2, write)
    model_only = {"actor_rollout_ref.actor.checkpoint.load_contents": "[model]"}
    ppo = {"dag": "ppo", "algorithm.adv_estimator": "gae", **model_only}
    resume_path = {"trainer.resume_mode": "resume_path", "trainer.resume_from_path": str(root / "global_step_2")}
    for mode, source in (({}, "trainer.default_local_dir"), (resume_path, "trainer.resume_from_path")):
        with pytest.raises(ConfigError) as error:  # load_contents defaults to save_contents: model, optimizer, extra
            preflight(compose_cfg(tiny_model, tiny_data, tmp_path, **mode))
        message = str(error.value)
        assert error.value.key == "actor_rollout_ref.actor.checkpoint.load_contents" and "\n" not in message
        assert "cannot restore ['optimizer', 'extra']" in message and "to a subset of ['model']" in message
        preflight(compose_cfg(tiny_model, tiny_data, tmp_path, **mode, **model_only))
        with pytest.raises(ConfigError, match="has no critic/ checkpoint") as error:
            preflight(compose_cfg(tiny_model, tiny_data, tmp_path, **mode, **ppo))
        assert error.value.key == source
    preflight(compose_cfg(tiny_model, tiny_data, tmp_path, **{"trainer.default_local_dir": str(tmp_path / "new")}))


@pytest.mark.parametrize("actor_offload, ref_offload", [(False, True), (True, False)])
def test_reference_param_offload_is_its_own_flag(tiny_model, tiny_data, tmp_path, actor_offload, ref_offload):
    from dagrl.config.validate import preflight
    from dagrl.trainer import build

    cfg = compose_cfg(
        tiny_model,
        tiny_data,
        tmp_path,
        **{
            "actor_rollout_ref.actor.use_kl_loss": True,
            "actor_rollout_ref.actor.megatron.param_offload": actor_offload,
            "actor_rollout_ref.ref.megatron.param_offload": ref_offload,
        },
    )
    actor, reference = build.build_actor_and_reference(cfg, preflight(cfg), total_training_steps=2)
    batch = make_batch(rows=2)
    for _ in range(2):  # between phases: on the host exactly when its own flag says so
        assert reference.param_store.offloaded is ref_offload and actor.param_store.offloaded is actor_offload
        log_probs, _ = reference.compute_log_prob(batch, 2, 1.0, with_entropy=False)
        actor.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    if ref_offload:
        assert next(reference.modules[0].parameters()).untyped_storage().nbytes() == 0
    assert (log_probs - hf_log_probs(load_hf(tiny_model), batch)[0]).abs().max() <= 1e-5  # brought back intact


# ---- across layouts: TP2 -> merged HF, EP2 <-> EP1 (jobs of the 2-rank engine world, world.py) ---------------


def worker_engine(layout: ParallelLayout, model_dir: Path, **kwargs):

    fresh_parallel_state()
    return actor_engine(model_dir, ADAM, layout=layout, **kwargs)


def dp_rows(batch):
    from megatron.core import parallel_state as ps

    return batch.chunk(ps.get_data_parallel_world_size())[ps.get_data_parallel_rank()]


def full_log_probs(actor, batch) -> torch.Tensor:
    """Log-probs of the whole batch from an engine whose DP ranks each hold a share of the rows."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    mine, _ = actor.compute_log_prob(dp_rows(batch), 1, 1.0, with_entropy=False)
    parts = [torch.empty_like(mine) for _ in range(ps.get_data_parallel_world_size())]
    dist.all_gather(parts, mine, group=ps.get_data_parallel_group())
    return torch.cat(parts)


def continuation(actor, batch) -> dict:
    """What a checkpoint of `actor`'s current state must reproduce: its log-probs and its next step."""
    return {"log_probs": full_log_probs(actor, batch), "next": actor.train_step(dp_rows(batch), sum_loss, 1, 1.0)}


def prepare_world_job(name: str, work_dir: Path) -> None:
    """tp2: a tied Llama; moe/moe_distopt: a Qwen3-MoE and, for the ranks to load, its checkpoint after a step at
    EP1 (this process) with what that checkpoint must reproduce (expected_ep1.pt)."""
    if name == "tp2":
        make_model_dir(work_dir / "model", "llama", tie=True, seed=6)
        return
    model_dir = make_model_dir(work_dir / "model", "qwen3_moe", num_layers=2, seed=7)
    batch = make_batch(rows=4)
    ep1 = actor_engine(model_dir, ADAM, **MOE_OPTIMIZERS[name])
    ep1.train_step(batch, sum_loss, 1, 1.0)
    ep1.save_checkpoint(str(work_dir / "ep1"))
    torch.save(continuation(ep1, batch), work_dir / "expected_ep1.pt")


def run_world_job(name: str, work_dir: Path) -> None:
    """On both ranks. tp2: train a step, save with the HF export beside, record what the engine computes. moe: EP2
    (x DP2) trains a step and saves; then a fresh EP2 engine loads the EP1 checkpoint."""
    import torch.distributed as dist

    from dagrl.engine.megatron.hf_export import HF_DIR, write_hf_model

    batch, model_dir = make_batch(rows=4), work_dir / "model"
    records = {}
    if name == "tp2":
        actor = worker_engine(ParallelLayout(tensor_model_parallel_size=2), model_dir)
        actor.train_step(batch, sum_loss, 2, 1.0)
        actor_dir = work_dir / "global_step_1" / "actor"
        actor.save_checkpoint(str(actor_dir))
        write_hf_model(actor.export_weights(1 << 14), actor_dir / HF_DIR, str(model_dir), write=dist.get_rank() == 0)
        records["log_probs"], records["entropy"] = actor.compute_log_prob(batch, 2, 1.0, with_entropy=True)
    else:
        layout, kwargs = ParallelLayout(expert_model_parallel_size=2), MOE_OPTIMIZERS[name]
        actor = worker_engine(layout, model_dir, **kwargs)
        actor.train_step(dp_rows(batch), sum_loss, 1, 1.0)
        actor.save_checkpoint(str(work_dir / "ep2"))
        records["ep2"] = continuation(actor, batch)
        from_ep1 = worker_engine(layout, model_dir, **kwargs)
        from_ep1.load_checkpoint(str(work_dir / "ep1"))
        records["ep2_from_ep1"] = continuation(from_ep1, batch)
    if dist.get_rank() == 0:
        torch.save(records, work_dir / "records.pt")


@pytest.mark.engine_world("test_megatron_checkpoint:tp2")
def test_tp2_checkpoint_merges_into_the_trained_model(engine_world, tmp_path):
    """TP2 (2 processes, tied embeddings) -> scripts/model_merger.py on the command line -> transformers."""
    from safetensors.torch import load_file

    work_dir = engine_world.result("test_megatron_checkpoint:tp2")
    record = torch.load(work_dir / "records.pt")
    merged = tmp_path / "merged"
    done = subprocess.run(
        [sys.executable, str(MERGER), *merge_args(work_dir / "global_step_1" / "actor", merged)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got, got_entropy = hf_log_probs(load_hf(merged), make_batch(rows=4))
    assert (got - record["log_probs"]).abs().max() <= 1e-5
    assert (got_entropy - record["entropy"]).abs().max() <= 1e-5
    tensors = load_file(str(merged / "model.safetensors"))
    exported_by_trainer = load_file(str(work_dir / "global_step_1" / "actor" / "huggingface" / "model.safetensors"))
    assert "lm_head.weight" not in tensors and set(tensors) == set(exported_by_trainer)
    assert all(torch.equal(tensors[name], exported_by_trainer[name]) for name in tensors)


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(name, marks=pytest.mark.engine_world(f"test_megatron_checkpoint:{name}"))
        for name in sorted(MOE_OPTIMIZERS)
    ],
)
def test_moe_checkpoints_cross_expert_parallel_layouts(engine_world, scenario):
    """Qwen3-MoE: a checkpoint saved at EP2 (x DP2) loads at EP1 and one saved at EP1 loads at EP2, each giving
    the saving run's log-probs and next step (loss, grad norm, LR); plain and distributed optimizer."""
    work_dir = engine_world.result(f"test_megatron_checkpoint:{scenario}")
    records, expected_ep1 = torch.load(work_dir / "records.pt"), torch.load(work_dir / "expected_ep1.pt")
    ep2_loaded = actor_engine(work_dir / "model", ADAM, **MOE_OPTIMIZERS[scenario])
    ep2_loaded.load_checkpoint(str(work_dir / "ep2"))
    for got, want in (
        (continuation(ep2_loaded, make_batch(rows=4)), records["ep2"]),
        (records["ep2_from_ep1"], expected_ep1),
    ):
        assert (got["log_probs"] - want["log_probs"]).abs().max() <= 1e-5
        for key in ("loss", "actor/grad_norm", "actor/lr"):
            assert got["next"][key] == pytest.approx(want["next"][key], rel=1e-5), key
