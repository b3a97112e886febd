"""Entry point of the `astrid` command."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from astrid.cli import output
from astrid.host.errors import AstridError
from astrid.host.version import astrid_version

# Each top-level command -> the modules that attach it and its subcommands. They are imported
# when the command is first looked up: `astrid mcp serve` loads no other command's module.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "mcp": ("mcp_cmd", "token_cmd", "bundle_cmd"),
    "capsule": ("capsule_cmd", "artifact_cmd", "install_cmd", "oci_cmd", "grant_cmd"),
    "resources": ("resources_cmd",),
    "key": ("key_cmd",),
    "trust": ("trust_cmd",),
    "grants": ("grant_cmd",),
    "host": ("host_cmd",),
    "status": ("status_cmd",),
}
_loaded: set[str] = set()  # top-level commands whose modules are imported and help texts applied


def _load(name: str) -> None:
    """Import the modules of the top-level command `name` and put in its help texts, once."""
    if name in _loaded:
        return
    for module in COMMAND_MODULES[name]:
        __import__(f"astrid.cli.{module}")  # not importlib.import_module: -X importtime would not list it
    _loaded.add(name)
    from astrid.cli import help_texts

    help_texts.apply(cli, name)


class LazyGroup(click.Group):
    """The root group: a command's module is imported when the command is looked up."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMAND_MODULES:
            _load(cmd_name)
        elif cmd_name not in self.commands:
            _register_commands()  # an unknown name: click's "did you mean" looks at every command
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        _register_commands()
        return super().list_commands(ctx)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(astrid_version(), "--version", prog_name="astrid")
@click.option("-v", "--verbose", count=True, help="More logging on stderr; -v also shows tracebacks.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="The settings of `astrid mcp serve` (default: ./astrid.toml, else astrid.toml in the user config dir).",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int, config_file: Path | None) -> None:
    """astrid: run sandboxed WebAssembly capsules and serve their resources over MCP."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    ctx.obj["config_file"] = config_file  # read by the commands that use it (cli/config_file.py)
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


@cli.group()
def mcp() -> None:
    """Serve capsule resources to MCP clients."""


@cli.group()
def capsule() -> None:
    """Create, build and inspect capsules."""


@cli.group()
def resources() -> None:
    """List, read and complete resources without an MCP client (for debugging capsules)."""


@cli.group()
def key() -> None:
    """Make and list your capsule signing keys."""


@cli.group()
def trust() -> None:
    """Trust publishers' keys; who owns which URI namespace."""


def _register_commands() -> None:
    """Attach every command (the help listing and tests want them all; `main` loads them lazily)."""
    for name in COMMAND_MODULES:
        _load(name)


def main(argv: list[str] | None = None) -> None:
    verbose = "-v" in (argv if argv is not None else sys.argv[1:]) or "--verbose" in (argv or sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="astrid", standalone_mode=True)
    except AstridError as exc:  # one of ours: its message names the cause and the fix
        if verbose:
            raise
        output.error(str(exc))
        sys.exit(1)
    except Exception as exc:  # last resort: never a traceback unless -v
        if verbose:
            raise
        output.error(f"{exc} (run with -v for details)")
        sys.exit(1)


if __name__ == "__main__":
    # `python -m astrid.cli.main` (a client entry without the `astrid` script): the command
    # modules attach to the module `astrid.cli.main`, which is not this `__main__` copy of it.
    from astrid.cli import main as cli_main

    cli_main.main()
