"""Separate pools: a scheduler's SIGTERM during the validation that runs in the rollout pool cuts it between
generations, as in a colocated run (tests/reliability/test_signals_at_startup.py), so the training pool's preemption
checkpoint lands at once, within the grace, with the step's weights left to validate on resume."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dagrl.trainer.pools.rollout import RolloutPool
from dagrl.trainer.pools.training import Feed
from dagrl.trainer.validation import ValidationCut
from dagrl.utils import preemption
from dagrl.utils.preemption import STORE_KEY, StopRequest
from tests.helpers import metrics_by_step
from tests.reliability.harness import complete_steps, partial_dirs
from tests.trainer.test_two_pools import args, launch  # noqa: F401 - args: the fixture, used by name

VAL = "val-core/dagrl/arithmetic/acc/mean@1"


def test_sigterm_in_the_rollout_pools_validation_cuts_it_and_the_training_pool_saves_at_once(args, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    run = args(out, **{"trainer.test_freq": 1, "trainer.save_freq": 4})
    # the rollout pool's process (launch rank 0) alone gets it, as it starts validating step 1's weights
    ((code, stderr),) = launch((run, 2, {"DAGRL_SIGNAL": "validation:1@0=SIGTERM"}))
    assert code == 0 and "Traceback" not in stderr, stderr[-3000:]
    assert "validation (step 1) stopped by SIGTERM after 0 of" in stderr, stderr[-3000:]
    assert "stopped on SIGTERM after step 1 of 4: checkpoint global_step_1 written" in stderr, stderr[-3000:]
    assert "NOT within it" not in stderr
    assert complete_steps(out) == [1] and partial_dirs(out) == []
    assert VAL not in metrics_by_step(out)[1]  # cut: the resume validates these weights first


class Store:
    """The launch's store, as the stop request and the bridge use it."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def check(self, keys: list[str]) -> bool:
        return all(key in self.values for key in keys)

    def get(self, key: str) -> bytes:
        return self.values[key]

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()


class Bridge:
    """The rollout pool's "val" message arrives after `polls` polls."""

    rollout_leader, poll_s = 0, 0.001

    def __init__(self, message: dict, polls: int) -> None:
        self.store, self.message, self.polls = Store(), message, polls

    def available(self, src: int, channel: str) -> int:
        self.polls -= 1
        return int(self.polls < 0)

    def check_failed(self) -> None:
        pass

    def recv(self, src: int, channel: str) -> dict:
        return self.message


def stop_request(monkeypatch, name: str | None) -> StopRequest:
    monkeypatch.setattr(preemption, "_installed", None)
    stop = StopRequest(None, signals=())  # no handlers: the signal is set by hand
    stop.signal = name
    return stop


@pytest.mark.parametrize("name", ["SIGTERM", "SIGUSR1", "SIGINT", None])
def test_the_training_pool_announces_its_stop_while_it_waits_and_a_cut_raises(monkeypatch, name):
    """Its SIGTERM/SIGUSR1 reaches the rollout pool's validation through the store while it waits (a Ctrl-C lets
    that validation finish: not announced there); a cut validation raises ValidationCut, one that ran returns its
    metrics."""
    stop, metrics = stop_request(monkeypatch, name), {"val-core/x/acc/mean@1": 0.5}
    cut = name not in (None, "SIGINT")
    bridge = Bridge({"step": 3, "metrics": {} if cut else metrics, "cut": cut}, polls=3)
    if cut:
        with pytest.raises(ValidationCut):
            Feed(bridge, leader=True).val(3, stop)
        assert bridge.store.get(STORE_KEY) == name.encode()
    else:
        assert Feed(bridge, leader=True).val(3, stop) == metrics
        assert STORE_KEY not in bridge.store.values


@pytest.mark.parametrize(
    "own,announced,cut",
    [(None, None, False), ("SIGTERM", None, True), (None, "SIGUSR1", True), ("SIGINT", None, False)],
    ids=["no signal", "its own SIGTERM", "the training pool's SIGUSR1", "its own Ctrl-C"],
)
def test_the_rollout_pools_validation_stops_on_a_stop_signal_of_either_pool(monkeypatch, own, announced, cut):
    pool = SimpleNamespace(stop=stop_request(monkeypatch, own), bridge=SimpleNamespace(store=Store()))
    if announced:
        pool.bridge.store.set(STORE_KEY, announced)
    assert RolloutPool.validation_stopped(pool) is cut
    if own:  # the training pool learns it through the store
        assert pool.bridge.store.get(STORE_KEY) == own.encode()
