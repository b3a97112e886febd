"""Every command's help: a whole one-line summary in its group's listing, and an example."""

from __future__ import annotations

import click
from click.testing import CliRunner

from astrid.cli.help_texts import HELP, walk
from astrid.cli.main import _register_commands, cli


def _commands() -> list[tuple[str, click.Command]]:
    _register_commands()
    return walk(cli)


def test_every_command_has_a_summary_and_every_leaf_an_example():
    missing = [path for path, _ in _commands() if path not in HELP]
    assert missing == []
    for path, command in _commands():
        summary, examples = HELP[path]
        assert summary.endswith(".") and len(summary) <= 60, path
        if not isinstance(command, click.Group):
            assert examples and all(line.startswith("astrid ") for line in examples), path


def test_group_listings_cut_no_summary_short():
    runner = CliRunner()
    for path, command in [("", cli), *_commands()]:
        if not isinstance(command, click.Group):
            continue
        result = runner.invoke(cli, [*path.split(), "--help"], terminal_width=80)
        assert result.exit_code == 0, result.output
        listing = result.output.split("Commands:", 1)[1]
        assert "..." not in listing, (path, listing)


def test_a_commands_help_ends_with_its_example():
    result = CliRunner().invoke(cli, ["capsule", "install", "--help"], terminal_width=100)
    assert "Example:\n    astrid capsule install oci://" in result.output


def test_every_example_names_options_the_command_has():
    for path, command in _commands():
        for example in HELP[path][1]:
            for word in example.split():
                if word.startswith("--"):
                    names = {name for param in command.params for name in getattr(param, "opts", [])}
                    assert word.split("=")[0] in names, (path, word)


def test_python_dash_m_runs_every_command(tmp_path):
    """The fallback a client entry uses when there is no `astrid` script."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-P", "-m", "astrid.cli.main", "mcp", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "Serve capsule resources" in done.stdout
