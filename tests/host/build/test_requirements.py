"""requirements.txt: exact pins only, pure-Python packages only, every installed package pinned, hashes honoured.

Most cases install real wheels made on the spot from a local `--find-links`
folder with `--no-index` (no network); the native-code refusal of a real
package asks the package index (marked slow).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astrid.host.build import BuildError, build_capsule, content_hash
from astrid.host.build.requirements import install_site, read_requirements, tree_sha256

from .wheels import make_wheel, wheel_sha256

MANIFEST = """\
[package]
name = "deps"
version = "0.1.0"

[[component]]
id = "deps"
file = "deps.wasm"

[subscribe]
"resource.v1.request.describe" = { wit = "astrid-bus:resource@1.0.0", handler = "describe" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }

[publish]
"resource.v1.response.describe.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }
"""

APP = """\
from astrid_sdk import Capsule

capsule = Capsule("deps")


@capsule.resource("astrid://deps/hello", mime_type="text/plain")
def hello(ctx):
    return "hello"


WitWorld = capsule.world()
"""

LOCAL = "--no-index\n--find-links wheels\n"


@pytest.fixture
def deps(tmp_path: Path) -> Path:
    folder = tmp_path / "deps"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST)
    (folder / "app.py").write_text(APP)
    return folder


def refused(folder: Path, requirements: str, cache: Path) -> str:
    """The one-or-more-line error `astrid capsule build`'s code path gives for `requirements`."""
    (folder / "requirements.txt").write_text(requirements)
    with pytest.raises(BuildError) as caught:
        build_capsule(folder, precompile=False, cache_dir=cache)
    return str(caught.value)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("idna\n", "requirements.txt:1: 'idna' is not pinned to one version: write idna=="),
        ("idna>=3\n", "requirements.txt:1: 'idna>=3' is not pinned to one version: write idna=="),
        ("idna==3.*\n", "is not pinned to one version"),
        ("idna~=3.10\n", "is not pinned to one version"),
        ("idna==3.10,<4\n", "is not pinned to one version"),
        ('idna==3.10 ; python_version < "3.12"\n', "environment markers"),
        ("idna @ https://example.com/idna.whl\n", "is not a package pin: write name==version"),
        ("./wheels/idna.whl\n", "is not a package pin"),
        ("-e .\n", "-e is not allowed"),
        ("-r other.txt\n", "-r is not allowed"),
        ("idna==3.10\nIDNA==3.10\n", "IDNA is pinned twice (also on line 1)"),
        (
            "idna==3.10\nRequests==2.32.3\n",
            "requirements.txt:2: Requests cannot work in a capsule: it reaches the network through sockets, "
            "and a capsule has none: call ctx.http after the operator grants http; remove it",
        ),
        ("redis==5.0.0\n", "redis cannot work in a capsule: it talks to its server through sockets"),
    ],
)
def test_only_exact_pins_are_accepted(deps: Path, tmp_path: Path, line: str, expected: str):
    message = refused(deps, line, tmp_path)
    assert expected in message, message
    assert "\n" not in message


def test_comments_continuations_and_hashes_are_read_as_pip_reads_them(deps: Path):
    (deps / "requirements.txt").write_text(
        "--no-index  # local only\n--find-links wheels\n\n"
        "alpha==1.0 \\\n    --hash=sha256:" + "a" * 64 + "  # the one we need\n"
        "Beta_Pkg[fast]==2.0.post1\n"
    )
    requirements = read_requirements(deps)
    assert requirements is not None
    assert [(p.name, p.version, p.line) for p in requirements.pins] == [
        ("alpha", "1.0", 4),
        ("Beta_Pkg", "2.0.post1", 6),
    ]
    assert requirements.find_links == ("wheels",)
    (deps / "requirements.txt").write_text("# nothing pinned\n\n")
    assert read_requirements(deps) is None


def test_pinned_packages_install_into_an_isolated_site_keyed_by_the_file(deps: Path, tmp_path: Path):
    make_wheel(deps / "wheels", "alpha", "1.0", {"alpha/__init__.py": "VALUE = 1\n"})
    (deps / "requirements.txt").write_text(LOCAL + "alpha==1.0\n")
    requirements = read_requirements(deps)
    assert requirements is not None
    cache = tmp_path / "cache"
    site = install_site(requirements, cache)
    assert (site.site_packages / "alpha" / "__init__.py").read_text() == "VALUE = 1\n"
    assert not list(site.site_packages.rglob("*.pyc"))  # --no-compile: nothing the guest would not use
    assert site.tree_sha256 == tree_sha256(site.site_packages)
    assert site.root in site.site_packages.parents and cache in site.root.parents
    again = install_site(requirements, cache)  # the same file: the same site, nothing installed again
    assert again == site
    # The installed tree is part of the build's content hash.
    assert content_hash(deps, site=site.tree_sha256) != content_hash(deps)
    assert content_hash(deps, site=site.tree_sha256) != content_hash(deps, site="0" * 64)


def test_a_wheel_with_native_code_is_refused_by_name(deps: Path, tmp_path: Path):
    make_wheel(
        deps / "wheels",
        "fastthing",
        "1.0",
        {"fastthing/__init__.py": "from fastthing._speed import go\n", "fastthing/_speed.so": b"\x7fELF"},
    )
    message = refused(deps, LOCAL + "fastthing==1.0\n", tmp_path)
    assert "fastthing 1.0 has native code (fastthing/_speed.so)" in message, message
    assert message.startswith("requirements.txt: ") or "/requirements.txt: " in message
    assert "\n" not in message


def test_an_impure_wheel_is_refused_by_name(deps: Path, tmp_path: Path):
    make_wheel(deps / "wheels", "platty", "2.0", {"platty/__init__.py": ""}, tag="py3-none-any", purelib=False)
    message = refused(deps, LOCAL + "platty==2.0\n", tmp_path)
    assert "platty 2.0 has native code" in message, message


def test_every_installed_package_must_be_pinned_and_the_lines_are_given(deps: Path, tmp_path: Path):
    make_wheel(deps / "wheels", "outer", "1.0", {"outer/__init__.py": "import inner\n"}, requires=("inner",))
    make_wheel(deps / "wheels", "inner", "3.1", {"inner/__init__.py": ""})
    message = refused(deps, LOCAL + "outer==1.0\n", tmp_path)
    assert "also need inner, which it does not pin" in message, message
    assert message.endswith("Add these lines to requirements.txt:\n    inner==3.1")
    (deps / "requirements.txt").write_text(LOCAL + "outer==1.0\ninner==3.1\n")
    requirements = read_requirements(deps)
    assert requirements is not None
    site = install_site(requirements, tmp_path / "cache")
    assert (site.site_packages / "inner" / "__init__.py").is_file()


def test_hashes_are_honoured(deps: Path, tmp_path: Path):
    wheel = make_wheel(deps / "wheels", "alpha", "1.0", {"alpha/__init__.py": ""})
    message = refused(deps, LOCAL + "alpha==1.0 --hash=sha256:" + "0" * 64 + "\n", tmp_path)
    assert "alpha==1.0 does not match its --hash" in message, message
    (deps / "requirements.txt").write_text(LOCAL + f"alpha==1.0 --hash=sha256:{wheel_sha256(wheel)}\n")
    requirements = read_requirements(deps)
    assert requirements is not None
    assert (install_site(requirements, tmp_path / "cache").site_packages / "alpha").is_dir()


def test_a_version_the_index_lacks_is_named(deps: Path, tmp_path: Path):
    make_wheel(deps / "wheels", "alpha", "1.0", {"alpha/__init__.py": ""})
    message = refused(deps, LOCAL + "alpha==9.9\n", tmp_path)
    assert "no wheel of alpha==9.9 on the package index" in message, message


@pytest.mark.slow
def test_a_real_package_with_native_code_is_refused_by_name(deps: Path, tmp_path: Path):
    """PyYAML has only CPython wheels (and a source distribution): pip finds no pure-Python wheel."""
    message = refused(deps, "PyYAML==6.0.2\n", tmp_path)
    assert "PyYAML has native code" in message or "pyyaml has native code" in message.lower(), message
    assert "WebAssembly guest cannot load" in message
    assert "\n" not in message
