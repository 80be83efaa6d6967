"""The watchdog's thread ends as soon as the run stops it: every run's exit waits for that join."""

import threading
import time

from dagrl.utils import watchdog


def test_stop_wakes_the_watchdog_thread_at_once(tmp_path):
    dog = watchdog.install(timeout_s=600.0, startup_s=600.0, directory=str(tmp_path), rank=0)  # checks every 1 s
    assert dog is not None and dog.thread.is_alive()
    time.sleep(0.05)  # the thread is inside its 1 s wait
    start = time.monotonic()
    watchdog.stop()
    assert time.monotonic() - start < 0.5 and not dog.thread.is_alive()
    assert not any(t.name == "dagrl-watchdog" and t.is_alive() for t in threading.enumerate())
