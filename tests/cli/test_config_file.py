"""astrid.toml: the settings of `astrid mcp serve` in a file, run as a user runs it (the real `astrid`).

The server is started with stdin closed: on stdio it says what it serves on
stderr and exits at end of input, so each run is quick and needs no capsule.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from astrid.cli.config_file import KEYS
from astrid.host.settings import CAPSULE_HOME_ENV, CONFIG_DIR_ENV
from tests.support.processes import astrid_exe, stop


@pytest.fixture
def user_config(tmp_path: Path) -> Path:
    """$ASTRID_CONFIG_DIR of the runs below (the user config dir)."""
    folder = tmp_path / "user-config"
    folder.mkdir()
    return folder


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def env(tmp_path: Path, user_config: Path) -> dict[str, str]:
    home = tmp_path / "capsule-home"
    home.mkdir()
    return {**os.environ, CONFIG_DIR_ENV: str(user_config), CAPSULE_HOME_ENV: str(home)}


def astrid(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [astrid_exe(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def serve_http_until_limits(workdir: Path, env: dict[str, str], *args: str) -> str:
    """`astrid mcp serve ARGS` (HTTP), stopped once its banner says the limits; its stderr."""
    stderr_path = workdir / "stderr.log"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [astrid_exe(), "mcp", "serve", *args],
            cwd=workdir,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while "limits:" not in (log := stderr_path.read_text(errors="replace")) and process.poll() is None:
            assert time.monotonic() < deadline, log
            time.sleep(0.05)
    finally:
        stop(process)
    return log


# -- what the file sets ----------------------------------------------------------------------------


def test_serve_takes_its_settings_from_astrid_toml_and_says_which_file(workdir: Path, env, tmp_path: Path) -> None:
    caps = tmp_path / "conf" / "caps"
    caps.mkdir(parents=True)
    config = write(
        tmp_path / "conf" / "astrid.toml",
        '[serve]\ncapsules = ["caps"]\nprincipal = "carol"\nresource-tools = true\nwatch = false\n',
    )
    result = astrid("--config", str(config), "mcp", "serve", cwd=workdir, env=env)
    assert result.returncode == 0, result.stderr
    assert f"astrid: settings from {config} (--config FILE" in result.stderr
    assert "for principal 'carol'" in result.stderr
    assert f", {caps}\n" in result.stderr  # relative to the file's folder, not the working directory
    assert "list_resources, read_resource (--resource-tools)" in result.stderr


def test_flags_override_the_file(workdir: Path, env) -> None:
    write(workdir / "astrid.toml", '[serve]\nprincipal = "carol"\nresource-tools = true\n')
    result = astrid("mcp", "serve", "--principal", "dave", "--no-resource-tools", cwd=workdir, env=env)
    assert result.returncode == 0, result.stderr
    assert "for principal 'dave'" in result.stderr and "carol" not in result.stderr.split("settings from")[1]
    assert "--resource-tools" not in result.stderr


def test_the_working_directory_comes_first_then_the_user_config_dir(workdir: Path, env, user_config: Path) -> None:
    in_home = write(user_config / "astrid.toml", '[serve]\nprincipal = "from-home"\n')
    result = astrid("mcp", "serve", cwd=workdir, env=env)
    assert f"settings from {in_home} (found in the user config dir" in result.stderr
    assert "for principal 'from-home'" in result.stderr

    here = write(workdir / "astrid.toml", '[serve]\nprincipal = "from-here"\n')
    result = astrid("mcp", "serve", cwd=workdir, env=env)
    assert f"settings from {here} (found in the working directory" in result.stderr
    assert "for principal 'from-here'" in result.stderr

    other = write(workdir / "other.toml", '[serve]\nprincipal = "from-flag"\n')
    result = astrid("--config", "other.toml", "mcp", "serve", cwd=workdir, env=env)
    assert f"settings from {other} (--config FILE" in result.stderr
    assert "for principal 'from-flag'" in result.stderr


def test_the_user_config_dir_is_the_platforms_without_astrid_config_dir(workdir: Path, env, tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    config = write(xdg / "astrid" / "astrid.toml", '[serve]\nprincipal = "xdg-user"\n')
    plain = {key: value for key, value in env.items() if key != CONFIG_DIR_ENV}
    result = astrid("mcp", "serve", cwd=workdir, env={**plain, "XDG_CONFIG_HOME": str(xdg)})
    assert f"settings from {config}" in result.stderr and "for principal 'xdg-user'" in result.stderr


def test_without_a_file_nothing_is_said(workdir: Path, env) -> None:
    result = astrid("mcp", "serve", "--principal", "erin", cwd=workdir, env=env)
    assert result.returncode == 0 and "settings from" not in result.stderr


def test_http_settings_and_limits_from_the_file_with_a_flag_overriding_one_limit(workdir: Path, env) -> None:
    write(
        workdir / "astrid.toml",
        '[serve]\nhttp = "127.0.0.1:0"\nno-auth = true\nprincipal = "alice"\n'
        "[serve.http-limit]\nsessions-per-principal = 3\nstreams-per-principal = 4\n",
    )
    log = serve_http_until_limits(workdir, env, "--http-limit", "streams-per-principal=5")
    assert "serving MCP resources at http://127.0.0.1:" in log, log
    assert "auth: none (loopback only)" in log
    assert "3 sessions and 5 listen streams per user" in log  # the file's limit, and the flag's over the file's


def test_the_files_principal_is_unused_over_http_with_auth_and_said_so(workdir: Path, env) -> None:
    config = write(workdir / "astrid.toml", '[serve]\nprincipal = "alice"\ntokens = "tokens.json"\n')
    log = serve_http_until_limits(workdir, env, "--http", "127.0.0.1:0")
    assert f"{config}: principal: used on stdio and with no-auth only" in log
    assert f"auth: static tokens from {workdir / 'tokens.json'}" in log  # relative to the file's folder
    flag = astrid("mcp", "serve", "--http", "127.0.0.1:0", "--principal", "bob", cwd=workdir, env=env)
    assert flag.returncode == 1 and "error: --principal applies to stdio and --no-auth" in flag.stderr


def test_http_settings_in_the_file_are_unused_on_stdio_and_said_so(workdir: Path, env) -> None:
    write(workdir / "astrid.toml", "[serve]\nno-auth = true\n[serve.http-limit]\nsessions = 9\n")
    result = astrid("mcp", "serve", "--principal", "alice", cwd=workdir, env=env)
    assert result.returncode == 0, result.stderr
    assert "no-auth, http-limit: used with --http only (this serves stdio)" in result.stderr
    flag = astrid("mcp", "serve", "--principal", "alice", "--no-auth", cwd=workdir, env=env)
    assert flag.returncode == 1
    assert flag.stderr.splitlines()[-1] == "error: --no-auth: HTTP options, give them with --http [HOST:]PORT"


def test_every_option_of_serve_has_a_key() -> None:
    """A new option of `astrid mcp serve` must get its key in astrid.toml too."""
    from astrid.cli.main import _register_commands, cli

    _register_commands()
    serve = cli.commands["mcp"].commands["serve"]  # type: ignore[attr-defined]
    params = {param.name for param in serve.params if param.name != "help"}
    assert params == {key.param for key in KEYS.values()}


# -- mistakes: one line naming the file, the key and the fix ---------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[serve]\ncapsule = ["caps"]\n', "unknown key 'capsule' in [serve] (did you mean 'capsules'?)"),
        ('capsules = ["caps"]\n', "capsules belongs in the [serve] table: put a line [serve] above it"),
        ("[serv]\n", "unknown table or key 'serv' (did you mean 'serve'?)"),
        ('[serve]\nmax-sandboxes = "many"\n', '[serve] max-sandboxes = "many": expected a whole number of at least 1'),
        ('[serve]\nwatch = "no"\n', '[serve] watch = "no": expected true or false; write e.g. watch = false'),
        ("[serve]\nprincipal = 7\n", "[serve] principal = 7: expected a user name in quotes"),
        ('[serve]\nprincipal = " x"\n', '[serve] principal = " x": use 1-128 printable characters'),
        ('[serve]\nhttp = "x:99999"\n', '[serve] http = "x:99999": give [HOST:]PORT'),
        ('[serve]\ncapsules = ["nope"]\n', "[serve] capsules: no such folder 'nope'"),
        ('[serve]\ntls-cert = "cert.pem"\n', "[serve] tls-cert: no such file 'cert.pem'"),
        ("[serve.http-limit]\nsesions = 1\n", "[serve.http-limit] unknown limit 'sesions' (did you mean 'sessions'?)"),
        ('[serve.http-limit]\nsessions = "1"\n', '[serve.http-limit] sessions = "1": expected a number'),
        ("[serve.http-limit]\nsessions = 0\n", "[serve.http-limit] sessions = 0: must be a positive, finite number"),
        ("[serve\n", "not valid TOML (Expected ']'"),
    ],
)
def test_a_wrong_key_or_value_is_one_line_naming_the_file_the_key_and_the_fix(
    workdir: Path, env, text: str, expected: str
) -> None:
    config = write(workdir / "astrid.toml", text)
    line = one_line_error(astrid("mcp", "serve", cwd=workdir, env=env))
    assert line.startswith(f"error: {config}: "), line
    assert expected in line


def test_a_missing_config_file_is_one_line(workdir: Path, env) -> None:
    line = one_line_error(astrid("--config", "nope.toml", "mcp", "serve", cwd=workdir, env=env))
    assert line.startswith("error: --config nope.toml: no such file")


def test_help_still_shows_with_a_broken_file(workdir: Path, env) -> None:
    write(workdir / "astrid.toml", "[serve]\nnope = 1\n")
    result = astrid("mcp", "serve", "--help", cwd=workdir, env=env)
    assert result.returncode == 0 and "--capsules" in result.stdout


def test_a_file_anyone_may_write_is_refused(workdir: Path, env) -> None:
    if os.name != "posix":
        pytest.skip("POSIX modes")
    config = write(workdir / "astrid.toml", '[serve]\nprincipal = "mallory"\n')
    config.chmod(0o666)
    line = one_line_error(astrid("mcp", "serve", cwd=workdir, env=env))
    assert line == f"error: {config}: anyone may write to it; astrid refuses it: chmod o-w {config}"


def test_a_file_of_another_user_is_refused(workdir: Path, env) -> None:
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    config = write(workdir / "astrid.toml", '[serve]\nprincipal = "mallory"\n')
    os.chown(config, 65534, 65534)
    line = one_line_error(astrid("mcp", "serve", cwd=workdir, env=env))
    assert line.startswith(f"error: {config}: owned by another user (uid 65534)")
