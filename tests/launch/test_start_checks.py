"""The checks only the training process can make (dagrl/launch/start_checks.py): the rendezvous port is probed only
where this process binds it, and a rank that cannot join says so in one line within the wait."""

from __future__ import annotations

import socket
import time

import pytest

from dagrl.config.errors import ConfigError, RunError
from dagrl.launch.start_checks import check_master_port, joining


@pytest.fixture
def listening():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


def hand_exported(monkeypatch, rank: int, port: int) -> None:
    for name, value in {
        "WORLD_SIZE": "2",
        "RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("DAGRL_LAUNCHER", raising=False)


def test_port_in_use_is_refused_only_where_this_process_binds_it(monkeypatch, listening):
    hand_exported(monkeypatch, 0, listening)
    with pytest.raises(ConfigError, match=f"MASTER_PORT={listening} is in use on this machine"):
        check_master_port()
    monkeypatch.setenv("RANK", "1")  # rank 1 connects to the port: in use is what it needs
    check_master_port()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")  # torchrun's agent holds the port for its workers
    check_master_port()


def test_a_free_port_passes(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hand_exported(monkeypatch, 0, port)
    check_master_port()


def test_rank_zero_never_listening_ends_within_the_wait(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens
    hand_exported(monkeypatch, 1, port)
    start = time.monotonic()
    with pytest.raises(RunError, match=f"rank 1 could not join .* MASTER_ADDR:MASTER_PORT=127.0.0.1:{port} within 1 s"):
        with joining(1.0):
            pytest.fail("the group is joined only once rank 0 listens")
    assert time.monotonic() - start < 5


def test_a_failed_rendezvous_is_one_line(monkeypatch, listening):
    hand_exported(monkeypatch, 1, listening)
    with pytest.raises(RunError, match="WORLD_SIZE=2 .* \\(actor_rollout_ref.nccl_timeout; store timed out\\)"):
        with joining(3.0):
            raise RuntimeError("store timed out\nmore")
    with pytest.raises(KeyError):  # not a rendezvous failure: as it is
        with joining(3.0):
            raise KeyError("x")


def test_the_tracking_server_is_checked_directly_unless_a_proxy_carries_it(monkeypatch):
    from dagrl.config.tree import Cfg
    from dagrl.launch.start_checks import check_tracking_server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens
    cfg = Cfg({"trainer": {"logger": ["console", "mlflow"]}})
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match=f"MLFLOW_TRACKING_URI=http://127.0.0.1:{port} cannot be reached"):
        check_tracking_server(cfg)
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    check_tracking_server(cfg)
    monkeypatch.delenv("http_proxy")
    monkeypatch.setenv("RANK", "1")  # only rank 0 logs to mlflow
    check_tracking_server(cfg)
