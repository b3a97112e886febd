"""`astrid mcp serve-bundle DIR`: the server of an unpacked `astrid mcp bundle`, as Claude Desktop starts it.

Everything is the bundle's own, never the user's: its capsules
(`DIR/capsules` is the capsule home, so the user's installed capsules are not
served), and its own config and data folders under the user data dir
(`bundles/NAME/`). At every start the grants file there is written afresh
from the `--set KEY=VALUE` settings Claude Desktop passes (what
`server/bundle.json` says each grants), and the trust store from the
publishers the bundle ships, so the user's global grants and trusted keys
are never read, and never changed. Signed capsules are verified here before
serving, and again at every load.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from astrid.cli import output
from astrid.cli.errors import UserError

BUNDLE_FILE = "server/bundle.json"
PUBLISHERS_FILE = "server/publishers.json"
CAPSULES = "capsules"
STATE_FOLDER = "bundles"
# A `${user_config.KEY}` Claude Desktop left as it was: nothing set.
UNSET = "${user_config."


def read_json(path: Path, what: str) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the bundle's {what} ({exc}): reinstall the bundle") from None
    if not isinstance(document, dict):
        raise UserError(f"{path}: the bundle's {what} is not a JSON object: reinstall the bundle")
    return document


def parse_settings(pairs: tuple[str, ...], known: dict[str, dict]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UserError(f"--set {pair}: give KEY=VALUE")
        if key not in known:
            raise UserError(
                f"--set {key}: this bundle has no such setting (it has {', '.join(sorted(known)) or 'none'})"
            )
        values[key] = "" if value.startswith(UNSET) else value
    return values


def state_dir(name: str) -> Path:
    """The bundle's own astrid folders: the user data dir + `bundles/NAME` (kept across updates of the bundle)."""
    from astrid.host.settings import data_dir

    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise UserError(f"bundle name {name!r} cannot name a folder: rebuild the bundle with `astrid mcp bundle`")
    return data_dir() / STATE_FOLDER / name


def use_own_folders(bundle: Path, state: Path) -> None:
    """Point every astrid place at the bundle's own: the rest of this process reads nothing of the user's."""
    from astrid.host.settings import CAPSULE_HOME_ENV, CONFIG_DIR_ENV, DATA_DIR_ENV

    for folder in (state / "config", state / "data"):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.environ[CONFIG_DIR_ENV] = str(state / "config")
    os.environ[DATA_DIR_ENV] = str(state / "data")
    os.environ[CAPSULE_HOME_ENV] = str(bundle / CAPSULES)


def _fresh(path: Path) -> Path:
    """`path`, removed: the file is rebuilt from the bundle at every start."""
    path.unlink(missing_ok=True)
    return path


def trust_publishers(bundle: Path) -> None:
    """The bundle's publishers, and the namespaces their capsules claim, as this bundle's trust store."""
    from astrid.host.identity.trust import TrustStore, default_trust_file

    store = TrustStore(_fresh(default_trust_file()))
    path = bundle / PUBLISHERS_FILE
    if not path.exists():
        return
    for entry in read_json(path, "publishers").get("publishers", []):
        store.add(entry["key"], entry["name"], another_key=True)
        if entry.get("namespaces"):
            store.claim(entry["namespaces"], entry["fingerprint"], capsule=entry.get("capsule"))


def verify_signed(bundle: Path) -> None:
    """Check every installed (signed) capsule of the bundle now, for a one-line error at start."""
    from astrid.host.capsule.provenance import IDENTITY_FILE
    from astrid.host.errors import AstridError
    from astrid.host.identity.signing import verify_installed
    from astrid.host.identity.trust import TrustStore, default_trust_file

    trust = TrustStore(default_trust_file())
    for folder in sorted((bundle / CAPSULES).iterdir()):
        if not (folder / IDENTITY_FILE).exists():
            continue
        try:
            capsule = verify_installed(folder, trust, allow_unsigned=True)
        except AstridError as exc:
            raise UserError(f"bundled capsule {folder.name} does not verify: {exc}") from None
        output.say(f"verified {capsule.name} {capsule.version} ({capsule.signer_text()})")


def grant_settings(bundle: Path, settings: dict[str, dict], values: dict[str, str]) -> None:
    """This bundle's grants file, from scratch: each setting's value as the grant it stands for."""
    from astrid.host.capabilities.grants import GrantStore, check_spec
    from astrid.host.errors import AstridError
    from astrid.host.identity.trust import TrustStore, default_trust_file
    from astrid.host.identity.vetting import vetter
    from astrid.host.settings import default_grants_file

    store = GrantStore(_fresh(default_grants_file()))
    vet = vetter(TrustStore(default_trust_file()))
    for key, setting in sorted(settings.items()):
        capsule, capability = setting.get("capsule", ""), setting.get("capability", "")
        value = values.get(key, "")
        if capability == "fs":
            if not value:
                raise UserError(f"no folder chosen for {key}: choose one in this extension's settings")
            folder = Path(value).expanduser()
            if not folder.is_absolute() or not folder.is_dir():
                raise UserError(f"{key}: {value} is not a folder: choose a folder in this extension's settings")
            spec = f"fs:{setting.get('mount', '')}={folder}"
        elif capability == "http":
            spec = f"http:{value}" if value else ""
        elif capability == "kv":
            spec = "kv" if value.lower() == "true" else ""
        else:
            raise UserError(f"{BUNDLE_FILE}: setting {key} grants {capability!r}, which astrid does not know")
        if not spec:
            continue
        try:
            check_spec(spec)
            identity = vet(bundle / CAPSULES / capsule).grant_key(capsule, bundle / CAPSULES / capsule)
            store.grant(capsule, spec, identity)
        except (AstridError, ValueError) as exc:
            raise UserError(f"{key}: {exc}") from None
        output.say(f"granted {capsule} {spec} (for this bundle only)")


def prepare(bundle: Path, pairs: tuple[str, ...]) -> Path:
    """Everything before serving: own folders, trust, verified capsules, grants. Returns the capsule folder."""
    bundle = bundle.expanduser().resolve()
    description = read_json(bundle / BUNDLE_FILE, "description")
    settings = description.get("settings", {})
    values = parse_settings(pairs, settings)
    state = state_dir(str(description.get("name", "")))
    use_own_folders(bundle, state)
    trust_publishers(bundle)
    verify_signed(bundle)
    grant_settings(bundle, settings, values)
    output.say(f"bundle {description.get('name')}: its own grants and state in {state}")
    return bundle / CAPSULES
