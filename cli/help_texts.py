"""One example and a one-line summary per command, in one place, put into the commands' help.

The group listings (`astrid capsule --help`) show each command's summary;
click would otherwise cut a docstring's first sentence mid-way. Every
command's own help ends with an example. `tests/cli/test_help_texts.py`
holds every command to both.
"""

from __future__ import annotations

import click

# command path -> (summary for the group listing, example lines)
HELP: dict[str, tuple[str, tuple[str, ...]]] = {
    "mcp": ("Serve capsule resources to MCP clients.", ()),
    "capsule": ("Create, build, install and inspect capsules.", ()),
    "resources": ("List, read and complete resources without a client.", ()),
    "host": ("Capsule hosts on other machines (NATS).", ()),
    "key": ("Your capsule signing keys.", ()),
    "trust": ("Trusted publishers and their namespaces.", ()),
    "grants": ("What the operator granted capsules.", ()),
    "mcp serve": (
        "Serve capsule resources to MCP clients (stdio, or HTTP).",
        (
            "astrid mcp serve --capsules ./notes",
            "astrid mcp serve --http 127.0.0.1:8000 --capsules ./notes",
            "astrid mcp serve --http 8000 --metrics 9464 --log-format json",
        ),
    ),
    "mcp config": (
        "Print a client's config entry for this server.",
        ("astrid mcp config --capsules ./notes", "astrid mcp config --http https://astrid.example.com/mcp"),
    ),
    "mcp install": ("Add this server to a client, or as a service.", ()),
    "mcp install claude-desktop": (
        "Add this server to Claude Desktop's config file.",
        ("astrid mcp install claude-desktop --capsules ./notes",),
    ),
    "mcp install claude-code": (
        "Add this server to Claude Code's config file.",
        ("astrid mcp install claude-code --capsules ./notes",),
    ),
    "mcp install cursor": (
        "Add this server to Cursor's config file.",
        ("astrid mcp install cursor --capsules ./notes",),
    ),
    "mcp install vscode": (
        "Add this server to VS Code's config file.",
        ("astrid mcp install vscode --capsules ./notes --name astrid-notes",),
    ),
    "mcp install systemd": (
        "Write a systemd unit for the HTTP server.",
        ("astrid mcp install systemd -o /etc/systemd/system/astrid.service",),
    ),
    "mcp bundle": (
        "Make a one-click Claude Desktop bundle (.mcpb) of capsules.",
        ("astrid mcp bundle capsules/files", "astrid mcp bundle ./notes weather-1.2.0.capsule --name my-notes"),
    ),
    "mcp serve-bundle": (
        "Serve an unpacked bundle (what its manifest runs).",
        ("astrid mcp serve-bundle ./astrid-files --set files_files_folder=$HOME/notes",),
    ),
    "mcp token": ("Bearer tokens for `mcp serve --http`.", ("astrid mcp token add alice",)),
    "mcp token add": ("Make a token for a user; print it once.", ("astrid mcp token add alice",)),
    "mcp token list": ("List the users that have a token.", ("astrid mcp token list",)),
    "mcp token revoke": ("Revoke a user's token.", ("astrid mcp token revoke alice",)),
    "capsule new": (
        "Scaffold a new capsule folder.",
        ("astrid capsule new notes", "astrid capsule new notes --dir ~/caps"),
    ),
    "capsule build": ("Build a capsule folder into a component.", ("astrid capsule build notes",)),
    "capsule test": (
        "Run a capsule's tests with pytest, served in the sandbox.",
        ("astrid capsule test notes", "astrid capsule test notes -k hello -x"),
    ),
    "capsule dev": (
        "Serve a capsule from its sources, live on every save.",
        ("astrid capsule dev notes", "astrid capsule dev notes --http 8000"),
    ),
    "capsule list": ("List capsules and whether they load.", ("astrid capsule list -v notes", "astrid capsule list")),
    "capsule grant": (
        "Let a capsule use a capability.",
        ("astrid capsule grant files fs:files=~/notes", "astrid capsule grant weather http:api.example.com"),
    ),
    "capsule revoke": ("Take a capability back.", ("astrid capsule revoke files fs:files",)),
    "capsule pack": ("Pack a built capsule into one artifact file.", ("astrid capsule pack notes",)),
    "capsule sign": ("Sign an artifact with your key.", ("astrid capsule sign notes-1.0.0.capsule --key acme",)),
    "capsule verify": ("Check an artifact as install would.", ("astrid capsule verify notes-1.0.0.capsule",)),
    "capsule push": (
        "Push an artifact to an OCI registry.",
        ("astrid capsule push notes-1.0.0.capsule oci://registry.example.com/acme/notes:1.0",),
    ),
    "capsule install": (
        "Install a signed capsule (file or registry).",
        ("astrid capsule install oci://registry.example.com/acme/notes:1.0", "astrid capsule install --locked --yes"),
    ),
    "capsule remove": ("Remove an installed capsule.", ("astrid capsule remove notes",)),
    "resources list": ("List the resources a user sees.", ("astrid resources list --capsules ./notes",)),
    "resources read": ("Read one resource.", ("astrid resources read astrid://notes/hello --capsules ./notes",)),
    "resources templates": ("List the templates a user sees.", ("astrid resources templates --capsules ./files",)),
    "resources complete": (
        "Complete a template's variable, as a client would.",
        ("astrid resources complete 'astrid://files/{+path}' path notes/ --capsules ./files",),
    ),
    "host run": (
        "Run capsules for a server elsewhere, over NATS.",
        ("astrid host run --bus nats://nats.example.com:4222 --capsules ./notes",),
    ),
    "host nats-permissions": (
        "Print nats-server permissions for a capsule host.",
        ("astrid host nats-permissions --capsules ./notes --user host-a",),
    ),
    "key new": ("Make a signing key pair.", ("astrid key new acme",)),
    "key list": ("List your signing keys.", ("astrid key list",)),
    "key show": ("Print a key's public key.", ("astrid key show acme",)),
    "trust add": ("Trust a publisher's key.", ("astrid trust add ed25519:9i_o2ncC... --publisher acme",)),
    "trust list": ("List trusted publishers and their namespaces.", ("astrid trust list",)),
    "trust remove": ("Stop trusting a publisher (or one key).", ("astrid trust remove acme",)),
    "grants list": ("List every capsule's grants.", ("astrid grants list", "astrid grants list --json")),
    "status": (
        "A running server's live summary, from its metrics.",
        ("astrid status", "astrid status --metrics http://127.0.0.1:9464/metrics"),
    ),
}


def apply(root: click.Group, only: str | None = None) -> None:
    """Put the summaries and examples into the commands under `root` (under its command `only`, if given)."""
    for path, command in walk(root):
        if only is not None and path != only and not path.startswith(only + " "):
            continue
        entry = HELP.get(path)
        if entry is None:
            continue
        summary, examples = entry
        command.short_help = summary
        if not examples:
            continue
        block = "\b\nExample:\n" + "\n".join(f"  {line}" for line in examples)
        command.epilog = f"{command.epilog}\n\n{block}" if command.epilog else block


def walk(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    """(path, command) of every command and subgroup below `group`, e.g. ("mcp token add", ...)."""
    found: list[tuple[str, click.Command]] = []
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}".strip()
        found.append((path, command))
        if isinstance(command, click.Group):
            found.extend(walk(command, path))
    return found
