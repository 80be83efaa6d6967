"""The recorded weight-load plan against the loader it replaces.

`FakeVLLMModel` loads the way vLLM 0.26's layers do, as rank 1 of a tensor-parallel group of 2 (so every narrow has
a non-zero offset): stacked QKV and gate/up shards, a row-parallel narrow along dim 1 (a strided source view), a
padded vocab shard (copy + fill), MoE experts by id, an fp32 head fed bf16, a parameter without its own loader.
Some loaders do what a replay must refuse: a transposed temporary, an in-place op on the input, a write the
torch-function mode cannot see.
"""

from __future__ import annotations

import torch

from dagrl.engine.rollout.load_plan import WeightLoadPlan

RANK, TP = 1, 2
H, HEAD, KV, INTER, VOCAB, PADDED, EXPERTS = 8, 8, 4, 12, 10, 12, 3


def _shard(weight: torch.Tensor, dim: int) -> torch.Tensor:
    size = weight.shape[dim] // TP
    return weight.narrow(dim, RANK * size, size)


class FakeVLLMModel(torch.nn.Module):
    def __init__(self, write_behind: bool = False, overlap: bool = False) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)

        def param(*shape: int, dtype: torch.dtype = torch.bfloat16, loader=None) -> torch.nn.Parameter:
            p = torch.nn.Parameter(torch.randn(*shape, generator=gen).to(dtype), requires_grad=False)
            if loader is not None:
                p.weight_loader = loader
            return p

        self.qkv = param((HEAD + 2 * KV) // TP, H, loader=self._qkv_loader)
        self.gate_up = param(2 * INTER // TP, H, loader=self._gate_up_loader)
        self.down = param(H, INTER // TP, loader=self._row_loader)
        self.embed = param(PADDED // TP, H, loader=self._vocab_loader)
        self.norm = param(H)  # no weight_loader: the default one copies
        self.experts = param(EXPERTS, 2 * INTER // TP, H, loader=self._expert_loader)
        self.head = param(H, H, dtype=torch.float32)  # an fp32 head loaded from bf16
        self.transposed = param(H, 4, loader=lambda p, w: p.data.copy_(w.t().contiguous()))
        self.scaled = param(4, H, loader=self._scaling_loader)
        self.hidden = param(4, H, loader=self._numpy_loader if write_behind else None)
        self.overlap = overlap

    # ---- loaders in vLLM's manner ----
    def _qkv_loader(self, param, weight, shard_id):
        offset, size = {"q": (0, HEAD // TP), "k": (HEAD // TP, KV // TP), "v": ((HEAD + KV) // TP, KV // TP)}[shard_id]
        param.data.narrow(0, offset, size).copy_(_shard(weight, 0))

    def _gate_up_loader(self, param, weight, shard_id):
        param.data.narrow(0, shard_id * INTER // TP, INTER // TP).copy_(_shard(weight, 0))

    def _row_loader(self, param, weight):
        param.data.copy_(_shard(weight, 1))

    def _vocab_loader(self, param, weight):
        rows = VOCAB - RANK * (PADDED // TP) if RANK * (PADDED // TP) < VOCAB else 0
        rows = min(rows, PADDED // TP)
        param[:rows].data.copy_(weight[RANK * (PADDED // TP) : RANK * (PADDED // TP) + rows])
        param[rows:].data.fill_(0)

    def _expert_loader(self, param, weight, weight_name, shard_id, expert_id):
        half = param.data[expert_id].narrow(0, 0 if shard_id == "w1" else INTER // TP, INTER // TP)
        half.copy_(_shard(weight, 0))
        return True

    def _scaling_loader(self, param, weight):
        weight.mul_(1)  # in place on the caller's tensor
        param.data.copy_(weight)

    def _numpy_loader(self, param, weight):
        param.data.float().numpy()  # reads only; the write below is invisible to a torch-function mode
        param.data.view(torch.int16).numpy()[:] = weight.view(torch.int16).numpy()

    # ---- vLLM's load_weights: name mapping, a loader call, the names it loaded ----
    def load_weights(self, weights):
        loaded = set()
        for name, weight in weights:
            layer, _, leaf = name.rpartition(".")
            if layer in ("q_proj", "k_proj", "v_proj"):
                target, args = "qkv", (layer[0],)
            elif layer in ("gate_proj", "up_proj"):
                target, args = "gate_up", (0 if layer == "gate_proj" else 1,)
            elif layer.startswith("experts."):
                _, expert, which = layer.split(".")
                target, args = "experts", (name, "w1" if which == "gate_proj" else "w3", int(expert))
            elif layer == "wrong_down" and self.overlap:
                target, args = "down", ()
            else:
                target, args = layer, ()
            param = getattr(self, target)
            loader = getattr(param, "weight_loader", lambda p, w: p.data.copy_(w))
            loader(param, weight, *args)
            loaded.add(target)
        return loaded


def hf_tensors(seed: int, overlap: bool = False) -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(torch.bfloat16)

    qkv = w(HEAD + 2 * KV, H)  # q, k and v as views of one buffer, as the actor's QKV split exports them
    tensors = [
        ("q_proj.weight", qkv[:HEAD]),
        ("k_proj.weight", qkv[HEAD : HEAD + KV]),
        ("v_proj.weight", qkv[HEAD + KV :]),
        ("gate_proj.weight", w(INTER, H)),
        ("up_proj.weight", w(INTER, H)),
        ("down.weight", w(H, INTER)),
        ("embed.weight", w(VOCAB, H)),
        ("norm.weight", w(H)),
        ("head.weight", w(H, H)),
        ("transposed.weight", w(4, H)),
        ("scaled.weight", w(4, H)),
        ("hidden.weight", w(4, H)),
    ]
    tensors += [(f"experts.{e}.{p}.weight", w(INTER, H)) for e in range(EXPERTS) for p in ("gate_proj", "up_proj")]
    if overlap:
        tensors.append(("wrong_down.weight", w(H, INTER)))
    return tensors


def sleep(*models: torch.nn.Module) -> None:
    """vLLM's sleep(level=2) discards the weights: whatever a sync does not write is garbage after the wake."""
    for model in models:
        for param in model.parameters():
            param.data.fill_(7.0)


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(x, y), name


def test_replayed_syncs_write_exactly_what_the_loader_writes():
    planned, reference = FakeVLLMModel(), FakeVLLMModel()
    plan = WeightLoadPlan(planned)
    for seed in (1, 2, 3):  # the first sync records, the later ones replay
        sleep(planned, reference)
        bucket = hf_tensors(seed)
        assert plan.load(bucket) == reference.load_weights(hf_tensors(seed))
        assert_same_parameters(planned, reference)
    names = [name for name, _ in hf_tensors(0)]
    assert set(plan.unplannable) == {"transposed.weight", "scaled.weight"}, plan.unplannable
    assert "not tensor view -> parameter view" in plan.unplannable["transposed.weight"]
    assert "mul_" in plan.unplannable["scaled.weight"]
    assert plan.stats == {"replayed": 2 * (len(names) - 2), "loader": len(names) + 2 * 2}
    assert (planned.embed[VOCAB - RANK * PADDED // TP :] == 0).all()  # the replayed fill of the padded rows


def test_a_tensor_with_a_new_layout_goes_back_to_the_loader():
    planned, reference = FakeVLLMModel(), FakeVLLMModel()
    plan = WeightLoadPlan(planned)
    plan.load(hf_tensors(1))
    reference.load_weights(hf_tensors(1))
    bucket = [(name, t.t().contiguous().t() if name == "down.weight" else t) for name, t in hf_tensors(2)]
    replayed = plan.stats["replayed"]
    sleep(planned, reference)
    plan.load(bucket)
    reference.load_weights(bucket)
    assert_same_parameters(planned, reference)
    assert plan.stats["replayed"] == replayed + len(bucket) - 3  # all but down (new strides), transposed, scaled


def test_a_write_the_recorder_cannot_see_is_never_replayed():
    planned, reference = FakeVLLMModel(write_behind=True), FakeVLLMModel(write_behind=True)
    plan = WeightLoadPlan(planned)
    for seed in (1, 2):
        sleep(planned, reference)
        plan.load(hf_tensors(seed))
        reference.load_weights(hf_tensors(seed))
    assert_same_parameters(planned, reference)
    assert "behind the recorder" in plan.unplannable["hidden.weight"], plan.unplannable


def test_copies_into_overlapping_memory_turn_the_replay_off():
    planned, reference = FakeVLLMModel(overlap=True), FakeVLLMModel(overlap=True)
    plan = WeightLoadPlan(planned)
    for seed in (1, 2):  # two names write the same parameter: only the loader's own order is right
        sleep(planned, reference)
        plan.load(hf_tensors(seed, overlap=True))
        reference.load_weights(hf_tensors(seed, overlap=True))
        assert_same_parameters(planned, reference)
    assert not plan.plans and plan.unplannable["down.weight"] == "copies into overlapping memory"


def test_the_plan_is_logged_once_per_recording_sync(caplog):
    planned = FakeVLLMModel()
    plan = WeightLoadPlan(planned)
    tensors = hf_tensors(1)
    with caplog.at_level("INFO", logger="dagrl.engine.rollout.load_plan"):
        for bucket in (tensors[:3], tensors[3:]):  # the first sync, in two buckets, records
            plan.load(bucket)
        plan.end_sync()
        plan.load(hf_tensors(2))  # a replayed sync records nothing: nothing to say
        plan.end_sync()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("weight sync plan")]
    assert lines == [
        f"weight sync plan: {len(tensors) - 2} tensors replay as copies, 2 go through the model's "
        f"loader (e.g. {next(iter(plan.unplannable))}: {next(iter(plan.unplannable.values()))})"
    ], lines
