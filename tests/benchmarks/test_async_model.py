"""The async-training model's claims that could be wrong: what staleness K buys, what the long tail costs each
schedule, the length sampler's mean, determinism, and the rates loader's refusal of unknown keys."""
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
    gen = 16 * 64 / 1e9 + 512 / 100  # 16 sequences per GPU at the 100 tok/s limit (decode 1e4 is not binding)
    rates = Rates(decode_tok_s=1e4, seq_tok_s=100, prefill_tok_s=1e9, train_tok_s=tokens / (4 * gen), push_s=0)
    assert two_pools(w, rates, 4, 4, 0).step_s == pytest.approx(2 * gen, rel=1e-6)
    for k in (1, 2, 4):
        assert two_pools(w, rates, 4, 4, k).step_s == pytest.approx(gen, rel=1e-6)
    # colocated on all 8: generation is at the per-sequence limit either way, training halves: 1.5 x gen
    assert colocated(w, rates, 8).step_s == pytest.approx(1.5 * gen, rel=1e-6)
    with_push = two_pools(w, Rates(**{**rates.__dict__, "push_s": 1.0}), 4, 4, 1).step_s
    assert gen < with_push <= gen + 1.0 + 1e-9  # a push stalls the rollout pool once per batch


def test_longer_tail_costs_colocated_more_than_partial_rollout():
    short, long = (Workload(lengths=partial(long_tail_lengths, max_len=m)) for m in (4096, 16384))
    rates = Rates()
    plain = colocated(long, rates, 16).step_s - colocated(short, rates, 16).step_s
    part = (colocated(long, rates, 16, partial=True, oversample=2.0).step_s
            - colocated(short, rates, 16, partial=True, oversample=2.0).step_s)
    assert plain > 60  # the longest sequence sets the plain step: 12k more tokens at 60 tok/s
    assert part < plain / 10


@pytest.mark.parametrize("split,partial_rollout", [((4, 4), False), ((2, 6), False), ((6, 2), False),
                                                   ((2, 6), True), ((32, 32), True)])
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
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/async_model.py"), "--table", "--rates-json",
                           str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "train_tokens_per_s" in done.stderr


def test_staleness_restarts_cost_partial_rollout_time_and_vanish_at_large_k():
    """A long response outliving K versions starts again: generation spent twice. K=0 restarts every carried group
    (slower than without restarts); a K beyond the run's length restarts none (the same result as without)."""
    w = Workload(batch=32, n=4, seed=1)
    rates = Rates(seq_tok_s=40.0)  # an 8k response takes ~200 s: several steps
    free = colocated(w, rates, 8, 8, partial=True, oversample=2.0)
    assert colocated(w, rates, 8, 8, partial=True, oversample=2.0, staleness=99) == free
    assert colocated(w, rates, 8, 8, partial=True, oversample=2.0, staleness=0).tokens_per_gpu_s \
        < 0.95 * free.tokens_per_gpu_s
    free = two_pools(w, rates, 4, 4, 1, 8, partial=True, oversample=2.0)
    assert two_pools(w, rates, 4, 4, 99, 8, partial=True, oversample=2.0, restarts=True).step_s \
        <= two_pools(w, rates, 4, 4, 99, 8, partial=True, oversample=2.0).step_s + 1e-9
    assert two_pools(w, rates, 4, 4, 1, 8, partial=True, oversample=2.0, restarts=True).tokens_per_gpu_s \
        < 0.95 * free.tokens_per_gpu_s
