"""Colocated partial rollout: the pool's bookkeeping on a scripted engine (exactly-once, the staleness bound, the
checkpoint round trip), then the trainer end to end on CPU with the hf rollout (kill -9 and resume continue
exactly; the carried prefixes cross weight syncs)."""

from __future__ import annotations

import json
import sys
import zlib

import pytest
import torch

from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import Progress, Request, SamplingSpec, finish_reason
from dagrl.nodes.partial_rollout import PartialRolloutBuffer, staleness_metrics
from tests.helpers import metrics_by_step, run_concurrently, run_in_session

EOS, PAD, N = 2, 0, 2
SAMPLING = SamplingSpec(n=N, response_length=8)


class ScriptedEngine:
    """Emits token 7 per advance for every request in flight, until the request's scripted length (from its id
    and its prefix), then eos: long tails without a model."""

    def __init__(self) -> None:
        self.version, self.eos_token_ids, self.pad_token_id = 0, [EOS], PAD
        self.flying: dict[str, Progress] = {}

    @staticmethod
    def length(request: Request) -> int:
        return 1 + zlib.crc32(request.id.encode()) % 8

    def submit(self, requests: list[Request]) -> None:
        for request in requests:
            assert request.id not in self.flying
            self.flying[request.id] = Progress(request)

    def advance(self):
        done = []
        for rid, progress in list(self.flying.items()):
            request = progress.request
            token = EOS if len(request.prefix_ids) + len(progress.token_ids) + 1 >= self.length(request) else 7
            progress.token_ids.append(token)
            progress.log_probs.append(-0.5)
            progress.versions.append(self.version)
            reason = finish_reason(token, len(progress.token_ids), request, self.eos_token_ids)
            if reason:
                done.append(progress.completion(reason))
                del self.flying[rid]
        return done

    def abort(self, ids=None):
        ids = list(self.flying) if ids is None else ids
        return [self.flying.pop(i).completion("abort") for i in ids]

    def in_flight(self) -> int:
        return len(self.flying)


def prompts(step: int, count: int) -> Batch:
    ids = torch.tensor([[PAD, 3 + step, 4 + row] for row in range(count)])
    mask = torch.tensor([[0, 1, 1]] * count)
    return Batch(
        {"input_ids": ids, "attention_mask": mask},
        {"uid": [f"{step}:{row}" for row in range(count)], "position": list(range(count))},
    )


@pytest.mark.parametrize("staleness", [0, 1, 3])
def test_every_prompt_is_trained_once_within_the_staleness_bound(staleness):
    engine, pool, share = ScriptedEngine(), PartialRolloutBuffer(), 2
    added, trained, carried_prefixes, mixed = set(), [], 0, 0.0
    for step in range(1, 13):
        version = step - 1  # the weights this step's update starts from
        engine.version = version
        batch = prompts(step, share if step > 1 else 3 * share)  # oversample 3x on the first step
        pool.add(batch, batch["position"], seed=step, sampling=SAMPLING)
        added |= set(batch["uid"])
        pool.restart_stale(version - staleness)
        carried_prefixes += sum(s is not None and s.finish_reason == "abort" for g in pool.groups for s in g.samples)
        groups = pool.run(engine, SAMPLING, share)
        assert len(groups) == share and engine.in_flight() == 0
        out = pool.batch(groups, SAMPLING.response_length, [EOS], PAD)
        assert len(out) == share * N and list(out["uid"]) == [g.uid for g in groups for _ in range(N)]
        metrics = staleness_metrics(out, version)
        assert metrics["async/staleness_max"] <= staleness
        mixed = max(mixed, metrics["async/partial_fraction"])
        trained += [g.uid for g in groups]
        # behaviour log-probs and versions exist exactly on the response tokens
        assert ((out["token_versions"] >= 0) == out["response_mask"].bool()).all()
    assert len(trained) == len(set(trained))  # none trained twice
    assert set(trained) | {g.uid for g in pool.groups} == added  # none lost
    assert (carried_prefixes > 0) == (staleness > 0)  # K=0: every carried prefix is older than the new weights
    assert (mixed > 0) == (staleness > 0)  # trained samples whose tokens came from two weight versions


def test_the_pool_round_trips_through_its_checkpoint_state():
    engine, pool = ScriptedEngine(), PartialRolloutBuffer()
    batch = prompts(1, 6)
    pool.add(batch, batch["position"], seed=1, sampling=SAMPLING)
    pool.run(engine, SAMPLING, 2)
    state = json.loads(json.dumps(pool.state_dict()))
    rows = Batch.concat([pool.rows[g.uid] for g in pool.groups])
    again = PartialRolloutBuffer()
    again.load_state_dict(state, rows, SAMPLING)
    assert again.state_dict() == pool.state_dict()
    assert [g.prompt_ids for g in again.groups] == [g.prompt_ids for g in pool.groups]
    # both continue the same way
    first, second = ScriptedEngine(), ScriptedEngine()
    assert [g.uid for g in pool.run(first, SAMPLING, 2)] == [g.uid for g in again.run(second, SAMPLING, 2)]


# the trainer end to end: partial_rollout_args and long_tail_model (whose eos ends responses early) are in
# tests/conftest.py, shared with the prompt ledger's and the response limits' tests
def test_partial_rollout_trains_resumes_exactly_and_carries_prefixes_across_syncs(partial_rollout_args, tmp_path):
    args = partial_rollout_args
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    one_thread = {"OMP_NUM_THREADS": "1"}  # the first two runs go side by side on the two cores (all three: the same)
    (code, stderr), (killed, _) = run_concurrently(
        [
            ([sys.executable, "-m", "dagrl.main_dag", *args(straight)], one_thread),
            ([sys.executable, "-m", "dagrl.main_dag", *args(resumed)], {**one_thread, "DAGRL_FAULT": "actor_update:3"}),
        ]
    )
    assert code == 0, stderr[-3000:]
    assert killed == -9
    pool_files = sorted(p.name for p in (resumed / "global_step_2" / "partial_rollout").iterdir())
    assert pool_files == ["dp0.json"] and json.loads(
        (resumed / "global_step_2" / "partial_rollout" / "dp0.json").read_text()
    )  # groups were carried over the checkpoint
    code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *args(resumed)], one_thread)
    assert code == 0, stderr[-3000:]
    expected, actual = metrics_by_step(straight), metrics_by_step(resumed)
    assert actual == expected  # bit-identical, the carried pool included
    assert all(expected[s]["async/staleness_max"] <= 1 for s in range(1, 5))
    assert max(expected[s]["async/partial_fraction"] for s in range(2, 5)) > 0  # prefixes crossed a sync
    assert all(expected[s]["async/buffer_groups"] == 4 for s in range(1, 5))  # 2 x 4 in flight, 4 trained a step
    assert "training/rollout_log_probs_diff_mean" in expected[1]


def test_partial_rollout_on_two_ranks_keeps_a_pool_per_rollout_shard(partial_rollout_args, tmp_path):
    args = partial_rollout_args
    out = tmp_path / "dp2"
    from tests.engine.engine_helpers import free_port

    code, stderr = run_in_session(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "tests.trainer.exit_threads",
            *args(out, **{"trainer.n_gpus_per_node": 2}),
        ]
    )
    assert code == 0, stderr[-3000:]
    # every process group ended with the run: no gloo worker may free a collective's tensors at interpreter shutdown,
    # which aborted rank 1 after a finished run once in CI ("terminate called without an active exception")
    assert stderr.count("gloo threads at exit: 0") == 2 and "terminate called" not in stderr, stderr[-3000:]
    pools = {p.name: json.loads(p.read_text()) for p in (out / "global_step_4" / "partial_rollout").iterdir()}
    assert sorted(pools) == ["dp0.json", "dp1.json"]
    assert len(pools["dp0.json"]) == len(pools["dp1.json"]) == 2  # 2 x 2 prompts in flight per rank, 2 trained
    assert not {g["uid"] for g in pools["dp0.json"]} & {g["uid"] for g in pools["dp1.json"]}
    records = metrics_by_step(out)
    assert all(records[s]["async/staleness_max"] <= 1 for s in range(1, 5))


class OneLongPrompt(ScriptedEngine):
    """Prompt 1:0's responses take 30 tokens, the others 1-8: a tail longer than K+1 steps of decoding."""

    @staticmethod
    def length(request: Request) -> int:
        return 30 if request.id.startswith("1:0/") else ScriptedEngine.length(request)


@pytest.mark.parametrize("restart", [True, False])
def test_a_response_longer_than_the_staleness_window_restarts_forever_unless_restarts_are_off(restart):
    """async_training.restart_stale: restarting groups older than K keeps every token within K versions, but a
    response that needs more than K+1 steps of decoding never finishes (a silent length bias); without restarts it
    finishes under newer weights, older than K, and every prompt is trained."""
    engine, pool, share, staleness = OneLongPrompt(), PartialRolloutBuffer(), 2, 1
    sampling = SamplingSpec(n=N, response_length=32)
    trained, restarts, oldest = [], 0, 0
    for step in range(1, 13):
        version = step - 1
        engine.version = version
        batch = prompts(step, share if step > 1 else 2 * share)
        pool.add(batch, batch["position"], seed=step, sampling=sampling)
        if restart:
            restarts += pool.restart_stale(version - staleness)
        groups = pool.run(engine, sampling, share)
        out = pool.batch(groups, 32, [EOS], PAD)
        oldest = max(oldest, staleness_metrics(out, version)["async/staleness_max"])
        trained += [g.uid for g in groups]
    assert len(trained) == len(set(trained))
    if restart:
        assert "1:0" not in trained and restarts >= 4 and oldest <= staleness
    else:
        assert "1:0" in trained and oldest > staleness
