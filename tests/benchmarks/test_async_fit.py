"""benchmarks/async_fit.py: the async model's rates fitted to a colocated run. The fit must recover the iteration
cost it was given, fall back to the per-sequence limit where the steps cannot tell a from c, reproduce the plain
run it was fitted to step by step, and rebuild the measured run's own lengths; fitted to the 4 x H200 plain run it
must predict what partial rollout trained there."""

import numpy as np
import pytest

from benchmarks.async_fit import fit_iteration, fit_rates, replay
from benchmarks.async_model import Workload, colocated

# the 4 x H200 long-tailed plain run (docs/async.md: 48 prompts x 4, 4 processes, limits 1024,8192 over 272 rows)
PLAIN = [
    dict(
        zip(
            (
                "timing_s/step",
                "timing_s/gen",
                "timing_s/reward",
                "timing_s/rollout_switch",
                "response_length/mean",
                "response_length/max",
            ),
            values,
        ),
        **{"prompt_length/mean": 30.0},
    )
    for values in (
        (57.30, 41.52, 2.64, 33.36, 937.26, 3834),
        (29.91, 12.38, 12.61, 1.32, 965.69, 8122),
        (24.74, 11.50, 7.27, 1.34, 883.31, 6376),
        (30.96, 19.40, 4.44, 1.49, 1260.83, 8192),
    )
]


def test_fit_recovers_the_iteration_cost_from_steps_that_differ():
    rng = np.random.default_rng(0)
    longest, tokens = rng.uniform(1000, 8000, (4, 3)), rng.uniform(20_000, 90_000, (4, 3))
    seconds = (2e-3 * longest + 5e-5 * tokens).max(1)
    assert fit_iteration(longest, tokens, seconds) == pytest.approx((2e-3, 5e-5), rel=1e-6)


def test_fit_puts_alike_steps_on_the_per_sequence_limit():
    """Steps with the same longest-to-tokens ratio cannot tell a from c: c = 0, all time on the longest."""
    longest, tokens = np.full((3, 2), 100.0), np.full((3, 2), 400.0)
    a, c = fit_iteration(longest, tokens, np.array([1.0, 1.1, 0.9]))
    assert c == 0 and a == pytest.approx(0.01)


def test_replay_rebuilds_the_measured_runs_longest_response_of_every_step():
    """The measured run (before dagrl drew verl's prompt order) drew numpy's; verl's order gives other steps."""
    lengths = replay(272, 1024, 8192, batch=48, n=4, draws=5, order="numpy")
    assert lengths.shape == (5 * 48 * 4,) and (lengths[::4] == lengths[3::4]).all()  # a prompt's samples alike
    assert [lengths[i * 192 : (i + 1) * 192].max() for i in range(4)] == [row["response_length/max"] for row in PLAIN]
    verl = replay(272, 1024, 8192, batch=48, n=4, draws=5)
    assert [verl[i * 192 : (i + 1) * 192].max() for i in range(4)] != [row["response_length/max"] for row in PLAIN]


@pytest.fixture(scope="module")
def fitted():
    lengths = replay(272, 1024, 8192, batch=48, n=4, draws=8, order="numpy")
    rates, fit = fit_rates(PLAIN, ranks=4, batch=48, n=4, replayed=lengths, grouped=True)
    return rates, fit, Workload(batch=48, n=4, prompt_len=30, replay=lengths)


def test_fitted_model_reproduces_the_plain_run_step_by_step(fitted):
    rates, fit, work = fitted
    assert 1.5e-3 < fit["a"] < 3.5e-3 and 2e-5 < fit["c"] < 1e-4  # a few ms an iteration, tens of us a sequence
    steps = [colocated(work, rates, 4, s, warm=s - 1).step_s for s in range(1, 5)]
    measured = [row["timing_s/step"] for row in PLAIN]
    assert steps == pytest.approx(measured, rel=0.05)
    assert sum(steps) == pytest.approx(sum(measured), rel=0.01)  # step 1's one-time costs included


def test_fitted_model_predicts_what_partial_rollout_trained(fitted):
    """Measured on the same machine (colocated partial rollout, K=1, oversample 2): trained responses averaged
    582 tokens over steps 1-4 (315, 497, 661, 854) where plain trained 1,012, and steps 2-4 took 34.9 s."""
    rates, _, work = fitted
    run = colocated(work, rates, 4, 4, partial=True, oversample=2.0, staleness=1, warm=0)
    assert run.resp_mean == pytest.approx(582, rel=0.05)
    assert 3 * colocated(work, rates, 4, 4, partial=True, oversample=2.0, staleness=1).step_s == pytest.approx(
        9.32 + 11.52 + 14.05, rel=0.1
    )
