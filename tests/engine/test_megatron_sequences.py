"""Packed sequences (verl's use_remove_padding): the layout functions, the context-parallel split, and on CPU the
packed engine (one row, block-diagonal causal mask) giving the padded engine's log-probs, values and gradients."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.engine.megatron import packing
from dagrl.engine.megatron.sequences import PackSpec, RowLayout, packed_micro_batch, packed_total, padded_micro_batch
from engine_helpers import make_batch, sum_loss
from test_megatron_dynamic_bsz import recording, uneven_batch
from tiny_models import make_model_dir

ADAM = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
CPU = torch.device("cpu")


# ---- pure functions ------------------------------------------------------------------------------------------


def test_segments_restart_positions_and_block_causal_mask():
    segments = packing.segment_lengths([3, 5, 2], align_each=2, align_total=4)
    assert segments == [4, 6, 2] and sum(segments) % 4 == 0
    assert packing.segment_lengths([3], 1, 4, min_total=12) == [12]
    assert packing.restart_positions([2, 3]).tolist() == [0, 1, 0, 1, 2]
    mask = packing.block_causal_mask([2, 3])[0, 0]
    allowed = ~mask
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]])
    assert torch.equal(allowed.long(), expected)


@pytest.mark.parametrize("cp_size", [1, 2, 3, 4])
def test_context_parallel_split_is_megatrons_load_balanced_order(cp_size):
    rng = random.Random(cp_size)
    segments = packing.segment_lengths([rng.randint(1, 30) for _ in range(5)], 2 * cp_size, 2 * cp_size)
    total = sum(segments)
    held = [packing.context_parallel_positions(segments, cp_size, rank) for rank in range(cp_size)]
    assert sorted(torch.cat(held).tolist()) == list(range(total))  # every position on exactly one rank
    assert all(len(h) == total // cp_size for h in held)
    start = 0
    for length in segments:  # rank r holds chunks r and 2*cp-1-r of each segment, in that order
        chunk = length // (2 * cp_size)
        for rank in range(cp_size):
            mine = [p for p in held[rank].tolist() if start <= p < start + length]
            first = list(range(start + rank * chunk, start + (rank + 1) * chunk))
            last = list(range(start + (2 * cp_size - 1 - rank) * chunk, start + (2 * cp_size - rank) * chunk))
            assert mine == first + last
        start += length
    # the index maps back: the local index of a held global position points at that position
    queries = torch.randint(0, total, (7, 3))
    owners = torch.zeros_like(queries)
    for rank in range(cp_size):
        local, is_held = packing.context_parallel_index(queries, segments, cp_size, rank)
        assert torch.equal(held[rank][local][is_held], queries[is_held])
        owners += is_held.long()
    assert torch.all(owners == 1)


@pytest.mark.parametrize("cp_size,sp_tp", [(2, 1), (2, 2), (4, 1)])
def test_context_parallel_micro_batches_reassemble_the_packed_row(cp_size, sp_tp):
    """Per CP rank: local tokens, logit positions and the THD description; together they cover the unsplit row."""
    batch = uneven_batch()
    layout = RowLayout.of(batch)
    index = [0, 2, 3, 5]
    align = 2 * cp_size * sp_tp
    whole = packed_micro_batch(
        batch,
        layout,
        index,
        sum(packing.segment_lengths(layout.lengths[index].tolist(), align, align)),
        PackSpec(align, align),
        CPU,
    )
    held_count = torch.zeros_like(whole.logit_pos)
    for rank in range(cp_size):
        spec = PackSpec(align_each=align, align_total=align, cp_size=cp_size, cp_rank=rank, thd=True)
        local = packed_micro_batch(batch, layout, index, whole.seq_length, spec, CPU)
        assert local.tokens.shape == (1, whole.seq_length // cp_size) and (whole.seq_length // cp_size) % sp_tp == 0
        held = local.held
        assert torch.equal(local.tokens[0, local.logit_pos[held]], whole.tokens[0, whole.logit_pos[held]])
        assert torch.equal(local.position_ids[0, local.logit_pos[held]], whole.position_ids[0, whole.logit_pos[held]])
        params = local.packed_seq_params
        assert params.qkv_format == "thd" and local.attention_mask is None
        assert params.cu_seqlens_q.tolist() == packing.cumulative(
            packing.segment_lengths(layout.lengths[index].tolist(), align, align)
        )
        assert params.max_seqlen_q == max(torch.diff(params.cu_seqlens_q).tolist())
        held_count += held.long()
    assert torch.all(held_count == 1)


def test_packed_and_padded_micro_batches_hold_the_same_tokens():
    batch = uneven_batch()
    layout = RowLayout.of(batch)
    index = [1, 4, 6]
    padded = padded_micro_batch(batch, layout, index, rows=4, seq_len=20, device=CPU)
    packed = packed_micro_batch(batch, layout, index, packed_total(layout, index, PackSpec()), PackSpec(), CPU)
    assert packed.tokens.shape == (1, int(layout.lengths[index].sum()))  # no padding at all
    for j in range(len(index)):
        n = int(layout.lengths[index[j]])
        start = int(packed.logit_pos[j, 0]) - int(layout.prompt_lens[index[j]]) + 1
        assert torch.equal(packed.tokens[0, start : start + n], padded.tokens[j, :n])
        assert packed.position_ids[0, start : start + n].tolist() == list(range(n))
    offsets = packed.logit_pos - padded.logit_pos  # the same logits, shifted by each sequence's start
    assert torch.all(offsets == offsets[:, :1])


# ---- the engine on CPU -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("models") / "qwen3", "qwen3", seed=4)


def actor(path: Path, optim: OptimSpec | None = None, **kwargs):
    from dagrl.engine.megatron.actor import MegatronActorEngine

    return MegatronActorEngine(MegatronEngineSpec(model_path=str(path), optim=optim, **kwargs))


@pytest.mark.parametrize("max_token_len", [None, 30])
def test_packed_log_probs_equal_padded(model_dir, max_token_len):
    batch = uneven_batch()
    want, want_entropy = actor(model_dir).compute_log_prob(batch, 3, 0.8, with_entropy=True)
    packed = actor(model_dir, remove_padding=True)
    seen = recording(packed)
    got, entropy = packed.compute_log_prob(batch, 3, 0.8, with_entropy=True, max_token_len=max_token_len)
    assert (got - want).abs().max() <= 1e-5 and (entropy - want_entropy).abs().max() <= 1e-5
    assert torch.all(got[batch["response_mask"] == 0] == 0)
    for micro in seen[0]:  # one row per micro-batch, no padding, the block-diagonal mask applied
        assert micro.tokens.shape[0] == 1 and micro.attention_mask is not None
        assert micro.tokens.shape[1] == int(RowLayout.of(batch).lengths[micro.index].sum())


def test_packed_train_step_equals_padded(model_dir):
    batch = uneven_batch()
    padded = actor(model_dir, ADAM).train_step(batch, sum_loss, 2, 1.0)
    packed = actor(model_dir, ADAM, remove_padding=True).train_step(batch, sum_loss, 2, 1.0, max_token_len=25)
    for key in ("loss", "tokens", "actor/grad_norm"):
        assert packed[key] == pytest.approx(padded[key], rel=1e-5), key


def test_packed_values_and_critic_step_equal_padded(model_dir):
    from dagrl.engine.megatron.critic import MegatronCriticEngine

    batch = make_batch(rows=5, seed=2)

    def values_loss(micro_batch, values, entropy):
        loss = ((values - 0.5) ** 2 * micro_batch["response_mask"]).sum()
        return loss, {"loss": loss.detach()}

    engines = [
        MegatronCriticEngine(MegatronEngineSpec(model_path=str(model_dir), optim=ADAM, remove_padding=flag))
        for flag in (False, True)
    ]
    values = [e.compute_values(batch, 2) for e in engines]
    assert (values[0] - values[1]).abs().max() <= 1e-5
    steps = [e.train_step(batch, values_loss, 2) for e in engines]
    assert steps[1]["loss"] == pytest.approx(steps[0]["loss"], rel=1e-5)
    assert steps[1]["critic/grad_norm"] == pytest.approx(steps[0]["critic/grad_norm"], rel=1e-5)


def test_context_parallel_needs_transformer_engine_on_gpu(model_dir):
    from dagrl.placement import ParallelLayout

    with pytest.raises(ValueError, match="needs packed sequences on GPU with TransformerEngine"):
        actor(model_dir, layout=ParallelLayout(context_parallel_size=2), remove_padding=True)
