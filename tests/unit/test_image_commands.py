"""kiln/image's one command runner: a failing or overlong build command is the caller's own error,
naming what it was doing, never a traceback from subprocess."""

from __future__ import annotations

import pytest

from kiln.image.base import BaseBuildError
from kiln.image.build import ImageBuildError
from kiln.image.commands import run_step
from kiln.image.outputs import OutputError


@pytest.mark.parametrize("error", [BaseBuildError, ImageBuildError, OutputError])
def test_a_failing_command_raises_the_callers_error_with_what_it_did_and_its_last_words(error):
    with pytest.raises(error, match=r"could not copy the tree: sh exited 3: disk full$"):
        run_step(["sh", "-c", "echo disk full >&2; exit 3"], "copy the tree", 10, error)


def test_a_command_past_its_bound_is_an_error_not_a_timeout_traceback():
    with pytest.raises(OutputError, match=r"could not fill the disk: sleep timed out after 1 s"):
        run_step(["sleep", "5"], "fill the disk", 1, OutputError)


def test_a_command_that_succeeds_says_nothing():
    assert run_step(["true"], "do nothing", 10, ImageBuildError) is None
