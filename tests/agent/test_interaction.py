"""Interactions: the YAML loader (verl's format, one-line ConfigErrors naming file and entry), TryAgainInteraction."""

from __future__ import annotations

import asyncio
import os

import pytest

from dagrl.agent.interaction import BaseInteraction, TryAgainInteraction, default_name, load_interactions
from dagrl.agent.registry import maybe_await
from dagrl.config.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"
HERE = __name__  # classes below are imported by the loader from this module
TRY_AGAIN = "dagrl.agent.interaction.TryAgainInteraction"


class SyncInteraction:
    """Duck-typed: no BaseInteraction, plain (non-async) methods."""

    def __init__(self, config: dict) -> None:
        self.config, self.name = config, config["name"]
        self.started: list[str] = []

    def start_interaction(self, instance_id=None, **kwargs):
        self.started.append(instance_id)
        return instance_id

    def generate_response(self, instance_id, messages, **kwargs):
        return True, f"echo {messages[-1]['content']}", 0.5, {"turn": 1}

    def finalize_interaction(self, instance_id, **kwargs):
        self.started.remove(instance_id)


class NoResponse:
    def __init__(self, config: dict) -> None:
        pass

    def start_interaction(self, instance_id=None, **kwargs):
        return instance_id

    def finalize_interaction(self, instance_id, **kwargs):
        pass


class Exploding(BaseInteraction):
    def __init__(self, config: dict) -> None:
        raise RuntimeError(f"no endpoint configured for {config['name']}\nsecond line of detail")


def write(tmp_path, text: str) -> str:
    path = tmp_path / "interactions.yaml"
    path.write_text(text)
    return str(path)


def run(coroutine):
    return asyncio.run(coroutine)


def test_the_shipped_config_loads_try_again():
    interactions = load_interactions(os.path.join(ROOT, "examples", "agentic", "interaction_config.yaml"))
    assert list(interactions) == ["try_again"]
    interaction = interactions["try_again"]
    assert isinstance(interaction, TryAgainInteraction) and interaction.name == "try_again"
    assert interaction.feedback == "Wrong, try again."


def test_name_defaults_to_verls_class_derived_name_and_config_reaches_the_class(tmp_path):
    path = write(
        tmp_path,
        f"interaction:\n  - class_name: {TRY_AGAIN}\n    config: {{feedback: Nope.}}\n"
        f"  - name: echo\n    class_name: {HERE}.SyncInteraction\n",
    )
    interactions = load_interactions(path)
    assert sorted(interactions) == ["echo", "tryagain"]
    assert interactions["tryagain"].name == "tryagain" and interactions["tryagain"].feedback == "Nope."
    assert interactions["echo"].config == {"name": "echo"}  # no config: {} plus the injected name
    assert default_name("pkg.mod.Gsm8kInteraction") == "gsm8k" and default_name("pkg.mod:Helper") == "helper"


def test_a_duck_typed_interaction_with_sync_methods_loads_and_runs_through_maybe_await(tmp_path):
    path = write(tmp_path, f"interaction:\n  - name: echo\n    class_name: {HERE}:SyncInteraction\n")
    echo = load_interactions(path)["echo"]
    assert isinstance(echo, SyncInteraction) and not isinstance(echo, BaseInteraction)

    async def turn():
        await maybe_await(echo.start_interaction("id-1", name="echo"))
        reply = await maybe_await(echo.generate_response("id-1", [{"role": "assistant", "content": "hi"}]))
        await maybe_await(echo.finalize_interaction("id-1"))
        return reply

    assert run(turn()) == (True, "echo hi", 0.5, {"turn": 1})
    assert echo.started == []


def assert_one_line_error(path: str, entry: str, *fragments: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_interactions(path)
    message = str(caught.value)
    assert "\n" not in message and caught.value.key == KEY
    assert message.startswith(f"{KEY}: {path}, {entry}")
    for fragment in fragments:
        assert fragment in message, message


def test_duplicate_names_name_both_entries(tmp_path):
    path = write(
        tmp_path,
        f"interaction:\n  - name: retry\n    class_name: {TRY_AGAIN}\n"
        f"  - name: retry\n    class_name: {HERE}.SyncInteraction\n",
    )
    assert_one_line_error(path, "interaction[1] ('retry')", "duplicate interaction name 'retry'", "interaction[0]")


def test_a_default_name_colliding_with_an_explicit_one_is_a_duplicate(tmp_path):
    path = write(
        tmp_path,
        f"interaction:\n  - name: tryagain\n    class_name: {HERE}.SyncInteraction\n  - class_name: {TRY_AGAIN}\n",
    )
    assert_one_line_error(path, "interaction[1] ('tryagain')", "duplicate")


def test_a_class_without_generate_response_is_refused(tmp_path):
    path = write(
        tmp_path,
        f"interaction:\n  - name: ok\n    class_name: {TRY_AGAIN}\n"
        f"  - name: broken\n    class_name: {HERE}.NoResponse\n",
    )
    assert_one_line_error(path, "interaction[1] ('broken')", "has no generate_response method")


def test_a_constructor_error_names_the_entry_in_one_line(tmp_path):
    path = write(tmp_path, f"interaction:\n  - name: boom\n    class_name: {HERE}.Exploding\n")
    assert_one_line_error(path, "interaction[0] ('boom')", "RuntimeError: no endpoint configured for boom")


@pytest.mark.parametrize(
    "entry, fragment",
    [
        (f"name: x\n    class_name: {TRY_AGAIN}\n    config: [1, 2]", "config must be a mapping, got list"),
        (f"name: 7\n    class_name: {TRY_AGAIN}", "name must be a non-empty string, got 7"),
        ("name: x\n    class_name: no_such_module_xyz.Thing", "cannot import 'no_such_module_xyz'"),
        (f"name: x\n    class_name: {HERE}.Missing", f"module '{HERE}' has no class 'Missing'"),
    ],
)
def test_bad_entries_are_one_line_errors(tmp_path, entry, fragment):
    path = write(tmp_path, f"interaction:\n  - {entry}\n")
    assert_one_line_error(path, "interaction[0]", fragment)


def test_a_missing_file_or_an_empty_list_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_interactions(str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigError, match="non-empty 'interaction' list"):
        load_interactions(write(tmp_path, "tools:\n  - class_name: a.B\n"))


def test_try_again_turns_until_the_last_number_is_right():
    interaction = TryAgainInteraction({"name": "try_again", "feedback": "No, again."})

    async def episode():
        # the loop passes the row's whole interaction_kwargs, name and query included
        instance = await interaction.start_interaction(
            "traj-1", name="try_again", query="What is 7 + 12?", ground_truth="19"
        )
        chat = [{"role": "user", "content": "What is 7 + 12?"}, {"role": "assistant", "content": "It is 18."}]
        first = await interaction.generate_response(instance, chat)
        first_score = await interaction.calculate_score(instance)
        chat += [{"role": "user", "content": first[1]}, {"role": "assistant", "content": "7 + 12 = 19"}]
        second = await interaction.generate_response(instance, chat)
        return instance, first, first_score, second, await interaction.calculate_score(instance)

    instance, first, first_score, second, second_score = run(episode())
    assert instance == "traj-1"
    assert first == (False, "No, again.", 0.0, {}) and first_score == 0.0
    assert second == (True, "Correct.", 1.0, {}) and second_score == 1.0


def test_try_again_reads_only_the_last_assistant_message_and_accepts_separators():
    interaction = TryAgainInteraction({"name": "t"})

    async def replies():
        a = await interaction.start_interaction(None, ground_truth="1019")
        b = await interaction.start_interaction(None, ground_truth="5")
        earlier_right = [
            {"role": "assistant", "content": "1019"},
            {"role": "user", "content": "sure?"},
            {"role": "assistant", "content": "no, 1018"},
        ]
        wrong = await interaction.generate_response(a, earlier_right)
        right = await interaction.generate_response(a, [{"role": "assistant", "content": "1,019."}])
        no_number = await interaction.generate_response(b, [{"role": "assistant", "content": "five"}])
        return a, b, wrong, right, no_number

    a, b, wrong, right, no_number = run(replies())
    assert a != b  # fresh ids when the loop passes none
    assert wrong == (False, "Wrong, try again.", 0.0, {})
    assert right[0] is True and right[2] == 1.0
    assert no_number[0] is False and no_number[2] == 0.0


def test_finalize_drops_the_session_and_other_sessions_stay():
    interaction = TryAgainInteraction({"name": "t"})

    async def lifecycle():
        await interaction.start_interaction("a", ground_truth="3")
        await interaction.start_interaction("b", ground_truth="4")
        await interaction.generate_response("b", [{"role": "assistant", "content": "4"}])
        await interaction.finalize_interaction("a")
        kept = await interaction.calculate_score("b")
        await interaction.finalize_interaction("b")
        return kept

    assert run(lifecycle()) == 1.0
    assert interaction._sessions == {}
    with pytest.raises(KeyError, match="no session 'a'"):
        run(interaction.generate_response("a", [{"role": "assistant", "content": "3"}]))


def test_try_again_needs_a_ground_truth():
    with pytest.raises(ValueError, match="interaction_kwargs.ground_truth"):
        run(TryAgainInteraction({"name": "t"}).start_interaction("x", name="t"))


def test_base_interaction_defaults_follow_verl():
    base = BaseInteraction({})
    assert base.name == "interaction_agent"
    assert run(base.start_interaction("given")) == "given" and run(base.start_interaction()) != ""
    should_stop, text, score, metadata = run(base.generate_response("given", []))
    assert should_stop is False and isinstance(text, str) and metadata == {}
