"""trainer.ray_address that no Ray head answers: one line naming the key after a bounded wait, not ray.init's
minutes of retries (dagrl/launch/ray_cluster.py check_ray_address)."""

from __future__ import annotations

import socket
import time

import pytest

from dagrl.config.errors import ConfigError
from dagrl.launch.ray_cluster import check_ray_address


def test_a_listening_address_passes_and_auto_is_left_to_ray():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        check_ray_address(f"127.0.0.1:{port}")
        check_ray_address(f"ray://127.0.0.1:{port}")
    check_ray_address(None)
    check_ray_address("auto")


def test_an_address_that_never_answers_fails_within_the_timeout(monkeypatch):
    def silent(address, timeout):  # a black-holed host: the connect waits until its timeout
        time.sleep(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    start = time.monotonic()
    expected = r"trainer.ray_address=ray://10.255.255.1:10001: .* within 0.5 s \(no answer\)"
    with pytest.raises(ConfigError, match=expected):
        check_ray_address("ray://10.255.255.1:10001", timeout_s=0.5)
    assert time.monotonic() - start < 5
