"""dagrl.plan and dagrl.doctor take their own flags anywhere among a run's overrides, and refuse unknown flags."""

import argparse

import pytest

from dagrl.config.tool_cli import parse_tool_args


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog="tool")
    made.add_argument("--cpu", action="store_true")
    return made


def test_flags_anywhere_among_the_overrides():
    args, overrides = parse_tool_args(parser(), ["a.b=1", "--cpu", "c.d=[x,y]", "+e.f=2"])
    assert args.cpu and overrides == ["a.b=1", "c.d=[x,y]", "+e.f=2"]


def test_an_unknown_flag_is_one_usage_line(capsys):
    with pytest.raises(SystemExit) as done:
        parse_tool_args(parser(), ["a.b=1", "--nope"])
    assert done.value.code == 2 and capsys.readouterr().err.strip().endswith("error: unknown option(s): --nope")
