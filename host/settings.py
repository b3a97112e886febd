"""Where astrid keeps its files and whom it serves by default.

Each place is an `ASTRID_*` variable, else a platform default.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterable
from pathlib import Path

import platformdirs

CAPSULE_HOME_ENV = "ASTRID_CAPSULE_HOME"
CACHE_DIR_ENV = "ASTRID_CACHE_DIR"
BUILD_CACHE_ENV = "ASTRID_BUILD_CACHE_DIR"
CACHE_KEY_ENV = "ASTRID_CACHE_KEY_FILE"
CONFIG_DIR_ENV = "ASTRID_CONFIG_DIR"
DATA_DIR_ENV = "ASTRID_DATA_DIR"
# Every place setting: a client starts its server with a minimal environment,
# so `astrid mcp config` hands these on.
PATH_SETTINGS = (CAPSULE_HOME_ENV, CACHE_DIR_ENV, BUILD_CACHE_ENV, CACHE_KEY_ENV, CONFIG_DIR_ENV, DATA_DIR_ENV)


def path_setting(env: str, default: Path) -> Path:
    """`$env` when it is set and not empty, else `default`."""
    return Path(os.environ.get(env) or default)


def default_capsule_home() -> Path:
    """`$ASTRID_CAPSULE_HOME`, else the user data dir + `capsules`
    (Linux `~/.local/share/astrid/capsules`, macOS
    `~/Library/Application Support/astrid/capsules`, Windows
    `%LOCALAPPDATA%\\astrid\\capsules`)."""
    default = Path(platformdirs.user_data_dir("astrid", appauthor=False)) / "capsules"
    return path_setting(CAPSULE_HOME_ENV, default).expanduser()


def default_token_file() -> Path:
    """`$ASTRID_CONFIG_DIR/tokens.json`, else the user config dir + `tokens.json`
    (Linux `~/.config/astrid/tokens.json`, macOS
    `~/Library/Application Support/astrid/tokens.json`, Windows
    `%LOCALAPPDATA%\\astrid\\tokens.json`): the bearer tokens of `astrid mcp token`."""
    return config_dir() / "tokens.json"


def default_grants_file() -> Path:
    """`$ASTRID_CONFIG_DIR/grants.json`, else the user config dir + `grants.json`:
    what the operator granted each capsule (`astrid capsule grant`)."""
    return config_dir() / "grants.json"


def config_dir() -> Path:
    """`$ASTRID_CONFIG_DIR`, else the user config dir (Linux `~/.config/astrid`)."""
    default = Path(platformdirs.user_config_dir("astrid", appauthor=False))
    return path_setting(CONFIG_DIR_ENV, default).expanduser()


def data_dir() -> Path:
    """`$ASTRID_DATA_DIR`, else the user data dir (Linux `~/.local/share/astrid`):
    durable state such as the capsules' key-value store (`kv.sqlite3`)."""
    default = Path(platformdirs.user_data_dir("astrid", appauthor=False))
    return path_setting(DATA_DIR_ENV, default).expanduser()


def default_kv_file() -> Path:
    """The capsules' key-value store: `data_dir()` + `kv.sqlite3`."""
    return data_dir() / "kv.sqlite3"


def default_principal() -> str | None:
    """The OS user running the process, or None when there is none."""
    try:
        name = getpass.getuser()
    except Exception:  # no passwd entry, no USER: the caller asks for --principal
        return None
    return name or None


def capsule_paths(extra: Iterable[Path | str] = (), *, include_home: bool = True) -> list[Path]:
    """The capsule home (when it exists) and then every extra path, deduplicated."""
    paths: list[Path] = []
    if include_home:
        home = default_capsule_home()
        if home.is_dir():
            paths.append(home)
    for path in extra:
        resolved = Path(path).expanduser().resolve()
        if resolved not in paths:
            paths.append(resolved)
    return paths
