"""A sys.exit from user code during a run (a node, tool, interaction) never ends the trainer with its exit code:
sys.exit(0) would read as a run that finished. train_process turns it into exit 1 and one line naming where."""

from __future__ import annotations

import sys

import dagrl.config.validate as validate
from dagrl.launch.process import exit_message, train_process


def user_node(ctx, batch):
    sys.exit(0)


def test_a_sys_exit_during_the_run_is_exit_1_with_one_line_naming_the_call(monkeypatch):
    monkeypatch.setattr(validate, "preflight", lambda cfg: user_node(None, None))
    code, message = train_process({"trainer": {}})
    assert code == 1
    assert f"sys.exit(0) was called at {__file__}:" in message and "(in user_node)" in message
    assert "remove that call" in message and "\n" not in message


def test_the_message_says_what_was_passed_to_sys_exit():
    try:
        sys.exit("bye")
    except SystemExit as error:
        assert exit_message(error).startswith("sys.exit('bye') was called at ")


def test_the_call_site_is_the_users_when_a_library_replaced_sys_exit(monkeypatch):
    """wandb replaces sys.exit with a Python hook once a run was initialised (CI's test extra installs it): the
    line still names the user's call, not the hook."""
    original = sys.exit

    def hook(code=None):  # as wandb's exit_hooks.exit does
        original(code)

    monkeypatch.setattr(sys, "exit", hook)
    try:
        user_node(None, None)
    except SystemExit as error:
        message = exit_message(error)
    assert f"at {__file__}:" in message and "(in user_node)" in message, message


def test_the_call_site_is_the_users_under_two_hooks(monkeypatch):
    """A bound-method hook (wandb's ExitHooks.exit) installed first, then a function hook over it."""

    class Hooks:
        def __init__(self):
            self.original = sys.exit

        def exit(self, code=None):
            self.original(code)

    monkeypatch.setattr(sys, "exit", Hooks().exit)
    test_a_sys_exit_during_the_run_is_exit_1_with_one_line_naming_the_call(monkeypatch)
    test_the_call_site_is_the_users_when_a_library_replaced_sys_exit(monkeypatch)
