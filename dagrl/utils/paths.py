"""What a saved path means when a run comes back to it."""

from __future__ import annotations

import os
from typing import Any


def another_model(saved: Any, now: Any) -> bool:
    """`now` names another model directory than the `saved` one: the saved directory is still here and is not the
    same directory. A model moved (its saved directory gone), or a checkpoint taken to another machine, is the same
    model at a new path; a value that is not a path (None, a hub name's absence) is no evidence either way."""
    if not isinstance(saved, str) or not isinstance(now, str):
        return False
    saved, now = os.path.expanduser(saved), os.path.expanduser(now)
    return os.path.isdir(saved) and os.path.realpath(saved) != os.path.realpath(now)
