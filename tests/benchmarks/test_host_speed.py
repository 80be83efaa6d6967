"""benchmarks/host_speed.py: the host's speed through time, and the probe's reading of it around each rollout call."""

from __future__ import annotations

import json

from benchmarks import host_speed, rollout_probe


def test_windows_show_a_host_that_slows_down():
    """Planted times: a host that runs the workload at 3 ms, then at 6 ms for one window."""
    samples = [(t * 0.5, 0.003 if not 10 <= t * 0.5 < 20 else 0.006) for t in range(60)]
    table = host_speed.table(samples, 10.0)
    rows = [line.split("|") for line in table.splitlines()[2:]]
    assert [row[1].strip() for row in rows] == ["0-10", "10-20", "20-30"]
    assert [float(row[6]) for row in rows] == [1.0, 2.0, 1.0]  # each window's median against the overall median


def test_a_short_run_prints_its_windows_and_writes_its_samples(tmp_path, capsys):
    out = tmp_path / "host.json"
    result = host_speed.main(["--seconds", "0.3", "--window", "0.1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| window s | runs |" in printed and "the windows' medians spread" in printed
    saved = json.loads(out.read_text())
    assert saved["runs"] == result["runs"] == len(saved["samples"]) > 0
    assert result["median_ms"] > 0 and result["window_median_spread"] >= 0


def test_the_probe_reads_the_hosts_speed_around_each_call(monkeypatch):
    """A host twice as slow after the call as before it reads as the mean of the two."""
    assert host_speed.workload_ms(repeats=2) > 0  # the real reading: the fastest of the workload's times
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    readings = iter([2.0, 4.0])
    monkeypatch.setattr(rollout_probe, "workload_ms", lambda: next(readings))
    probe = rollout_probe.Probe()
    probe.start()
    assert probe.stop([])["host ms"] == 3.0
    probe.close()
