"""scripts/upcycle_moe.py: a dense Llama upcycled into a Mixtral computes the dense model's log-probs, in HF
transformers and in dagrl's Megatron actor; the hf rollout takes the actor's Mixtral weights; bad arguments are
refused in one line with exit code 2 and DST is never overwritten."""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dagrl.plan.model import ModelShape
from tests.conftest import make_tiny_model_dir
from tests.engine.engine_helpers import hf_log_probs, make_batch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "upcycle_moe.py"
# the user's home from the password database: the test session points HOME at a directory of its own
SMOLLM2 = Path(pwd.getpwuid(os.getuid()).pw_dir) / "models" / "SmolLM2-135M-Instruct"


def load_script():
    spec = importlib.util.spec_from_file_location("upcycle_moe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_hf(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny dense Llama (3 layers) and its upcycle: 4 experts, top-2, a router large enough to route unevenly."""
    root = tmp_path_factory.mktemp("upcycle")
    dense = make_tiny_model_dir(root / "dense", num_layers=3, seed=3)
    code = load_script().main([str(dense), str(root / "moe"), "--experts", "4", "--top-k", "2", "--router-std", "1"])
    assert code == 0
    return dense, root / "moe"


def test_the_upcycled_moe_computes_the_dense_models_log_probs_in_hf(models):
    dense, moe = models
    config = json.loads((moe / "config.json").read_text())
    dense_config = json.loads((dense / "config.json").read_text())
    assert config["model_type"] == "mixtral" and config["architectures"] == ["MixtralForCausalLM"]
    assert (config["num_local_experts"], config["num_experts_per_tok"]) == (4, 2)
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_key_value_heads", "rope_parameters"):
        assert config[key] == dense_config[key], key
    # the tokenizer and generation files came along; the dense weights did not
    assert {p.name for p in dense.iterdir()} == {p.name for p in moe.iterdir()}

    weights, dense_weights = load_file(str(moe / "model.safetensors")), load_file(str(dense / "model.safetensors"))
    for e in range(4):
        for dense_name, expert in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
            name = f"model.layers.1.block_sparse_moe.experts.{e}.{expert}.weight"
            assert torch.equal(weights[name], dense_weights[f"model.layers.1.mlp.{dense_name}.weight"])
    routers = [weights[f"model.layers.{i}.block_sparse_moe.gate.weight"] for i in range(3)]
    assert routers[0].shape == (4, 64) and not torch.equal(routers[0], routers[1])

    dense_model, moe_model = load_hf(dense), load_hf(moe)
    assert sum(p.numel() for p in moe_model.parameters()) == ModelShape.from_hf(config).total_params()
    # the routers do route: tokens pick different experts (else the check below would hold for any top-k weights)
    hidden = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    assert len(set(torch.topk(hidden @ routers[0].T, 2).indices[:, 0].tolist())) > 1
    batch = make_batch(rows=4, vocab=dense_model.config.vocab_size)
    want, want_entropy = hf_log_probs(dense_model, batch)
    got, entropy = hf_log_probs(moe_model, batch)
    assert (got - want).abs().max() < 1e-5 and (entropy - want_entropy).abs().max() < 1e-5


def test_the_actor_and_the_hf_rollout_run_the_upcycled_moe(models, tmp_path):
    """dagrl's Megatron actor computes the same log-probs for the upcycled MoE as for the dense model; its weight
    sync fills an hf rollout of the MoE (whose routers were other random weights) with exactly the checkpoint's."""
    from dagrl.engine.base import MegatronEngineSpec
    from dagrl.engine.megatron.actor import MegatronActorEngine
    from dagrl.engine.rollout.hf import HFRollout

    dense, moe = models
    batch = make_batch(rows=4, vocab=json.loads((dense / "config.json").read_text())["vocab_size"])
    log_probs = {}
    for name, path in (("dense", dense), ("moe", moe)):
        actor = MegatronActorEngine(MegatronEngineSpec(model_path=str(path)))
        log_probs[name] = actor.compute_log_prob(batch, micro_batch_size=2, temperature=1.0, with_entropy=True)
    (want, want_entropy), (got, entropy) = log_probs["dense"], log_probs["moe"]
    assert (got - want).abs().max() < 1e-5 and (entropy - want_entropy).abs().max() < 1e-5

    other = tmp_path / "other"
    assert load_script().main([str(dense), str(other), "--experts", "4", "--top-k", "2", "--seed", "1"]) == 0
    rollout = HFRollout(str(other), eos_token_ids=[0], pad_token_id=0, device=torch.device("cpu"))
    want_state = load_hf(moe).state_dict()
    assert not torch.equal(
        rollout.model.state_dict()["model.layers.0.mlp.gate.weight"], want_state["model.layers.0.mlp.gate.weight"]
    )
    rollout.load_weights(actor.export_weights(1 << 14))  # the MoE actor's
    got_state = rollout.model.state_dict()
    assert [name for name in want_state if not torch.equal(got_state[name], want_state[name])] == []
    partial = [
        [(n, t) for n, t in b if not n.endswith("layers.2.block_sparse_moe.gate.weight")]
        for b in actor.export_weights(1 << 14)
    ]
    with pytest.raises(RuntimeError, match=r"stale, e\.g\. \['model\.layers\.2\.mlp\.gate\.weight'\]"):
        rollout.load_weights(iter(partial))


def test_the_same_seed_gives_the_same_weights_in_shards_of_the_size_asked(models, tmp_path):
    dense, moe = models
    again = tmp_path / "again"
    again.mkdir()  # an empty DST is taken
    args = [str(dense), str(again), "--experts", "4", "--top-k", "2", "--router-std", "1", "--shard-gb", "0.0001"]
    assert load_script().main(args) == 0
    index = json.loads((again / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 3 and shards == sorted(p.name for p in again.glob("*.safetensors"))
    assert all((again / shard).stat().st_size < 0.0001 * 2**30 + 50_000 for shard in shards)  # + one tensor
    second = {name: tensor for shard in shards for name, tensor in load_file(str(again / shard)).items()}
    first = load_file(str(moe / "model.safetensors"))
    assert second.keys() == first.keys() == index["weight_map"].keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


@pytest.mark.parametrize(
    "args,message",
    [
        (["{moe}", "{new}"], "SRC {moe}: model_type is 'mixtral', not 'llama'; give a Llama model directory"),
        (["{missing}", "{new}"], "SRC {missing}: not a directory; give a Llama model directory"),
        (["{dense}", "{moe}"], "DST {moe} exists and is not an empty directory; give a new path"),
        (["{dense}", "{new}", "--top-k", "3", "--experts", "2"], "--top-k 3: must be between 1 and --experts 2"),
        (["{dense}", "{new}", "--experts", "0"], "--experts 0: give at least 1 expert per layer"),
        (["{dense}", "{new}", "--router-std", "-1"], "--router-std -1.0: must be >= 0"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(models, tmp_path, capsys, args, message):
    dense, moe = models
    paths = dict(dense=dense, moe=moe, new=tmp_path / "new", missing=tmp_path / "missing")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in moe.iterdir())
    assert load_script().main([arg.format(**paths) for arg in args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"upcycle_moe: {message.format(**paths)}"), err
    assert not (tmp_path / "new").exists()
    assert sorted((p.name, p.stat().st_mtime_ns) for p in moe.iterdir()) == before  # never overwritten


def test_the_script_exits_2_on_a_bad_argument(models, tmp_path):
    dense, _ = models
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(dense), str(tmp_path / "x"), "--experts", "2", "--top-k", "4"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--top-k 4" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not (SMOLLM2 / "config.json").is_file(), reason="SmolLM2-135M-Instruct is not in ~/models")
def test_upcycled_smollm2_gives_the_dense_log_probs(tmp_path):
    from transformers import AutoTokenizer

    moe = tmp_path / "smollm2_moe"
    assert load_script().main([str(SMOLLM2), str(moe), "--experts", "8", "--top-k", "2"]) == 0
    tokenizer = AutoTokenizer.from_pretrained(moe)
    prompts = ["The capital of France is", "def fibonacci(n):", "Water boils at a temperature of"]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True)
    log_probs = []
    for path in (SMOLLM2, moe):
        with torch.no_grad():
            logits = load_hf(path)(**encoded).logits
        log_probs.append(torch.log_softmax(logits, -1)[encoded["attention_mask"].bool()])
    assert (log_probs[1] - log_probs[0]).abs().max() < 1e-4
