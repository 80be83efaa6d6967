"""The async-training model's claims that could be wrong: what an iteration costs (a fixed part plus one per
sequence in flight), what staleness K buys, what the long tail costs each schedule, which responses partial rollout
trains (with and without restarts), the length sampler's mean, determinism, and the rates loader's refusal of
unknown keys."""

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from benchmarks.async_model import Rates, Workload, colocated, load_rates, long_tail_lengths, predict_table, two_pools

ROOT = Path(__file__).resolve().parents[2]


def constant(length):
    return lambda rng, count: np.full(count, float(length))


@pytest.mark.parametrize("mean,max_len", [(1024, 8192), (512, 4096), (2048, 32768)])
def test_lengths_mean_within_ten_percent_with_a_tail(mean, max_len):
    lengths = long_tail_lengths(np.random.default_rng(0), 20_000, mean=mean, max_len=max_len)
    assert abs(lengths.mean() / mean - 1) < 0.10
    assert lengths.min() >= 16 and lengths.max() == max_len  # clipped, and the clip is reached
    assert np.percentile(lengths, 99) > 4 * mean  # a real tail, not a narrow bump


def test_same_seed_same_result_other_seed_differs():
    rates = Rates()
    runs = [two_pools(Workload(seed=s), rates, 4, 4, 1, steps=8, partial=True, oversample=2.0) for s in (3, 3, 4)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert colocated(Workload(seed=3), rates, 8, 8, True, 2.0) == colocated(Workload(seed=3), rates, 8, 8, True, 2.0)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("rollout_gpus", [2, 4, 8, 12, 14])
def test_k0_two_pools_never_faster_than_colocated(seed, rollout_gpus):
    """K=0 serialises the pools (batch b waits for step b-1), so a step is gen on the rollout GPUs + train on the
    training GPUs, each slower than on all 16: with free pushes and equal per-GPU rates, two pools lose."""
    w, rates = Workload(seed=seed), Rates(push_s=0.0)
    assert two_pools(w, rates, rollout_gpus, 16 - rollout_gpus, 0).step_s >= colocated(w, rates, 16).step_s


def test_k0_step_is_gen_plus_train_and_k1_overlaps_them():
    """Constant lengths, gen on 4 GPUs == train on 4 GPUs: K=0 pays gen + train, K>=1 pays max(gen, train)."""
    w = Workload(batch=16, n=4, prompt_len=64, lengths=constant(512))
    tokens = 16 * 4 * (64 + 512)
    gen = 16 * 64 / 1e9 + 512 * (1 / 100 + 16 / 1e4)  # 16 sequences a GPU: a token costs 10 ms + 16 x 0.1 ms
    rates = Rates(decode_tok_s=1e4, seq_tok_s=100, prefill_tok_s=1e9, train_tok_s=tokens / (4 * gen), push_s=0)
    assert two_pools(w, rates, 4, 4, 0).step_s == pytest.approx(2 * gen, rel=1e-6)
    for k in (1, 2, 4):
        assert two_pools(w, rates, 4, 4, k).step_s == pytest.approx(gen, rel=1e-6)
    # colocated on all 8: 8 sequences a GPU, each iteration cheaper by 8 x 0.1 ms; training halves
    gen8 = 8 * 64 / 1e9 + 512 * (1 / 100 + 8 / 1e4)
    assert colocated(w, rates, 8).step_s == pytest.approx(gen8 + gen / 2, rel=1e-6)
    with_push = two_pools(w, Rates(**{**rates.__dict__, "push_s": 1.0}), 4, 4, 1).step_s
    assert gen < with_push <= gen + 1.0 + 1e-9  # a push stalls the rollout pool once per batch


def test_an_iteration_costs_a_fixed_part_plus_one_per_sequence_so_a_fuller_gpu_is_cheaper_per_token():
    """t_iter(b) = 1/seq_tok_s + b/decode_tok_s: b sequences of L tokens take L x t_iter(b), so doubling them costs
    less than double; with no per-sequence part (decode_tok_s = inf) they come for free."""
    rates = Rates(decode_tok_s=10_000, seq_tok_s=250, prefill_tok_s=1e12, train_tok_s=1e12, push_s=0)

    def gen(b: int, r: Rates = rates) -> float:
        return colocated(Workload(batch=b, n=1, prompt_len=0, lengths=constant(1000)), r, 1, steps=2).step_s

    assert gen(16) == pytest.approx(1000 * (1 / 250 + 16 / 10_000), rel=1e-6)
    assert gen(32) < 1.5 * gen(16)  # 32 x 0.1 ms added to a 4 ms iteration: 1.28x the time for 2x the tokens
    free = Rates(**{**rates.__dict__, "decode_tok_s": float("inf")})
    assert gen(32, free) == pytest.approx(gen(1, free), rel=1e-6) == pytest.approx(4.0, rel=1e-6)


def test_filling_the_tail_with_short_sequences_costs_only_their_per_sequence_part():
    """One 4,096-token response beside k of 64: the GPU takes 4,096 iterations either way, so the k cost
    k x 64 x c on top of 4,096 x (a + c), whatever share of the GPU the old even split would have given them."""
    rates = Rates(decode_tok_s=20_000, seq_tok_s=400, prefill_tok_s=1e12, train_tok_s=1e12, push_s=0)
    a, c = 1 / 400, 1 / 20_000

    def gen(k: int) -> float:
        tail = lambda rng, count: np.array([4096.0] + [64.0] * (count - 1))  # noqa: E731 - a short local helper
        return colocated(Workload(batch=k + 1, n=1, prompt_len=0, lengths=tail), rates, 1, steps=2).step_s

    assert gen(0) == pytest.approx(4096 * (a + c), rel=1e-6)
    assert gen(63) == pytest.approx(4096 * (a + c) + 63 * 64 * c, rel=1e-6)
    assert gen(63) < 1.05 * gen(0)  # 63 more sequences, 4 % more time


def grouped_tail(rng, count, n=4):
    """Long-tailed lengths shared by a prompt's n samples: how benchmarks/long_tail_data.py's data behave."""
    return np.repeat(long_tail_lengths(rng, count // n), n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_partial_rollout_trains_a_shorter_mix_under_restarts_and_not_without(seed):
    """Partial rollout trains what finishes first. Restarting groups older than K throws long responses back to
    their prompts, so fewer of them are ever trained: a shorter mix. Without restarts (restart_stale=false) they
    finish under newer weights and, over a long run, the trained mix is plain's."""
    w = Workload(batch=32, n=4, seed=seed, lengths=grouped_tail)
    rates = Rates(decode_tok_s=20_000, seq_tok_s=400, train_tok_s=8_000, push_s=0)
    plain = colocated(w, rates, 4, 24, warm=4).resp_mean
    free = colocated(w, rates, 4, 24, partial=True, oversample=2.0, warm=4)
    restarted = colocated(w, rates, 4, 24, partial=True, oversample=2.0, staleness=0, warm=4)
    assert free.resp_mean > 0.95 * plain
    assert restarted.resp_mean < 0.93 * free.resp_mean
    assert restarted.step_s > free.step_s  # and the thrown-away tokens cost generation
    # the same in two pools at K=0
    runs = [two_pools(w, rates, 2, 2, 0, 24, partial=True, oversample=2.0, restarts=r, warm=4) for r in (False, True)]
    assert runs[0].resp_mean > 0.95 * plain and runs[1].resp_mean < 0.97 * runs[0].resp_mean
    # a short run counted from step 1 trains the short ones first even without restarts: the buffer starts empty
    assert (
        colocated(w, rates, 4, 4, partial=True, oversample=2.0, warm=0).resp_mean
        < 0.8 * colocated(w, rates, 4, 4, warm=0).resp_mean
    )


def test_each_rank_trains_its_own_share():
    """dagrl's partial-rollout buffers are per rank: a rank whose buffer holds only long groups waits for its share of
    them, however many short groups the other rank has finished."""
    replay = np.repeat(np.array([4000.0, 4000, 100, 100] * 2), 2)  # each draw: rank 0 two long prompts, rank 1 short
    w = Workload(batch=4, n=2, prompt_len=0, replay=replay)
    rates = Rates(decode_tok_s=20_000, seq_tok_s=400, prefill_tok_s=1e12, train_tok_s=1e12, push_s=0)
    step = colocated(w, rates, 2, 1, partial=True, oversample=2.0, warm=0).step_s
    assert step == pytest.approx(4000 * (1 / 400 + 8 / 20_000), rel=1e-6)  # rank 0: 8 long sequences together


def test_longer_tail_costs_colocated_more_than_partial_rollout():
    short, long = (Workload(lengths=partial(long_tail_lengths, max_len=m)) for m in (4096, 16384))
    rates = Rates()
    plain = colocated(long, rates, 16).step_s - colocated(short, rates, 16).step_s
    part = (
        colocated(long, rates, 16, partial=True, oversample=2.0).step_s
        - colocated(short, rates, 16, partial=True, oversample=2.0).step_s
    )
    assert plain > 60  # the longest sequence sets the plain step: 12k more tokens at 60 tok/s
    assert part < plain / 10


@pytest.mark.parametrize(
    "split,partial_rollout", [((4, 4), False), ((2, 6), False), ((6, 2), False), ((2, 6), True), ((32, 32), True)]
)
def test_speedup_non_decreasing_in_k(split, partial_rollout):
    w, rates = Workload(), Rates()
    speed = [two_pools(w, rates, *split, k, 8, partial_rollout, 2.0).tokens_per_gpu_s for k in range(5)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(speed, speed[1:])), speed
    assert speed[1] > speed[0] * 1.05  # K=1 overlaps generation with training


def test_table_best_split_is_at_least_the_fixed_ones():
    rows = predict_table(Workload(), Rates(), gpu_counts=(8, 64), ks=range(2), steps=8)
    assert [(r["gpus"], r["K"]) for r in rows] == [(8, 0), (8, 1), (64, 0), (64, 1)]
    assert all(r["best"] >= max(r["half"], r["three_q"]) - 1e-12 for r in rows)
    assert sum(rows[0]["best_split"]) == 8 and sum(rows[-1]["best_split"]) == 64


def test_rates_json_loads_known_keys_and_rejects_unknown(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"decode_tok_s": 1234, "push_s": 2}))
    assert load_rates(str(good)) == Rates(decode_tok_s=1234.0, push_s=2.0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"decode_tok_s": 1, "train_tokens_per_s": 2}))
    with pytest.raises(ValueError, match="train_tokens_per_s") as error:
        load_rates(str(bad))
    assert "\n" not in str(error.value)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/async_model.py"), "--table", "--rates-json", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "train_tokens_per_s" in done.stderr


def test_staleness_restarts_cost_partial_rollout_time_and_vanish_at_large_k():
    """A long response outliving K versions starts again: generation spent twice. K=0 restarts every carried group
    (slower than without restarts); a K beyond the run's length restarts none (the same result as without)."""
    w = Workload(batch=32, n=4, seed=1)
    rates = Rates(seq_tok_s=40.0)  # an 8k response takes ~200 s: several steps
    free = colocated(w, rates, 8, 8, partial=True, oversample=2.0)
    assert colocated(w, rates, 8, 8, partial=True, oversample=2.0, staleness=99) == free
    assert (
        colocated(w, rates, 8, 8, partial=True, oversample=2.0, staleness=0).tokens_per_gpu_s
        < 0.95 * free.tokens_per_gpu_s
    )
    free = two_pools(w, rates, 4, 4, 1, 8, partial=True, oversample=2.0)
    assert (
        two_pools(w, rates, 4, 4, 99, 8, partial=True, oversample=2.0, restarts=True).step_s
        <= two_pools(w, rates, 4, 4, 99, 8, partial=True, oversample=2.0).step_s + 1e-9
    )
    assert (
        two_pools(w, rates, 4, 4, 1, 8, partial=True, oversample=2.0, restarts=True).tokens_per_gpu_s
        < 0.95 * free.tokens_per_gpu_s
    )
