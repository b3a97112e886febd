"""Agent Skills in a capsule folder: `skills/<name>/SKILL.md` plus supporting files, checked and indexed.

    skills = read_skills(folder)        # BuildError, one line naming the file and the fix
    source = index_module(skills)       # the generated guest module the SDK serves them from

A skill is a folder whose `SKILL.md` opens with YAML frontmatter holding
`name` (the folder's name, Agent Skills naming rules) and `description`. The
build checks every skill and writes `INDEX_MODULE` into the guest's copy of
the capsule folder: per skill its frontmatter (as JSON, every field the
author wrote) and per file its path, MIME type, size and sha256. The files
themselves are part of the capsule folder, so they are inside the component
(its digest, hence a publisher's signature, covers them), and the SDK reads
them at import time as the docs capsule reads its pages. docs/skills.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from astrid.host.build.steps import shown, source_files
from astrid.host.errors import BuildError

SKILLS_FOLDER = "skills"
SKILL_FILE = "SKILL.md"
INDEX_MODULE = "_astrid_skills"  # the generated guest module (`import _astrid_skills` in the SDK)
INDEX_VERSION = 1
# Bounds (docs/skills.md): a skill's entry travels in one describe record's meta (4 KiB), its files in one component.
MAX_SKILLS = 32
MAX_FILES_PER_SKILL = 64
MAX_FILES = 128  # all skills together: each file is one resource of the capsule's describe (256 at most)
MAX_FILE_BYTES = 512 * 1024  # one read (700 KiB at most)
MAX_SKILL_BYTES = 4 * 1024 * 1024
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_FRONTMATTER_JSON_BYTES = 3072
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
# MIME types by suffix, a fixed table (the system's mimetypes database differs between machines,
# and a build must not). Unknown suffixes: text/plain when the bytes are UTF-8, else octet-stream.
MIME_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".py": "text/x-python",
    ".sh": "text/x-shellscript",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".ts": "text/x-typescript",
    ".json": "application/json",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".csv": "text/csv",
    ".html": "text/html",
    ".xml": "application/xml",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".pdf": "application/pdf",
}
_BINARY_TYPES = ("image/png", "image/jpeg", "image/gif", "application/pdf")


@dataclass(frozen=True)
class SkillFile:
    path: str  # relative to the skill's folder, with '/'
    mime_type: str
    text: bool  # served as text (UTF-8), else as a blob
    size: int
    sha256: str


@dataclass(frozen=True)
class Skill:
    name: str
    frontmatter: dict
    files: tuple[SkillFile, ...]  # SKILL.md first

    def index_entry(self) -> dict:
        return {
            "name": self.name,
            "frontmatter": self.frontmatter,
            "files": [
                {"path": f.path, "mime_type": f.mime_type, "text": f.text, "size": f.size, "sha256": f.sha256}
                for f in self.files
            ],
        }


class _NoDates(yaml.SafeLoader):
    """SafeLoader without implicit timestamps: `date: 2026-01-02` stays the string the author wrote
    (JSON has no dates, and the frontmatter must come out as written)."""


_NoDates.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_skills(folder: Path, exclude: tuple[Path, ...] = ()) -> list[Skill]:
    """Every skill under `folder/skills/`, checked; [] without that folder."""
    root = Path(folder) / SKILLS_FOLDER
    if not root.is_dir():
        return []
    by_skill: dict[str, list[Path]] = {}
    for path in source_files(Path(folder), exclude):
        relative = path.relative_to(root) if path.is_relative_to(root) else None
        if relative is None:
            continue
        if len(relative.parts) < 2:
            raise BuildError(
                f"{shown(path)}: a file directly in {SKILLS_FOLDER}/ (each skill is a folder: "
                f"{SKILLS_FOLDER}/<name>/{SKILL_FILE} plus its files)"
            )
        by_skill.setdefault(relative.parts[0], []).append(path)
    if len(by_skill) > MAX_SKILLS:
        raise BuildError(f"{shown(root)}: {len(by_skill)} skills, over {MAX_SKILLS} (split the capsule)")
    files = sum(len(paths) for paths in by_skill.values())
    if files > MAX_FILES:
        raise BuildError(f"{shown(root)}: {files} files, over {MAX_FILES} in all skills (split the capsule)")
    return [_read_skill(root / name, paths) for name, paths in sorted(by_skill.items())]


def _read_skill(folder: Path, paths: list[Path]) -> Skill:
    skill_md = folder / SKILL_FILE
    if not skill_md.is_file():
        raise BuildError(f"{shown(skill_md)}: missing (every folder in {SKILLS_FOLDER}/ is a skill and needs one)")
    if len(paths) > MAX_FILES_PER_SKILL:
        raise BuildError(
            f"{shown(folder)}: {len(paths)} files, over {MAX_FILES_PER_SKILL} per skill (move some out of the skill)"
        )
    files = []
    total = 0
    for path in sorted(paths, key=lambda p: (p != skill_md, p.relative_to(folder).as_posix())):
        data = path.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            raise BuildError(f"{shown(path)}: {len(data)} bytes, over {MAX_FILE_BYTES} per skill file (split it)")
        total += len(data)
        files.append(_file(path.relative_to(folder).as_posix(), data))
    if total > MAX_SKILL_BYTES:
        raise BuildError(f"{shown(folder)}: {total} bytes of files, over {MAX_SKILL_BYTES} per skill (make it smaller)")
    if not files[0].text:
        raise BuildError(f"{shown(skill_md)}: not UTF-8 text (save it as UTF-8)")
    frontmatter = parse_frontmatter(skill_md.read_bytes().decode("utf-8"), shown(skill_md))
    check_frontmatter(frontmatter, folder.name, shown(skill_md))
    return Skill(folder.name, frontmatter, tuple(files))


def _file(path: str, data: bytes) -> SkillFile:
    suffix = Path(path).suffix.lower()
    mime_type = MIME_TYPES.get(suffix)
    text = mime_type not in _BINARY_TYPES
    if text:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            text = False
    if mime_type is None:
        mime_type = "text/plain" if text else "application/octet-stream"
    return SkillFile(path, mime_type, text, len(data), hashlib.sha256(data).hexdigest())


def parse_frontmatter(markdown: str, where: str) -> dict:
    """The YAML between the opening `---` lines of a SKILL.md, as a JSON-ready mapping."""
    match = _FRONTMATTER.match(markdown.removeprefix("\ufeff"))
    if match is None:
        raise BuildError(
            f"{where}: no YAML frontmatter (start the file with a '---' line, then `name:` and `description:`, "
            "then a closing '---' line)"
        )
    try:
        value = yaml.load(match.group(1), Loader=_NoDates)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (frontmatter line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BuildError(f"{where}: the frontmatter is not valid YAML{line}: {problem}") from None
    if not isinstance(value, dict):
        raise BuildError(f"{where}: the frontmatter must be a YAML mapping (`name: ...` and `description: ...` lines)")
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise BuildError(f"{where}: the frontmatter has a value JSON cannot hold ({exc}): quote it") from None
    if len(encoded.encode("utf-8")) > MAX_FRONTMATTER_JSON_BYTES:
        raise BuildError(
            f"{where}: the frontmatter is {len(encoded.encode())} bytes as JSON, over {MAX_FRONTMATTER_JSON_BYTES} "
            "(shorten it; put details in the body)"
        )
    result: dict = json.loads(encoded)  # plain JSON types only, keys as strings
    return result


def name_problem(name: object) -> str | None:
    """Why `name` breaks the Agent Skills naming rules, or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > MAX_NAME_CHARS:
        return f"is longer than {MAX_NAME_CHARS} characters"
    if not _NAME.fullmatch(name):
        return "must be lowercase letters, digits and single hyphens, not starting or ending with a hyphen"
    return None


def check_frontmatter(frontmatter: dict, folder_name: str, where: str) -> None:
    name = frontmatter.get("name")
    if name is None:
        raise BuildError(f"{where}: the frontmatter has no `name` (add `name: {folder_name}`)")
    problem = name_problem(name)
    if problem is not None:
        raise BuildError(f"{where}: name {name!r} {problem} (like pdf-forms)")
    if name != folder_name:
        raise BuildError(
            f"{where}: name {name!r} is not its folder's name {folder_name!r} (rename one to match the other)"
        )
    description = frontmatter.get("description")
    if not isinstance(description, str) or not description.strip():
        raise BuildError(f"{where}: the frontmatter needs a non-empty `description` (what the skill does, and when)")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise BuildError(
            f"{where}: the description is {len(description)} characters, over {MAX_DESCRIPTION_CHARS} (shorten it)"
        )


def index_module(skills: list[Skill]) -> str:
    """The Python source of `INDEX_MODULE`: the skills' index as one JSON string."""
    index = {"skills": INDEX_VERSION, "folder": SKILLS_FOLDER, "entries": [s.index_entry() for s in skills]}
    text = json.dumps(index, ensure_ascii=True, separators=(",", ":"))  # key order kept: verbatim
    return f"# Generated by `astrid capsule build` from {SKILLS_FOLDER}/: do not edit.\nINDEX = {text!r}\n"


def declared_skills(folder: Path, component: Path | None = None) -> list[str]:
    """The `SKILL.md` URIs the built component of `folder` serves, asked of it in the sandbox as the build
    asks it (`astrid.facts`); [] for a capsule without skills, without the SDK, or that does not answer."""
    from astrid.host.build.code_check import read_built

    reading = read_built(folder, component)
    if reading.facts is None:
        return []
    return sorted(uri for uri in reading.facts.resources if uri.endswith("/" + SKILL_FILE))
