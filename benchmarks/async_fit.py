"""The async model's rates (benchmarks/async_model.py) fitted to one measured colocated run, and that run's lengths.

Used by benchmarks/async_pipeline.py --report: every other run is predicted from these rates alone (no per-run
fitting). Decode: a plain step's generation is the slowest rank's, and with t_iter(b) = a + c*b a rank that starts
its sequences together spends sum over iterations of (a + c * in flight) = a * its longest + c * its tokens. So each
measured step gives one linear equation in (a, c); least squares over the steps after the first (step 1 holds
one-time costs) fits both. The steps differ in how long their longest response is against how many tokens they
hold, which is what separates a from c; where they do not (every step alike), c = 0: the time is put on the
per-sequence limit, the old model's assumption, and occupancy buys nothing.
"""

from __future__ import annotations

import numpy as np

try:  # imported as benchmarks.async_fit (the tests), or with benchmarks/ on the path (async_pipeline.py)
    from .async_model import Rates, long_tail_lengths
except ImportError:
    from async_model import Rates, long_tail_lengths

# prefill per GPU as a multiple of the training rate: the training passes (forward + backward + the log-prob
# forward) cost ~4 forwards a token, prefill one. Not measurable in a plain run (its prompts are ~30 tokens)
PREFILL_PER_TRAIN = 4.0


def replay(
    rows: int,
    mean: float,
    max_len: int,
    batch: int,
    n: int,
    draws: int,
    limit_seed: int = 0,
    data_seed: int = 1,
    order: str = "verl_workers",
) -> np.ndarray:
    """Response lengths, n per prompt, in the order the trainer's sampler (data.seed, default 1) draws the prompts
    of benchmarks/long_tail_data.py's data set (--seed, default 0): a random-weight model never stops early, so
    each prompt's limit is its length. `order`: the sampler's (dagrl.data.sampler.ORDERS); runs measured with
    older versions drew "numpy" (before dagrl drew verl's order) or "verl" (before it drew as verl's loader with
    worker processes does)."""
    from dagrl.data.sampler import EpochSampler

    limits = long_tail_lengths(np.random.default_rng(limit_seed), rows, mean, max_len)
    sampler = EpochSampler(rows, batch, seed=data_seed, order=order)
    return np.repeat(limits[np.concatenate([sampler.next_batch()[1] for _ in range(draws)])], n)


def fit_iteration(longest: np.ndarray, tokens: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """(a, c) >= 0 of seconds[i] = max over ranks r of a * longest[i, r] + c * tokens[i, r], least squares."""
    a, c = float(seconds.sum() / longest.max(1).sum()), 0.0
    for _ in range(20):  # the slowest rank depends on (a, c): iterate to a fixed point
        slowest = np.argmax(a * longest + c * tokens, axis=1)
        x = np.stack([np.take_along_axis(m, slowest[:, None], 1)[:, 0] for m in (longest, tokens)], 1)
        scaled = x / x.max(0)
        if len(x) >= 2 and np.linalg.svd(scaled, compute_uv=False)[-1] > 1e-3:  # both columns informative
            fit = np.linalg.lstsq(x, seconds, rcond=None)[0]
        else:
            fit = np.array([-1.0, 0.0])
        if fit.min() < 0:  # outside the physical range, or no information on c: all on the per-sequence limit
            fit = np.array([seconds @ x[:, 0] / (x[:, 0] @ x[:, 0]), 0.0])
        if np.allclose(fit, (a, c), rtol=1e-9, atol=0):
            break
        a, c = map(float, fit)
    return a, c


def fit_rates(
    rows: list[dict], ranks: int, batch: int, n: int, replayed: np.ndarray | None, grouped: bool
) -> tuple[Rates, dict]:
    """Rates of the colocated run `rows` (every step, from 1) on `ranks` processes; `replayed`: its lengths (see
    `replay`), else each step's longest and mean response stand in for the slowest rank's. Returns the rates and
    the fit's details (a, c, each step's model and measured decode seconds)."""
    produce = np.array([r["timing_s/gen"] + r.get("timing_s/reward", 0.0) for r in rows])
    switch = np.array([r.get("timing_s/rollout_switch", 0.0) for r in rows])
    prompt = np.array([r.get("prompt_length/mean", 0.0) for r in rows])
    tokens = (prompt + [r["response_length/mean"] for r in rows]) * batch * n
    train = np.array([r["timing_s/step"] for r in rows]) - produce
    share = batch // ranks
    if replayed is not None:  # rank r holds prompts [r * share, (r + 1) * share) of each batch, n samples each
        per_rank = replayed[::n][: len(rows) * batch].reshape(len(rows), ranks, share)
        longest, held = per_rank.max(2), n * per_rank.sum(2)
    else:  # the slowest rank holds the longest response (its whole group, where a prompt's samples share a limit)
        top, mean = (np.array([r[f"response_length/{k}"] for r in rows])[:, None] for k in ("max", "mean"))
        longest, held = top, (n * top + (n * share - n) * mean if grouped else top + (n * share - 1) * mean)
    steady = slice(1, None) if len(rows) >= 3 else slice(None)  # step 1 holds one-time costs (the first wake-up)
    train_tok_s = tokens[steady].sum() / max(train[steady].sum(), 1e-9) / ranks
    prefill = PREFILL_PER_TRAIN * train_tok_s
    decode = np.maximum(produce - switch - prompt * n * share / prefill, 1e-6)
    a, c = fit_iteration(longest[steady], held[steady], decode[steady])
    model = (a * longest + c * held).max(1)
    rates = Rates(
        decode_tok_s=1.0 / c if c > 0 else np.inf,
        seq_tok_s=1.0 / a,
        prefill_tok_s=float(prefill),
        train_tok_s=float(train_tok_s),
        push_s=0.0,
        switch_s=float(switch[steady].mean()),
    )
    # step 1's extra seconds over what the model gives it: the trainer's warm-up (every schedule pays it), the
    # rest (the engine's first wake-up) only colocated runs pay
    rates.first_train_s = max(0.0, float(train[0] - tokens[0] / (ranks * train_tok_s)))
    rates.first_switch_s = max(0.0, float(produce[0] - model[0] - rates.switch_s)) if len(rows) >= 3 else 0.0
    return rates, {"a": a, "c": c, "model_decode_s": model, "decode_s": decode}
