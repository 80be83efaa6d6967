"""benchmarks/rollout.py without a GPU: the interleaved order, paired ratios and the verdict that certifies one or
calls it noise, the per-run and summary tables, which probe moves with the time, the probe's fields on a CPU, the
FP8 engine settings and the --compare arms' command lines."""

import gc
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks import rollout, rollout_probe  # noqa: E402 - after the sys.path insert above
from benchmarks.rollout_stats import (  # noqa: E402
    Run,
    compare_table,
    host_paired_ratios,
    movers,
    order,
    paired_ratios,
    path_summary,
    repeat_table,
    spearman,
    summary_table,
    verdict,
)


def runs_of(node: list[float], bare: list[float], tokens: int = 1000) -> list[Run]:
    """The runs in the order the benchmark makes them, each path's seconds given pair by pair."""
    return [
        Run(path, pair, (node if path == "node" else bare)[pair], tokens)
        for pair, path in order(len(node), "node", "bare")
    ]


def test_order_alternates_the_first_path_of_each_pair():
    assert order(3, "node", "bare") == [(0, "node"), (0, "bare"), (1, "bare"), (1, "node"), (2, "node"), (2, "bare")]


def test_paired_ratios_compare_runs_of_the_same_pair_by_tokens_per_second():
    runs = runs_of([10.0, 20.0], [8.0, 25.0])
    assert paired_ratios(runs, "node", "bare") == pytest.approx([0.8, 1.25])
    runs[0].tokens = 2000  # twice the tokens in the same seconds: twice the rate
    assert paired_ratios(runs, "node", "bare")[0] == pytest.approx(1.6)


def test_host_paired_ratios_count_each_calls_seconds_in_its_hosts_speed():
    """A host that ran pair 1's node call at half speed: the raw ratio says 0.5, counted in host speed 1.0."""
    runs = runs_of([10.0, 20.0], [10.0, 10.0])
    for run in runs:
        run.probe["host ms"] = 6.0 if (run.pair, run.path) == (1, "node") else 3.0
    assert paired_ratios(runs, "node", "bare") == pytest.approx([1.0, 0.5])
    assert host_paired_ratios(runs, "node", "bare") == pytest.approx([1.0, 1.0])
    runs[0].probe["host ms"] = None  # a run without the reading: no such ratio at all
    assert host_paired_ratios(runs, "node", "bare") is None


def test_a_ratio_is_certified_only_when_its_spread_is_smaller_than_its_distance_from_one():
    tight = verdict([0.92, 0.93, 0.925, 0.94, 0.91])  # spread 0.03 < 0.075
    assert tight.certified and tight.median == pytest.approx(0.925)
    assert "CERTIFIED slower (0.030 < 0.075)" in tight.line("node", "bare")
    noisy = verdict([0.80, 1.05, 0.93, 0.97, 0.90])  # spread 0.25 >= |0.93 - 1|
    assert not noisy.certified
    assert "within noise (0.250 >= 0.070)" in noisy.line("node", "bare")
    faster = verdict([1.2, 1.25, 1.22])
    assert faster.certified and "CERTIFIED faster" in faster.line("node", "bare")
    few = verdict([0.5, 0.5])  # no spread at all, but two pairs certify nothing
    assert not few.certified and "NOT CERTIFIED, 2 pair(s)" in few.line("node", "bare")
    with pytest.raises(ValueError, match="no paired repeats"):
        verdict([])


def test_the_verdict_prints_a_comparison_with_the_digits_that_tell_its_sides_apart():
    close = verdict([0.981, 0.918, 0.9104, 0.970, 0.929])  # spread 0.0706, distance 0.071: alike at 3 decimals
    assert close.certified
    assert "CERTIFIED slower (0.0706 < 0.0710)" in close.line("node", "bare")


def test_tables_list_every_run_its_tokens_and_probe_fields():
    runs = runs_of([10.0, 12.0, 11.0], [9.0, 13.0, 10.0])
    runs[0].tokens = 1100
    runs[1].probe = {"SM MHz (mean)": 1980.0, "temp C (max)": 61.5}
    table = repeat_table(runs, ["SM MHz (mean)", "temp C (max)"]).splitlines()
    assert table[0] == "| pair | path | s | generated tokens | tokens/s | SM MHz (mean) | temp C (max) |"
    assert table[2] == "| 0 | node | 10.00 | 1100 | 110 | - | - |"
    assert table[3] == "| 0 | bare | 9.00 | 1000 | 111 | 1980 | 61.5 |"
    assert len(table) == 2 + 6
    summary = summary_table(runs).splitlines()
    assert summary[2] == "| node | 11.00 | 10.00 | 12.00 | 91 | 1100, 1000, 1000 |"  # tokens differ: each listed
    assert summary[3] == "| bare | 10.00 | 9.00 | 13.00 | 100 | 1000 |"  # every repeat alike: one figure


def test_movers_rank_the_field_that_moves_with_the_time_first():
    node, bare = [10.0, 14.0, 11.0, 16.0, 12.0], [9.0, 13.0, 10.5, 15.0, 11.0]
    runs = runs_of(node, bare)
    medians = {"node": 12.0, "bare": 11.0}
    for r in runs:  # the clock falls as the time (against its path's median) rises; the load average wanders
        r.probe = {"SM MHz (mean)": 2000 - 100 * r.seconds / medians[r.path], "load 1 min": [1.0, 3.0, 2.0][r.pair % 3]}
    table = movers(runs, ["SM MHz (mean)", "load 1 min", "TTFT s (median)"]).splitlines()
    assert table[3].startswith("| SM MHz (mean) | -1.00 |")
    assert "| generated tokens | - | constant 1000 |" in table
    assert "| TTFT s (median) | - | not probed |" in table
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None and spearman([1, 2], [1, 2]) is None


def test_compare_table_gives_each_arm_against_the_first():
    def arm(engine, seconds, tokens):
        runs = [Run("node", i, s, tokens) for i, s in enumerate(seconds)]
        return {"engine": engine, "paths": {"node": path_summary(runs, "node")}}

    results = {"bf16": arm("bfloat16, quantization none", [10.0, 11.0, 12.0], 1024), "fp8": arm("fp8", [8.0], 1024)}
    table = compare_table(results, "node").splitlines()
    assert table[2] == "| bf16 | bfloat16, quantization none | 93 | 11.00 | 1024 | 1.000 |"
    assert table[3] == "| fp8 | fp8 | 128 | 8.00 | 1024 | 1.375 |"


def test_fp8_settings_go_to_the_spec_where_it_has_the_keys_else_to_vllm():
    assert rollout.rollout_settings({"model_path"}, "none", "auto") == ({}, {})
    assert rollout.rollout_settings({"model_path"}, "fp8", "fp8") == (
        {},
        {"quantization": "fp8", "kv_cache_dtype": "fp8"},
    )
    assert rollout.rollout_settings({"quantization", "kv_cache_dtype"}, "fp8", "auto") == ({"quantization": "fp8"}, {})
    spec = {"quantization", "kv_cache_dtype", "fp8_scales"}
    assert rollout.rollout_settings(spec, "fp8", "auto", "tensor") == (
        {"quantization": "fp8", "fp8_scales": "tensor"},
        {},
    )
    assert rollout.rollout_settings(spec, "none", "auto", "tensor") == ({}, {})


def test_each_compare_arm_runs_the_given_options_with_its_own_engine_settings():
    argv = ["--size", "8b", "--compare", "bf16,fp8", "--quantization=fp8", "--json", "x.json", "--force-lengths"]
    assert rollout.child_argv(argv, "bf16", "/t/bf16.json") == [
        "--size",
        "8b",
        "--force-lengths",
        "--quantization",
        "none",
        "--kv-cache-dtype",
        "auto",
        "--fp8-scales",
        "block",
        "--json",
        "/t/bf16.json",
    ]
    assert rollout.child_argv(argv, "fp8_kv", "j")[-8:] == [
        "--quantization",
        "fp8",
        "--kv-cache-dtype",
        "fp8",
        "--fp8-scales",
        "block",
        "--json",
        "j",
    ]
    assert rollout.child_argv([*argv, "--fp8-scales", "block"], "fp8_tensor", "j")[-4:] == [
        "--fp8-scales",
        "tensor",
        "--json",
        "j",
    ]
    args = rollout.parse(argv)
    assert args.compare == "bf16,fp8" and args.repeats == 5 and args.paths == "node,bare"


def test_bad_options_are_refused_by_name(capsys):
    for argv, word in ((["--paths", "node,vllm"], "--paths"), (["--compare", "bf16,int4"], "--compare")):
        with pytest.raises(SystemExit) as exit:
            rollout.parse(argv)
        assert exit.value.code == 2 and word in capsys.readouterr().err


def test_the_probe_on_a_cpu_leaves_gpu_fields_empty_and_says_why(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    probe = rollout_probe.Probe()
    assert probe.notes == ["no CUDA here: GPU clock, temperature, power and allocator fields not probed"]
    probe.start()
    fields = probe.stop([])
    assert set(fields) == set(rollout_probe.FIELDS)
    for name in ("SM MHz (mean)", "temp C (max)", "power W (mean)", "reserved GiB", "TTFT s (median)"):
        assert fields[name] is None
    assert fields["load 1 min"] >= 0 and fields["gc runs"] >= 0
    probe.start()
    garbage = [[] for _ in range(1000)]
    for a, b in zip(garbage, garbage[1:]):  # cycles only a collection frees
        a.append(b), b.append(a)
    del garbage, a, b
    gc.collect()
    fields = probe.stop([])
    probe.close()
    assert fields["gc full runs"] >= 1 and fields["gc runs"] >= fields["gc full runs"] and fields["gc s"] > 0
    assert probe._gc_timer._callback not in gc.callbacks


def test_probe_reads_nvidia_smi_samples_and_vllm_outputs():
    text = "1980, 55, 310.5\n1755, 61, [N/A]\n\n1830, 58, 290.5\n"
    assert rollout_probe.parse_smi(text) == {
        "SM MHz (mean)": pytest.approx(1855.0),
        "SM MHz (min)": 1755.0,
        "temp C (max)": 61.0,
        "power W (mean)": pytest.approx(300.5),
    }
    assert rollout_probe.parse_smi("")["SM MHz (mean)"] is None

    class Metrics:
        def __init__(self, first, arrival):
            self.first_token_ts, self.arrival_time = first, arrival

    class Output:
        def __init__(self, cached, metrics):
            self.num_cached_tokens, self.metrics = cached, metrics

    outputs = [Output(16, Metrics(10.5, 10.0)), Output(0, Metrics(11.0, 10.0)), Output(32, None)]
    assert rollout_probe.output_fields(outputs) == {"cached prompt tokens": 48.0, "TTFT s (median)": 0.75}
    assert rollout_probe.output_fields([]) == {"cached prompt tokens": None, "TTFT s (median)": None}
    probe = rollout_probe.Probe()
    probe.start()
    assert probe.stop([Output(16, None)])["TTFT s (median)"] is None
    assert any("carry no TTFT s (median)" in note for note in probe.notes)


def test_probe_samples_nvidia_smi_through_the_call_and_stops_it(tmp_path, monkeypatch):
    """A stand-in nvidia-smi that prints a sample every 20 ms until interrupted, as `-lms` does; the
    allocator's figure read from torch."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        '#!/usr/bin/env bash\necho "$@" > ' + str(tmp_path / "args") + "\ntrap 'exit 0' INT\n"
        "while true; do echo '1500, 70, 250.0'; echo '1700, 72, 350.0'; sleep 0.02; done\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.current_device", lambda: 0)
    monkeypatch.setattr("torch.cuda.memory_reserved", lambda: 3 * 2**30)
    probe = rollout_probe.Probe(interval_ms=20)
    assert probe.notes == []
    probe.start()
    time.sleep(0.3)
    fields = probe.stop([])
    assert fields["SM MHz (mean)"] == pytest.approx(1600.0) and fields["SM MHz (min)"] == 1500.0
    assert fields["temp C (max)"] == 72.0 and fields["power W (mean)"] == pytest.approx(300.0)
    assert fields["reserved GiB"] == 3.0
    assert "-i 3 -lms 20" in (tmp_path / "args").read_text()  # the GPU this process sees, by its visible id
    assert probe._sampler is None


def test_function_diff_names_where_two_paths_part():
    """One path calls a slow function more often: it heads the table, with its calls and the sign of the gap."""
    from benchmarks.rollout_profile import function_diff, profile

    def slow():
        time.sleep(0.02)

    def shared():
        sum(range(1000))

    def node():
        for _ in range(3):
            slow()
        shared()

    def bare():
        slow()
        shared()

    table = function_diff(profile(node), profile(bare), ("node", "bare"), top=3)
    header, first = table.splitlines()[0], table.splitlines()[3]
    assert header.startswith("profiled call: node 0.0") and "bare 0.0" in header
    cells = [cell.strip() for cell in first.strip("|").split("|")]
    assert "time.sleep" in cells[0] and float(cells[3]) > 0.03 and cells[4:] == ["3", "1"]
    assert len(table.splitlines()) == 6
