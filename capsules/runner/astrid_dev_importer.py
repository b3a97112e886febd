"""The dev runner's importer: a capsule's modules come from the host, not from a file system.

`SourceImporter(files, read)` is a `sys.meta_path` finder and loader over the
host's `astrid:dev/sources` interface: `files()` names every source file
(`capsule/<path>` for the capsule folder, `site/<path>` for the packages its
requirements.txt pins), `read(path)` gives one file's text. A module is
looked up as a build's path would find it: the capsule folder first, then the
pinned packages; in each, a package (`name/__init__.py`) before a module
(`name.py`), and a folder with `.py` files but no `__init__.py` is a
namespace package.

Each module is compiled with the file name a build gives it (`/0/app.py` for
the capsule folder, `/2/<path>` for a pinned package), so the SDK names
`app.py:12` as it does for a built capsule. A standard library module the
runner does not carry (`astrid_dev_stdlib`) fails with an error naming it and
`astrid capsule build`; an unknown module, with the requirements.txt line.
Stdlib only: this runs inside the wasm guest.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec

# (sources prefix, guest file name prefix): the capsule folder first, then the pinned packages.
ROOTS = (("capsule/", "/0/"), ("site/", "/2/"))
NOT_CARRIED = (
    "No module named {name!r}: dev mode's runner does not carry this standard library module "
    "(docs/capsules.md lists the ones it has); `astrid capsule build` builds the capsule with every module "
    "it imports"
)
NOT_FOUND = (
    " (dev mode imports the capsule folder's modules and the pure-Python packages pinned in requirements.txt "
    "beside app.py: add `{top}==<version>` there)"
)


class SourceImporter:
    """Finds and loads the capsule's modules from the host's sources (see the module docstring)."""

    def __init__(self, files: Callable[[], list[str]], read: Callable[[str], str | None]) -> None:
        self._files = files
        self._read = read
        self._known: frozenset[str] | None = None  # asked of the host on the first import
        self._folders: frozenset[str] = frozenset()

    def known(self) -> frozenset[str]:
        if self._known is None:
            known = frozenset(self._files())
            folders = set()
            for path in known:
                parts = path.split("/")
                folders.update("/".join(parts[:end]) for end in range(2, len(parts)))
            self._known, self._folders = known, frozenset(folders)
        return self._known

    # -- finder ------------------------------------------------------------------

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        known = self.known()
        base = fullname.replace(".", "/")
        for prefix, guest in ROOTS:
            package = f"{prefix}{base}/__init__.py"
            if package in known:
                return self._spec(fullname, package, guest, is_package=True)
            module = f"{prefix}{base}.py"
            if module in known:
                return self._spec(fullname, module, guest, is_package=False)
        for prefix, guest in ROOTS:
            if f"{prefix}{base}" in self._folders:  # a folder of modules without __init__.py
                spec = ModuleSpec(fullname, None, is_package=True)
                spec.submodule_search_locations = [guest + base]
                return spec
        if fullname.partition(".")[0] in sys.stdlib_module_names:
            # Found, to fail when loaded, with why: a probe (`importlib.util.find_spec`) must not raise.
            return ModuleSpec(fullname, self, origin=None)
        return None  # the import system says it is missing (`explain` adds the requirements.txt line)

    def _spec(self, fullname: str, source: str, guest: str, *, is_package: bool) -> ModuleSpec:
        origin = guest + source.partition("/")[2]
        spec = ModuleSpec(fullname, self, origin=origin, is_package=is_package)
        spec.has_location = True
        spec.loader_state = source
        if is_package:
            spec.submodule_search_locations = [origin.rsplit("/", 1)[0]]
        return spec

    # -- loader ------------------------------------------------------------------

    def create_module(self, spec: ModuleSpec):
        return None  # the default module

    def exec_module(self, module) -> None:
        spec = module.__spec__
        if spec.loader_state is None:  # a standard library module the runner does not carry
            raise ModuleNotFoundError(not_carried(spec.name), name=spec.name)
        text = self._read(spec.loader_state)
        if text is None:
            raise ImportError(f"the host no longer serves {spec.origin}", name=spec.name)
        code = compile(text, spec.origin, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # the capsule's own code, inside its sandbox

    def get_source(self, fullname: str) -> str | None:
        """What `inspect` and `linecache` ask a loader for."""
        spec = self.find_spec(fullname)
        if spec is None or spec.loader is not self or spec.loader_state is None:
            return None
        return self._read(spec.loader_state)


def not_carried(name: str) -> str:
    return NOT_CARRIED.format(name=name)


def missing_hint(exc: ModuleNotFoundError) -> str:
    """What to do about a module the sources do not have (appended to the import error's message)."""
    name = exc.name or ""
    top = name.partition(".")[0]
    if not top or top in sys.stdlib_module_names:
        return ""
    return NOT_FOUND.format(top=top)


def install(importer: SourceImporter) -> None:
    """Put `importer` before the path finder (which finds nothing once the component runs)."""
    finders = sys.meta_path
    position = next((i for i, f in enumerate(finders) if getattr(f, "__name__", "") == "PathFinder"), len(finders))
    finders.insert(position, importer)
