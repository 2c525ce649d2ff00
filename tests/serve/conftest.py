"""The serve tests' fixtures: the judge tests use the evaluation tests' chat-completions server."""

from tests.eval.conftest import judge_server  # noqa: F401 - a fixture, found by pytest under its name
