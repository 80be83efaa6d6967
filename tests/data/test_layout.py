"""Rollout layout -> actor layout: property tests of the pure plan over (world, rollout TP, TP, PP, CP), and one
multi-process run of the collective (this file is also the torchrun worker: `python tests/data/test_layout.py OUT`).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dagrl.data.layout import arrival_index, group_rows, outgoing, partition_groups, plan_rows, sender
from dagrl.placement import WorldLayout


def layouts(worlds=(1, 2, 4, 8, 16)):
    """Every (world, rollout TP, TP, PP, CP) with power-of-two sizes that fits the world."""
    for world in worlds:
        sizes = [s for s in (1, 2, 4, 8) if world % s == 0]
        for rollout_tp, tp, pp, cp in itertools.product(sizes, repeat=4):
            if world % (tp * pp * cp) == 0:
                yield WorldLayout.of(world, rollout_tp, tp=tp, pp=pp, cp=cp)


def make_global(groups: int, n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """uids of `groups` groups of `n` consecutive rows, and random token counts per row."""
    rng = np.random.default_rng(seed)
    uids = [f"0:0:{g}" for g in range(groups) for _ in range(n)]
    return uids, rng.integers(4, 400, size=groups * n)


def test_dp_rank_matches_megatron_rank_generator():
    """The torch-free mapping equals Megatron-Core's own DP groups under its default order."""
    import inspect

    parallel_state = pytest.importorskip("megatron.core.parallel_state")
    default = inspect.signature(parallel_state.initialize_model_parallel).parameters["order"].default
    assert default == "tp-cp-ep-dp-pp"  # the order WorldLayout.dp_rank assumes
    for spec in layouts():
        generator = parallel_state.RankGenerator(tp=spec.tp, ep=1, dp=spec.dp, pp=spec.pp, cp=spec.cp, order=default)
        for group in generator.get_ranks("dp"):
            assert [spec.dp_rank(rank) for rank in group] == list(range(spec.dp)), spec
        for group in generator.get_ranks("tp-pp"):  # a model-parallel group shares one DP rank (and data)
            assert len({spec.dp_rank(rank) for rank in group}) == 1, spec


def test_each_rollout_shard_has_one_tp_leader_its_first_rank():
    """The ranks that speak for a rollout shard (metadata in the layout move, kept-group counts, validation
    records): one per rollout-TP group, in shard order."""
    for spec in layouts():
        shards: dict[int, list[int]] = {}
        for rank in range(spec.world_size):
            shards.setdefault(spec.rollout_dp_rank(rank), []).append(rank)
        assert sorted(shards) == list(range(spec.rollout_dp)), spec
        for ranks in shards.values():
            assert len(ranks) == spec.rollout_tp and ranks == list(range(ranks[0], ranks[0] + spec.rollout_tp))
            assert [spec.is_rollout_tp_leader(rank) for rank in ranks] == [True] + [False] * (len(ranks) - 1)
        leaders = [rank for rank in range(spec.world_size) if spec.is_rollout_tp_leader(rank)]
        assert [spec.rollout_dp_rank(rank) for rank in leaders] == list(range(spec.rollout_dp)), spec


@pytest.mark.parametrize("balance", [False, True])
def test_every_layout_gets_whole_groups_once_and_model_parallel_ranks_agree(balance):
    n = 4
    for index, spec in enumerate(layouts()):
        dp = spec.dp
        for groups, mini in ((dp * 6, dp * 2), (dp * 3, None), (dp * 4, dp + 1 if dp > 1 else None)):
            uids, tokens = make_global(groups, n, seed=index)
            plan = plan_rows(uids, tokens, dp, mini, balance)
            assert len(plan.rows) == dp
            every = np.concatenate(plan.rows)
            assert sorted(every.tolist()) == list(range(groups * n))  # each row exactly once
            owner = {}
            for d, rows in enumerate(plan.rows):
                assert len(rows) == groups // dp * n  # same group count on every DP rank
                for row in rows:
                    assert owner.setdefault(uids[row], d) == d  # a group never straddles DP ranks
            # what each rank ends with: the rows of its DP rank; model-parallel peers hold identical batches
            per_rank = [plan.rows[spec.dp_rank(r)] for r in range(spec.world_size)]
            assert len({spec.dp_rank(r) for r in range(spec.world_size)}) == dp
            for r in range(spec.world_size):
                peers = [q for q in range(spec.world_size) if spec.dp_rank(q) == spec.dp_rank(r)]
                assert len(peers) == spec.model_parallel_size == spec.tp * spec.pp * spec.cp
                assert all(np.array_equal(per_rank[q], per_rank[r]) for q in peers)
            again = plan_rows(list(uids), tokens.copy(), dp, mini, balance)
            assert all(np.array_equal(a, b) for a, b in zip(plan.rows, again.rows))  # deterministic


@pytest.mark.parametrize("balance", [False, True])
def test_each_global_mini_batch_holds_the_same_groups_for_every_dp_size(balance):
    """Rank d's k-th local mini-batch is its share of global mini-batch k: groups [kM, (k+1)M) when unbalanced,
    the same set of groups (dealt differently) when balanced, whatever the DP size."""
    groups, n, mini = 16, 2, 8
    uids, tokens = make_global(groups, n, seed=3)
    for dp in (1, 2, 4, 8):
        plan = plan_rows(uids, tokens, dp, mini, balance)
        local_rows = mini * n // dp
        for k in range(groups // mini):
            rows = np.concatenate([rows[k * local_rows : (k + 1) * local_rows] for rows in plan.rows])
            assert {uids[r] for r in rows} == {uids[r] for r in range(k * mini * n, (k + 1) * mini * n)}


def test_balancing_bounds_the_spread_by_the_largest_group_and_beats_contiguous_on_skewed_lengths():
    rng = np.random.default_rng(0)
    for trial in range(200):
        dp = int(rng.choice([2, 3, 4, 8]))
        tokens = rng.integers(1, 1000, size=dp * int(rng.integers(1, 9))).tolist()
        parts = partition_groups(tokens, dp, balance=True)
        loads = [sum(tokens[g] for g in part) for part in parts]
        assert max(loads) - min(loads) <= max(tokens), (trial, tokens)
        assert sorted(g for part in parts for g in part) == list(range(len(tokens)))
        assert {len(part) for part in parts} == {len(tokens) // dp}
    skewed = [500, 480, 450, 400, 10, 9, 8, 7]  # long groups first: the contiguous split is lopsided
    contiguous = [sum(skewed[g] for g in part) for part in partition_groups(skewed, 2)]
    balanced = [sum(skewed[g] for g in part) for part in partition_groups(skewed, 2, balance=True)]
    assert max(contiguous) - min(contiguous) == 1796
    assert max(balanced) - min(balanced) < 60 and sum(balanced) == sum(skewed)


def test_balanced_plan_reports_verl_global_seqlen_metrics():
    uids, _ = make_global(4, 2, seed=0)
    tokens = [100, 100, 90, 90, 5, 5, 1, 1]  # groups of 200, 180, 10, 2 tokens
    plan = plan_rows(uids, tokens, dp=2, balance=True)
    assert plan.metrics == {
        "global_seqlen/min": 12.0,
        "global_seqlen/max": 380.0,
        "global_seqlen/minmax_diff": 368.0,
        "global_seqlen/balanced_min": 190.0,
        "global_seqlen/balanced_max": 202.0,
        "global_seqlen/mean": 196.0,
    }
    assert [sorted({uids[r] for r in rows}) for rows in plan.rows] == [["0:0:0", "0:0:3"], ["0:0:1", "0:0:2"]]
    assert plan_rows(uids, tokens, dp=2).metrics == {}


def test_groups_need_not_be_contiguous_and_bad_inputs_are_refused():
    uids = ["a", "b", "a", "b", "c", "c", "d", "d"]
    assert [g.tolist() for g in group_rows(uids)] == [[0, 2], [1, 3], [4, 5], [6, 7]]
    plan = plan_rows(uids, [1] * 8, dp=2)
    assert [r.tolist() for r in plan.rows] == [[0, 2, 1, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="3 groups cannot be split evenly over 2"):
        plan_rows(["a", "a", "b", "b", "c", "c"], [1] * 6, dp=2)
    with pytest.raises(ValueError, match="different sizes"):
        plan_rows(["a", "a", "b"], [1] * 3, dp=1)
    with pytest.raises(ValueError, match="not divisible by TP x PP x CP"):
        WorldLayout.of(4, tp=3)


def shard_offsets(rows: int, shards: int, rng: np.random.Generator | None) -> np.ndarray:
    """First global row of each rollout shard (+ the end): as equal as the row count allows, or uneven ones (as
    dynamic sampling can leave them, empty ones included) when `rng` is given."""
    if rng is None:
        return np.arange(shards + 1) * rows // shards
    return np.concatenate([[0], np.sort(rng.integers(0, rows + 1, size=shards - 1)), [rows]])


@pytest.mark.parametrize("uneven", [False, True])
def test_each_rank_receives_only_the_rows_it_needs_and_its_own_from_itself(uneven):
    """The collective's routing for every layout: what the ranks send to `dst`, in arrival order, is exactly dst's
    planned rows (so nothing else and nothing twice); rows of dst's own rollout shard never travel; a rank sends
    only rows of its own shard, and only to the ranks it serves (the TP peers of a shard share the sending)."""
    rng = np.random.default_rng(7) if uneven else None
    for index, spec in enumerate(layouts()):
        uids, tokens = make_global(spec.dp * 2, 3, seed=index)
        rows = plan_rows(uids, tokens, spec.dp, balance=True).rows
        offsets = shard_offsets(len(uids), spec.rollout_dp, rng)
        sends = [outgoing(spec, offsets, rows, src) for src in range(spec.world_size)]
        for dst in range(spec.world_size):
            needed = rows[spec.dp_rank(dst)]
            arrived = np.concatenate(
                [sends[src][dst] + offsets[spec.rollout_dp_rank(src)] for src in range(spec.world_size)]
            )
            assert np.array_equal(arrived[arrival_index(offsets, needed)], needed), (spec, dst)
            own = spec.rollout_dp_rank(dst)
            elsewhere = int(np.sum((needed < offsets[own]) | (needed >= offsets[own + 1])))
            assert sum(len(sends[src][dst]) for src in range(spec.world_size) if src != dst) == elsewhere
            for src in range(spec.world_size):
                shard = spec.rollout_dp_rank(src)
                assert np.all(sends[src][dst] < offsets[shard + 1] - offsets[shard])
                if sender(spec, shard, dst) != src:
                    assert len(sends[src][dst]) == 0, (spec, src, dst)


def test_multi_process_graphs_need_the_layout_node_between_rollout_and_actor_sides():
    from dagrl.config.errors import ConfigError
    from dagrl.dag.graph import build_graph
    from dagrl.nodes.layout import check_graph

    noop, layout = "tests.dag_test_nodes:noop", "dagrl.nodes.layout:to_actor_layout"
    filter_fn = "dagrl.nodes.dynamic_sampling:filter_groups"

    def graph(*nodes):
        return build_graph([{"id": i, "role": role, "fn": fn, "deps": list(deps)} for i, role, fn, deps in nodes])

    good = graph(
        ("gen", "rollout", noop, []),
        ("filter", "custom", filter_fn, ["gen"]),
        ("move", "reshard", layout, ["filter"]),
        ("adv", "advantage", noop, ["move"]),
        ("update", "actor", noop, ["adv"]),
    )
    check_graph(good, world_size=4)
    without = graph(
        ("gen", "rollout", noop, []), ("adv", "advantage", noop, ["gen"]), ("update", "actor", noop, ["adv"])
    )
    check_graph(without, world_size=1)  # one process: both layouts are the same
    with pytest.raises(ConfigError, match="no node with role reshard \\(dagrl.nodes.layout:to_actor_layout\\)"):
        check_graph(without, world_size=2)
    early = graph(
        ("gen", "rollout", noop, []),
        ("adv", "advantage", noop, ["gen"]),
        ("move", "reshard", layout, ["adv"]),
        ("update", "actor", noop, ["move"]),
    )
    with pytest.raises(ConfigError, match="node 'adv' \\(role advantage\\) runs before the reshard node 'move'"):
        check_graph(early, world_size=2)
    late = graph(
        ("gen", "rollout", noop, []),
        ("move", "reshard", layout, ["gen"]),
        ("filter", "custom", filter_fn, ["move"]),
        ("adv", "advantage", noop, ["filter"]),
        ("update", "actor", noop, ["adv"]),
    )
    with pytest.raises(ConfigError, match="node 'filter' must run before the reshard node 'move'"):
        check_graph(late, world_size=2)
    with pytest.raises(
        ConfigError, match="node 'move' runs dagrl.nodes.layout:to_actor_layout with role custom: give it role reshard"
    ):
        graph(
            ("gen", "rollout", noop, []),
            ("move", "custom", layout, ["gen"]),
            ("adv", "advantage", noop, ["move"]),
            ("update", "actor", noop, ["adv"]),
        )
    with pytest.raises(ConfigError, match="nodes 'move' and 'again' both have role reshard"):
        graph(
            ("gen", "rollout", noop, []),
            ("move", "reshard", layout, ["gen"]),
            ("again", "reshard", noop, ["move"]),
            ("adv", "advantage", noop, ["again"]),
            ("update", "actor", noop, ["adv"]),
        )


def test_preflight_wants_the_layout_node_in_a_multi_process_graph(tiny_model, tiny_data, tmp_path, monkeypatch):
    from dagrl.config.errors import ConfigError
    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from dagrl.config.validate import preflight
    from tests.conftest import cpu_run_overrides

    monkeypatch.setenv("WORLD_SIZE", "2")
    data = compose(cpu_run_overrides(tiny_model, tiny_data, tmp_path, **{"trainer.n_gpus_per_node": 2}))
    assert preflight(Cfg(data)).layout.dp == 2
    tp2 = compose(
        cpu_run_overrides(
            tiny_model,
            tiny_data,
            tmp_path,
            **{
                "trainer.n_gpus_per_node": 2,
                "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2,
                "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
            },
        )
    )
    shape = preflight(Cfg(tp2))  # rollout DP 2, actor DP 1: the reshard node bridges them
    assert (shape.layout.rollout_dp, shape.layout.dp, shape.layout.tp, shape.layout.world_size) == (2, 1, 2, 2)
    del data["dag"]["nodes"]["to_actor_layout"]
    with pytest.raises(
        ConfigError,
        match="2 processes but the graph has no node with role reshard \\(dagrl.nodes.layout:to_actor_layout\\)",
    ):
        preflight(Cfg(data))
    data["dag"]["custom_pipeline_fn"] = "tests.dag_test_nodes:custom_pipeline"  # a pipeline's graph, likewise
    with pytest.raises(
        ConfigError,
        match="2 processes but the graph tests.dag_test_nodes:custom_pipeline returns has no node with role reshard",
    ):
        preflight(Cfg(data))


# ---- the collective under torchrun ------------------------------------------------------------------------
def global_batch(groups: int, n: int, seed: int):
    """A batch with every kind of column the trainer moves: int/float tensors and object columns."""
    import torch

    from dagrl.data.batch import Batch

    rng = np.random.default_rng(seed)
    rows = groups * n
    lengths = rng.integers(2, 12, size=rows)
    mask = torch.tensor([[1] * int(length) + [0] * (12 - int(length)) for length in lengths])
    return Batch(
        {
            "input_ids": torch.as_tensor(rng.integers(0, 100, size=(rows, 12))),
            "attention_mask": mask,
            "token_level_scores": torch.as_tensor(rng.random((rows, 12)), dtype=torch.float32),
        },
        {
            "uid": [f"0:0:{g}" for g in range(groups) for _ in range(n)],
            "reward_model": [{"ground_truth": str(r)} for r in range(rows)],
            "data_source": [f"source{r % 3}" for r in range(rows)],
        },
    )


def same(a, b) -> bool:
    import torch

    return (
        a.keys() == b.keys()
        and len(a) == len(b)
        and all(torch.equal(a[k], b[k]) if k in a.tensors else list(a[k]) == list(b[k]) for k in a.keys())
    )


def worker(out_dir: str) -> None:
    """Run under torchrun with gloo ranks: every layout of this world, unbalanced with equal rollout shards and
    balanced with uneven ones; counts the rows that arrive from other ranks."""
    import pickle

    import torch.distributed as dist

    from dagrl.data.layout import to_actor_layout
    from dagrl.utils.dist import all_to_all_bytes, data_parallel_sum

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    arrived: list[int] = []

    def counting(payloads: list[bytes]) -> list[bytes]:
        received = all_to_all_bytes(payloads)
        arrived.append(sum(len(pickle.loads(payload)) for payload in received if payload))
        return received

    checked = 0
    for index, spec in enumerate(layouts(worlds=(world,))):
        for balance in (False, True):
            full = global_batch(groups=8, n=2, seed=index)
            offsets = shard_offsets(len(full), spec.rollout_dp, np.random.default_rng(index) if balance else None)
            shard = spec.rollout_dp_rank(rank)
            local = full.slice(offsets[shard], offsets[shard + 1])  # the trainer's (or dynamic sampling's) shard
            out, metrics = to_actor_layout(local, spec, groups_per_mini_batch=4, balance=balance, exchange=counting)
            plan = plan_rows(full["uid"], full["attention_mask"].sum(-1).tolist(), spec.dp, 4, balance)
            needed = plan.rows[spec.dp_rank(rank)]
            assert same(out, full.select(needed)), (spec, balance)
            assert metrics == plan.metrics
            # only the needed rows that this rank's own shard lacks came over the wire
            assert arrived[-1] == int(np.sum((needed < offsets[shard]) | (needed >= offsets[shard + 1]))), spec
            everyone: list = [None] * world
            dist.all_gather_object(everyone, list(out["uid"]))
            for other in range(world):
                if spec.dp_rank(other) == spec.dp_rank(rank):
                    assert everyone[other] == list(out["uid"]), (spec, rank, other)
            # the DP-only sum helper counts every token once: model-parallel peers are not counted twice
            model_parallel = spec.tp * spec.pp * spec.cp
            assert data_parallel_sum(float(out["attention_mask"].sum()), model_parallel) == float(
                full["attention_mask"].sum()
            )
            checked += 1
    if rank == 0:
        Path(out_dir, "done.json").write_text(json.dumps({"checked": checked}))
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_collective_moves_rows_as_planned_on_gloo_ranks(tmp_path, world):
    from tests.engine.engine_helpers import free_port

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(world),
            "--master-port",
            str(free_port()),
            __file__,
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert json.loads((tmp_path / "done.json").read_text()) == {"checked": 2 * len(list(layouts(worlds=(world,))))}


if __name__ == "__main__":
    worker(sys.argv[1])
