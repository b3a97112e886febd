"""What a capsule's app.py declares with the guest SDK, as JSON (run as a script, never imported).

`astrid capsule build` runs this file in a separate host Python started with
`-I -S -B` (no site-packages, no user site, no PYTHON* variables, no
bytecode), so the capsule sees what the WebAssembly build sees: the standard
library, the capsule folder, the guest SDK and the packages pinned in its
requirements.txt. It imports `app` with `Capsule.world()` replaced by a
marker (the real one needs componentize-py's bindings), then writes what the
SDK will serve for that code:

    python -I -S -B _code_facts.py OUT FOLDER SDK [SITE]

OUT receives one JSON object:

    {"status": "ok", "facts": {"name", "resources", "families", "templates", "handlers", "sites"}}
    {"status": "not-sdk", "detail": "..."}   app.py does not use the SDK's Capsule.world()
    {"status": "failed", "error": "..."}     importing app.py failed on this Python

Only the standard library is used here: nothing of astrid is importable.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback

BINDINGS = ("wit_world", "componentize_py_types", "componentize_py_runtime")


def _where(exc: BaseException, roots: list[str]) -> str:
    """`app.py:12: NameError: ...`, naming the innermost frame inside the capsule or its packages."""
    frames = traceback.extract_tb(exc.__traceback__)
    location = ""
    for frame in reversed(frames):
        for root in roots:
            if frame.filename.startswith(root.rstrip("/") + "/"):
                location = f"{frame.filename[len(root.rstrip('/')) + 1 :]}:{frame.lineno}: "
                break
        if location:
            break
    text = str(exc)
    return f"{location}{type(exc).__name__}: {text}" if text else f"{location}{type(exc).__name__}"


def _facts(capsule: object) -> dict:
    static = getattr(capsule, "_static", {}) or {}
    families = getattr(capsule, "_families", []) or []
    templates = getattr(capsule, "_templates", []) or []
    handlers = getattr(capsule, "_handlers", {}) or {}
    sites: dict[str, str] = {}  # what -> where app.py declares it (`app.py:12`), when the SDK records it
    declared = [(uri, entry) for uri, entry in static.items()]
    declared += [(getattr(f, "prefix", ""), f) for f in families]
    declared += [(getattr(t, "uri_template", ""), t) for t in templates]
    for what, item in declared:
        site = getattr(item, "site", None)
        if isinstance(site, str) and site:
            sites[str(what)] = site
    return {
        "name": getattr(capsule, "name", None),
        "sites": sites,
        "resources": [str(uri) for uri in static],
        "families": [str(getattr(family, "prefix", "")) for family in families],
        "templates": [
            {
                "uri_template": str(getattr(template, "uri_template", "")),
                "literal_prefix": str(getattr(getattr(template, "parsed", None), "literal_prefix", "")),
                "completes": sorted(str(name) for name in (getattr(template, "_completers", {}) or {})),
            }
            for template in templates
        ],
        "handlers": sorted(str(name) for name in handlers),
    }


def main(argv: list[str]) -> int:
    out, folder, sdk, *site = argv
    roots = [folder, sdk, *site]
    sys.path[:0] = roots

    def write(result: dict) -> int:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        return 0

    try:
        from astrid_sdk import _capsule
    except BaseException as exc:  # the SDK itself does not import on this Python
        return write({"status": "failed", "error": "the guest SDK: " + _where(exc, roots)})

    marker = "_astrid_capsule"

    def world(self: object) -> type:
        return type("WitWorld", (), {marker: self})

    _capsule.Capsule.world = world  # type: ignore[method-assign]
    try:
        app = importlib.import_module("app")  # the capsule's entry module
    except BaseException as exc:
        missing = getattr(exc, "name", None)
        if isinstance(exc, ImportError) and isinstance(missing, str) and missing.split(".")[0] in BINDINGS:
            return write({"status": "not-sdk", "detail": f"app.py imports {missing}"})
        return write({"status": "failed", "error": _where(exc, roots)})
    capsule = getattr(getattr(app, "WitWorld", None), marker, None)
    if capsule is None:
        return write({"status": "not-sdk", "detail": "app.py defines no WitWorld = capsule.world()"})
    return write({"status": "ok", "facts": _facts(capsule)})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
