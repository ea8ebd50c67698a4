"""What nodes print reaches the operator's terminal with control and escape characters written out."""

from __future__ import annotations

from click.testing import CliRunner

from kiln.cli.common import echo, visible


def test_escape_sequences_and_carriage_returns_are_written_out():
    hostile = "apt: E: \x1b]0;owned\x07\x1b[2J\x1b[31mfailed\r\nnext\tline\x9b1m\u2028x\x00"
    shown = visible(hostile)
    assert shown == "apt: E: \\x1b]0;owned\\x07\\x1b[2J\\x1b[31mfailed\\r\nnext\tline\\x9b1m\\u2028x\\x00"
    assert "\x1b" not in shown and "\r" not in shown and "\x07" not in shown


def test_echo_prints_the_visible_form():
    import click

    @click.command()
    def say():
        echo("node said: \x1b[31mred\x1b[0m")

    out = CliRunner().invoke(say).output
    assert out == "node said: \\x1b[31mred\\x1b[0m\n"
