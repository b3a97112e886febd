"""`astrid mcp install CLIENT` and `astrid mcp config`'s entries, run as a user runs them (the real `astrid`),
on temporary client config files of each client's shape."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from astrid.cli.client_install import CLIENTS, client_config_file
from astrid.host.settings import CAPSULE_HOME_ENV, CONFIG_DIR_ENV
from tests.support.processes import astrid_exe

# Each client's file as a user has it: another server, other keys.
THEIRS: dict[str, dict[str, Any]] = {
    "claude-desktop": {"mcpServers": {"other": {"command": "/usr/bin/other", "args": []}}, "globalShortcut": "Alt+C"},
    "claude-code": {
        "numStartups": 12,
        "projects": {"/src/app": {"mcpServers": {"p": {"type": "stdio", "command": "p"}}}},
        "mcpServers": {"other": {"type": "http", "url": "https://other.example.com/mcp"}},
    },
    "cursor": {"mcpServers": {"other": {"url": "https://other.example.com/mcp"}}},
    "vscode": {
        "inputs": [{"type": "promptString", "id": "key", "password": True}],
        "servers": {"other": {"type": "stdio", "command": "other", "env": {"KEY": "${input:key}"}}},
    },
}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    (folder / "notes").mkdir(parents=True)
    (folder / "mail").mkdir()
    return folder


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "capsule-home"
    home.mkdir()
    return {**os.environ, CONFIG_DIR_ENV: str(tmp_path / "config"), CAPSULE_HOME_ENV: str(home)}


def astrid(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([astrid_exe(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def backups(file: Path) -> list[Path]:
    return sorted(file.parent.glob(file.name + ".bak-*"))


# -- merging into each client's file -------------------------------------------------------------


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_merges_the_entry_and_leaves_everything_else(client: str, workdir: Path, env) -> None:
    file = workdir / f"{client}.json"
    file.write_text(json.dumps(THEIRS[client], indent=4))
    before = file.read_bytes()
    result = astrid("mcp", "install", client, "--config-file", str(file), "--capsules", "notes", cwd=workdir, env=env)
    assert result.returncode == 0, result.stderr
    config = json.loads(file.read_text())
    key = CLIENTS[client].servers_key
    entry = config[key]["astrid-notes"]
    for name, value in THEIRS[client].items():  # every other key and server as it was
        if name == key:
            assert {k: v for k, v in config[key].items() if k != "astrid-notes"} == value
        else:
            assert config[name] == value
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-4:] == ["mcp", "serve", "--capsules", str((workdir / "notes").resolve())]
    assert entry["env"][CONFIG_DIR_ENV] == env[CONFIG_DIR_ENV]
    assert ("type" in entry) is (client in ("claude-code", "vscode"))
    assert entry.get("type", "stdio") == "stdio"
    [backup] = backups(file)
    assert backup.read_bytes() == before
    assert f"the previous file is kept as {backup}" in result.stderr
    assert f"added the server 'astrid-notes' in {CLIENTS[client].title}'s {file}" in result.stderr


def test_installing_twice_changes_nothing_the_second_time_and_says_so(workdir: Path, env) -> None:
    file = workdir / "claude_desktop_config.json"
    args = ("mcp", "install", "claude-desktop", "--config-file", str(file), "--capsules", "notes", "--principal", "al")
    first = astrid(*args, cwd=workdir, env=env)
    assert first.returncode == 0, first.stderr
    assert "(a new file)" in first.stderr and backups(file) == []  # nothing to keep
    written, stat = file.read_bytes(), file.stat()
    second = astrid(*args, cwd=workdir, env=env)
    assert second.returncode == 0, second.stderr
    assert "already has this entry as 'astrid-notes': nothing changed" in second.stderr
    assert file.read_bytes() == written and file.stat().st_mtime_ns == stat.st_mtime_ns
    assert backups(file) == []


def test_two_capsule_folders_get_two_entries_by_default(workdir: Path, env) -> None:
    file = workdir / "claude_desktop_config.json"
    for folder in ("notes", "mail"):
        done = astrid(
            "mcp", "install", "claude-desktop", "--config-file", str(file), "--capsules", folder, cwd=workdir, env=env
        )
        assert done.returncode == 0, done.stderr
    servers = json.loads(file.read_text())["mcpServers"]
    assert sorted(servers) == ["astrid-mail", "astrid-notes"]
    assert len(backups(file)) == 1  # the second install kept the first's file


def test_a_second_name_adds_a_second_entry(workdir: Path, env) -> None:
    file = workdir / "mcp.json"
    base = ("mcp", "install", "cursor", "--config-file", str(file), "--capsules", "notes")
    assert astrid(*base, cwd=workdir, env=env).returncode == 0
    done = astrid(*base, "--name", "notes-for-bob", "--principal", "bob", cwd=workdir, env=env)
    assert done.returncode == 0, done.stderr
    servers = json.loads(file.read_text())["mcpServers"]
    assert sorted(servers) == ["astrid-notes", "notes-for-bob"]
    assert "--principal" not in servers["astrid-notes"]["args"]
    assert servers["notes-for-bob"]["args"][-2:] == ["--principal", "bob"]


def test_an_entry_of_that_name_that_differs_is_replaced_only_when_asked(workdir: Path, env) -> None:
    file = workdir / "claude_desktop_config.json"
    base = ("mcp", "install", "claude-desktop", "--config-file", str(file), "--capsules", "notes")
    assert astrid(*base, cwd=workdir, env=env).returncode == 0
    written = file.read_bytes()
    line = one_line_error(astrid(*base, "--resource-tools", cwd=workdir, env=env))
    assert line == (
        f"error: {file} already has a server named 'astrid-notes' that differs: pass --name OTHER for a second "
        "entry, or --replace to overwrite it"
    )
    assert file.read_bytes() == written
    done = astrid(*base, "--resource-tools", "--replace", cwd=workdir, env=env)
    assert done.returncode == 0 and "replaced the server 'astrid-notes'" in done.stderr
    assert json.loads(file.read_text())["mcpServers"]["astrid-notes"]["args"][-1] == "--resource-tools"
    [backup] = backups(file)
    assert backup.read_bytes() == written


@pytest.mark.parametrize(
    ("client", "text", "expected"),
    [
        ("claude-desktop", '{"mcpServers": {"a": 1},', "is not valid JSON (Expecting property name"),
        ("vscode", '{\n  // my servers\n  "servers": {}\n}', "is not valid JSON"),  # JSONC: left to VS Code
        ("cursor", '["mcpServers"]', "holds a JSON list, not an object"),
        ("claude-code", '{"mcpServers": ["x"]}', "'mcpServers' is not a JSON object"),
    ],
)
def test_a_malformed_file_is_refused_in_one_line_and_left_untouched(
    client: str, text: str, expected: str, workdir: Path, env
) -> None:
    file = workdir / "client.json"
    file.write_text(text)
    line = one_line_error(astrid("mcp", "install", client, "--config-file", str(file), cwd=workdir, env=env))
    assert line.startswith(f"error: {file}") and expected in line
    assert f"`astrid mcp config --client {client}` prints it" in line
    assert file.read_text() == text
    assert backups(file) == [] and sorted(p.name for p in workdir.iterdir()) == ["client.json", "mail", "notes"]


def test_install_through_a_symlink_changes_the_file_it_points_to(workdir: Path, env) -> None:
    real = workdir / "dotfiles" / "mcp.json"
    real.parent.mkdir()
    real.write_text('{"mcpServers": {}}')
    link = workdir / "mcp.json"
    link.symlink_to(real)
    done = astrid("mcp", "install", "cursor", "--config-file", str(link), cwd=workdir, env=env)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and "astrid" in json.loads(real.read_text())["mcpServers"]


def test_remote_entries_in_each_clients_shape(workdir: Path, env) -> None:
    url = "https://mcp.example.com/mcp"
    shapes = {}
    for client in ("claude-code", "cursor", "vscode"):
        file = workdir / f"{client}.json"
        done = astrid("mcp", "install", client, "--config-file", str(file), "--http", url, cwd=workdir, env=env)
        assert done.returncode == 0, done.stderr
        assert "Replace <token> in that file" in done.stderr
        shapes[client] = json.loads(file.read_text())[CLIENTS[client].servers_key]["astrid-mcp-example-com"]
    headers = {"Authorization": "Bearer <token>"}
    assert shapes["claude-code"] == shapes["vscode"] == {"type": "http", "url": url, "headers": headers}
    assert shapes["cursor"] == {"url": url, "headers": headers}
    desktop = workdir / "claude_desktop_config.json"
    line = one_line_error(
        astrid("mcp", "install", "claude-desktop", "--config-file", str(desktop), "--http", url, cwd=workdir, env=env)
    )
    assert "add the URL under Settings > Connectors" in line and not desktop.exists()


def test_install_finds_the_clients_file_where_the_client_keeps_it(tmp_path: Path, workdir: Path, env) -> None:
    home = tmp_path / "user-home"
    plain = {k: v for k, v in env.items() if k not in ("XDG_CONFIG_HOME", "CLAUDE_CONFIG_DIR", "APPDATA")}
    user = {**plain, "HOME": str(home)}
    missing = one_line_error(astrid("mcp", "install", "claude-desktop", cwd=workdir, env=user))
    assert missing.startswith(f"error: {home}/.config/Claude does not exist: is Claude Desktop installed?")
    (home / ".config" / "Claude").mkdir(parents=True)
    (home / ".cursor").mkdir()
    for client in ("claude-desktop", "claude-code", "cursor"):
        done = astrid("mcp", "install", client, cwd=workdir, env=user)
        assert done.returncode == 0, done.stderr
    assert "astrid" in json.loads((home / ".config/Claude/claude_desktop_config.json").read_text())["mcpServers"]
    assert "astrid" in json.loads((home / ".claude.json").read_text())["mcpServers"]
    assert "astrid" in json.loads((home / ".cursor/mcp.json").read_text())["mcpServers"]


def test_the_clients_files_on_each_platform() -> None:
    mac = {"HOME": "/Users/al"}
    win = {"USERPROFILE": r"C:\Users\al", "APPDATA": r"C:\Users\al\AppData\Roaming"}
    linux = {"HOME": "/home/al"}
    xdg = {"HOME": "/home/al", "XDG_CONFIG_HOME": "/cfg", "CLAUDE_CONFIG_DIR": "/cc"}
    expected = {
        "claude-desktop": (
            "/Users/al/Library/Application Support/Claude/claude_desktop_config.json",
            r"C:\Users\al\AppData\Roaming\Claude\claude_desktop_config.json",
            "/home/al/.config/Claude/claude_desktop_config.json",
            "/cfg/Claude/claude_desktop_config.json",
        ),
        "claude-code": (
            "/Users/al/.claude.json",
            r"C:\Users\al\.claude.json",
            "/home/al/.claude.json",
            "/cc/.claude.json",
        ),
        "cursor": (
            "/Users/al/.cursor/mcp.json",
            r"C:\Users\al\.cursor\mcp.json",
            "/home/al/.cursor/mcp.json",
            "/home/al/.cursor/mcp.json",
        ),
        "vscode": (
            "/Users/al/Library/Application Support/Code/User/mcp.json",
            r"C:\Users\al\AppData\Roaming\Code\User\mcp.json",
            "/home/al/.config/Code/User/mcp.json",
            "/cfg/Code/User/mcp.json",
        ),
    }
    for client, paths in expected.items():
        found = [
            client_config_file(client, platform, environ)
            for platform, environ in (("darwin", mac), ("win32", win), ("linux", linux), ("linux", xdg))
        ]
        assert [str(path) for path in found] == list(paths), client


# -- the entry: its name, its environment, the config file -------------------------------------------


def test_config_names_entries_after_their_capsule_folders(workdir: Path, env) -> None:
    names = []
    for args in (("--capsules", "notes"), ("--capsules", "mail"), ("--capsules", "notes", "--capsules", "mail"), ()):
        done = astrid("mcp", "config", *args, cwd=workdir, env=env)
        assert done.returncode == 0, done.stderr
        [name] = json.loads(done.stdout)["mcpServers"]
        names.append(name)
    assert names == ["astrid-notes", "astrid-mail", "astrid-notes-mail", "astrid"]
    remote = astrid("mcp", "config", "--http", "http://127.0.0.1:8000/mcp", cwd=workdir, env=env)
    assert list(json.loads(remote.stdout)["mcpServers"]) == ["astrid-127-0-0-1-8000"]
    bad = one_line_error(astrid("mcp", "config", "--name", "my server", cwd=workdir, env=env))
    assert bad == "error: --name 'my server': use 1-64 letters, digits, '-' or '_' (what every client accepts)"


def test_config_carries_the_xdg_dirs_and_astrid_settings_as_absolute_paths(workdir: Path, env, tmp_path) -> None:
    xdg = {
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        "XDG_STATE_HOME": str(tmp_path / "xdg-state"),
    }
    shell = {**env, **xdg, "ASTRID_DATA_DIR": "data", "XDG_RUNTIME_DIR": "/run/x", "UNRELATED": "x"}
    done = astrid("mcp", "config", cwd=workdir, env=shell)
    assert done.returncode == 0, done.stderr
    carried = json.loads(done.stdout)["mcpServers"]["astrid"]["env"]
    assert carried == {
        **xdg,
        CONFIG_DIR_ENV: env[CONFIG_DIR_ENV],
        CAPSULE_HOME_ENV: env[CAPSULE_HOME_ENV],
        "ASTRID_DATA_DIR": str(workdir / "data"),  # relative in the shell: absolute for the client
        "ASTRID_CACHE_DIR": os.environ["ASTRID_CACHE_DIR"],
        "ASTRID_BUILD_CACHE_DIR": os.environ["ASTRID_BUILD_CACHE_DIR"],
    }


def test_config_carries_the_config_file_used_as_an_absolute_path(workdir: Path, env) -> None:
    (workdir / "astrid.toml").write_text('[serve]\ncapsules = ["notes"]\nprincipal = "carol"\n')
    done = astrid("mcp", "config", cwd=workdir, env=env)
    assert done.returncode == 0, done.stderr
    [(name, entry)] = json.loads(done.stdout)["mcpServers"].items()
    assert name == "astrid-notes"  # named after the file's capsule folders
    assert entry["args"][-4:] == [
        "--config",
        str(workdir / "astrid.toml"),
        "mcp",
        "serve",
    ]  # the file's values: not baked
    assert f"reads its settings from {workdir / 'astrid.toml'}" in done.stderr

    (workdir / "sub").mkdir()
    explicit = astrid("--config", "../astrid.toml", "mcp", "config", cwd=workdir / "sub", env=env)
    assert json.loads(explicit.stdout)["mcpServers"]["astrid-notes"]["args"][-4:-2] == [
        "--config",
        str(workdir / "astrid.toml"),
    ]

    (workdir / "astrid.toml").write_text('[serve]\nhttp = "8000"\n')
    line = one_line_error(astrid("mcp", "config", cwd=workdir, env=env))
    assert line.startswith(f"error: {workdir / 'astrid.toml'} sets http: a client starts its server on stdio")


def test_config_prints_each_clients_shape(workdir: Path, env) -> None:
    vscode = json.loads(
        astrid("mcp", "config", "--client", "vscode", "--capsules", "notes", cwd=workdir, env=env).stdout
    )
    assert vscode["servers"]["astrid-notes"]["type"] == "stdio"
    code = json.loads(astrid("mcp", "config", "--client", "claude-code", cwd=workdir, env=env).stdout)
    assert code["mcpServers"]["astrid"]["type"] == "stdio"


def test_a_dev_entry_starts_capsule_dev_on_the_folder(workdir: Path, env) -> None:
    (workdir / "notes" / "Capsule.toml").write_text('[package]\nname = "notes"\n')
    done = astrid("mcp", "config", "--dev", "notes", "--principal", "alice", cwd=workdir, env=env)
    assert done.returncode == 0, done.stderr
    [(name, entry)] = json.loads(done.stdout)["mcpServers"].items()
    assert name == "astrid-dev-notes"
    assert entry["args"][-5:] == ["capsule", "dev", str((workdir / "notes").resolve()), "--principal", "alice"]
    assert "every saved edit is live" in done.stderr
    installed = astrid("mcp", "install", "cursor", "--dev", "notes", "--config-file", "c.json", cwd=workdir, env=env)
    assert installed.returncode == 0, installed.stderr
    assert json.loads((workdir / "c.json").read_text())["mcpServers"]["astrid-dev-notes"]["args"][-3:-1] == [
        "capsule",
        "dev",
    ]
    mixed = one_line_error(astrid("mcp", "config", "--dev", "notes", "--capsules", "mail", cwd=workdir, env=env))
    assert mixed.startswith("error: --dev is an entry for one capsule folder served from its sources")
    empty = one_line_error(astrid("mcp", "config", "--dev", "mail", cwd=workdir, env=env))
    assert empty == "error: --dev mail: no Capsule.toml there (give a capsule folder)"
