"""`astrid capsule new`: a capsule folder from the templates in `astrid.capsules/templates`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from astrid.capsules import CAPSULES_DIR
from astrid.host.errors import ScaffoldError

TEMPLATES_DIR = CAPSULES_DIR / "templates"
# template file -> file in the new capsule
TEMPLATES = {
    "Capsule.toml.tmpl": "Capsule.toml",
    "app.py.tmpl": "app.py",
    "README.md.tmpl": "README.md",
    "test_app.py.tmpl": "tests/test_app.py",  # `astrid capsule test` runs it; the build leaves tests/ out
}
# The files of a TypeScript (JavaScript) capsule: its Capsule.toml names app.ts where the Python one says app.py.
# Its tests are Python, as `astrid capsule test` runs them (pytest, the `capsule` fixture), whatever the language.
TS_TEMPLATES = {
    "Capsule.toml.tmpl": "Capsule.toml",
    "app.ts.tmpl": "app.ts",
    "package.json.tmpl": "package.json",
    "test_app.py.tmpl": "tests/test_app.py",
}
LANGUAGES = ("python", "ts", "js")
SKILL_TEMPLATE = "SKILL.md.tmpl"  # --with-skill: skills/<skill>/SKILL.md (Python; docs/skills.md)
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def skill_name_for(capsule: str) -> str:
    """The scaffolded skill's name: `using-<capsule>` within the Agent Skills naming rules."""
    words = [w for w in re.split(r"[^a-z0-9]+", capsule) if w]
    return "-".join(["using", *words])[:64].rstrip("-")


def scaffold_capsule(name: str, parent: Path | None = None, lang: str = "python", with_skill: bool = False) -> Path:
    """Create `parent/name/` holding Capsule.toml, app.py, README.md and tests/test_app.py (for `lang` "ts"
    or "js": Capsule.toml, app.ts or app.js, package.json, tests/test_app.py); the folder's path.
    `with_skill` (Python only) adds skills/using-<name>/SKILL.md and its `skill://<name>/` routing hint."""
    if lang not in LANGUAGES:
        raise ScaffoldError(f"--lang {lang}: not a capsule language (use one of {', '.join(LANGUAGES)})")
    if with_skill and lang != "python":
        raise ScaffoldError("--with-skill: only Python capsules serve skills yet (drop --with-skill or --lang)")
    if not _NAME.fullmatch(name or ""):
        raise ScaffoldError(
            f"{name!r} is not a capsule name: use 1-64 characters of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    folder = Path(parent if parent is not None else ".") / name
    if folder.exists():
        raise ScaffoldError(f"{folder} already exists: pick another name or remove it first")
    if parent is not None and not Path(parent).is_dir():
        raise ScaffoldError(f"{parent} is not a folder")
    try:
        folder.mkdir(parents=False)
    except OSError as exc:
        raise ScaffoldError(f"cannot create {folder}: {exc.strerror or exc}") from None
    try:
        for template, target in (TEMPLATES if lang == "python" else TS_TEMPLATES).items():
            text = (TEMPLATES_DIR / template).read_text(encoding="utf-8").replace("{{name}}", name)
            if lang != "python":
                text = text.replace("app.py", "app.ts")
            if lang == "js":  # the same code without types: the template's TypeScript is plain JavaScript
                target = target.replace("app.ts", "app.js")
                text = text.replace("app.ts", "app.js")
            if with_skill and target == "Capsule.toml":  # the skill's URIs need their routing hint
                text = text.replace(
                    f'families = ["astrid://{name}/"]', f'families = ["astrid://{name}/", "skill://{name}/"]'
                )
            (folder / target).parent.mkdir(exist_ok=True)
            (folder / target).write_text(text, encoding="utf-8")
        if with_skill:
            skill = skill_name_for(name)
            text = (TEMPLATES_DIR / SKILL_TEMPLATE).read_text(encoding="utf-8")
            skill_md = folder / "skills" / skill / "SKILL.md"
            skill_md.parent.mkdir(parents=True)
            skill_md.write_text(text.replace("{{name}}", name).replace("{{skill}}", skill), encoding="utf-8")
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise ScaffoldError(f"cannot write {folder}: {exc.strerror or exc}") from None
    return folder
