"""The dev runner: one component that serves any capsule's sources, for `astrid capsule dev`.

Built once per SDK and toolchain version (host/build/dev_runner.py), against
the world `dev-runner`: the capsule world plus `astrid:dev/sources`. While it
is built, it imports the guest SDK and the standard library modules of
`astrid_dev_stdlib` (a componentize-py guest has only what its build
imported); at its first call it puts `SourceImporter` on `sys.meta_path`.

When its sandbox gets its first call, it imports the capsule's `app` module
from the host's sources and hands every call to the app's `WitWorld`, as a
built capsule's component would answer it. An app that fails to import
answers every call with `error` and the reason, `file:line` first
(`app.py:3: NameError: ...`): the host asks `astrid.facts` of new sources in a
throwaway sandbox and shows that line, keeping the last good version served.
Stdlib and the SDK only: this runs inside the wasm guest.
"""

import importlib

import astrid_dev_stdlib
import wit_world
from astrid_dev_importer import SourceImporter, install, missing_hint
from wit_world.imports import lifecycle, sources

# The SDK before the standard library modules below, as an app imports it: its guards (open(),
# os.environ, socket) are in place before any of them binds the real ones.
import astrid_sdk
import astrid_sdk._host  # noqa: F401  (Capsule.world() imports it: at build time, or never)
from astrid_sdk._site import shown

for _module in astrid_dev_stdlib.MODULES:
    importlib.import_module(_module)

ENTRY_MODULE = "app"
MAX_REASON_CHARS = 1000

_importer = SourceImporter(sources.files, sources.read)


class _App:
    """The capsule's WitWorld, imported on the first call; or why it could not be."""

    world = None
    failure: str | None = None

    @classmethod
    def get(cls):
        if cls.world is None and cls.failure is None:
            # Installed at the first call, not at build time: while componentize-py builds the runner
            # there are no sources to ask, and its own imports must not meet this finder.
            install(_importer)
            try:
                app = importlib.import_module(ENTRY_MODULE)
                world = getattr(app, "WitWorld", None)
                if world is None:
                    raise AttributeError("app.py defines no WitWorld (end it with `WitWorld = capsule.world()`)")
                cls.world = world()
            except BaseException as exc:  # the author's code failed: said on every call, never a trap
                cls.failure = explain(exc)
        return cls.world


def explain(exc: BaseException) -> str:
    """`app.py:3: NameError: name 'x' is not defined`: the author's file and line, then the error."""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{shown(exc.filename)}:{exc.lineno or 0}: "
        return _short(f"{where}SyntaxError: {exc.msg}")
    message = str(exc)
    if isinstance(exc, ModuleNotFoundError):
        message += missing_hint(exc)
    site = getattr(exc, "site", None)
    if isinstance(site, str) and site:  # the SDK's DefinitionError: where the author declared it
        rest = ": ".join(part for part in (getattr(exc, "subject", None), getattr(exc, "problem", None)) if part)
        return _short(f"{site}: {type(exc).__name__}: {rest or message}")
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(("/0/", "/2/")) and tb.tb_frame.f_globals.get("__loader__") is _importer:
            where = f"{shown(filename)}:{tb.tb_lineno}: "
        tb = tb.tb_next
    return _short(f"{where}{type(exc).__name__}: {message}" if message else f"{where}{type(exc).__name__}")


def _short(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


class WitWorld(wit_world.WitWorld):
    def astrid_hook_trigger(self, action: str, payload: bytes) -> lifecycle.CapsuleResult:
        world = _App.get()
        if world is None:
            return lifecycle.CapsuleResult("error", _App.failure)
        return world.astrid_hook_trigger(action, payload)
