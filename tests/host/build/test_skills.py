"""`host/build/skills.py`: a capsule's skills/ folder checked before anything slow runs, one line per problem
naming the file and the fix; the index the SDK serves from (frontmatter verbatim, digests of the bytes)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from astrid.host.build.skills import MAX_FILE_BYTES, MAX_FILES_PER_SKILL, index_module, read_skills
from astrid.host.errors import BuildError
from tests.host.build.test_build import MANIFEST
from tests.support.processes import astrid_exe

GOOD = "---\nname: {name}\ndescription: Does one thing well.\n---\n\nBody.\n"


def skill(folder: Path, name: str, text: str | None = None, **files: bytes) -> Path:
    root = folder / "skills" / name
    root.mkdir(parents=True)
    (root / "SKILL.md").write_text(text if text is not None else GOOD.format(name=name), encoding="utf-8")
    for path, data in files.items():
        target = root / path.replace("__", "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def refusal(folder: Path) -> str:
    with pytest.raises(BuildError) as caught:
        read_skills(folder)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_no_skills_folder_is_no_skills(tmp_path):
    assert read_skills(tmp_path) == []


def test_a_skill_is_indexed_with_its_frontmatter_verbatim_and_every_file_s_digest(tmp_path):
    text = (
        "---\nname: pdf-forms\ndescription: 'Fill PDF forms: use for any form.'\nlicense: Apache-2.0\n"
        "released: 2026-01-02\nversion: 1.10\nmetadata:\n  owner: acme\n---\n# PDF forms\n"
    )
    png = b"\x89PNG\r\n\x1a\n\xff\xfe"
    skill(tmp_path, "pdf-forms", text, **{"reference__FORMS.md": b"# forms\n", "icon.png": png, "data.bin": b"\xff"})
    [found] = read_skills(tmp_path)
    assert found.name == "pdf-forms"
    assert list(found.frontmatter.items()) == [
        ("name", "pdf-forms"),
        ("description", "Fill PDF forms: use for any form."),
        ("license", "Apache-2.0"),
        ("released", "2026-01-02"),  # a date stays the text written (JSON has no dates)
        ("version", 1.1),
        ("metadata", {"owner": "acme"}),
    ]
    files = {f.path: f for f in found.files}
    assert list(files)[0] == "SKILL.md"
    assert files["SKILL.md"].sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert (files["SKILL.md"].mime_type, files["SKILL.md"].text) == ("text/markdown", True)
    assert (files["reference/FORMS.md"].mime_type, files["icon.png"].mime_type) == ("text/markdown", "image/png")
    assert files["icon.png"].text is False and files["icon.png"].size == len(png)
    assert (files["data.bin"].mime_type, files["data.bin"].text) == ("application/octet-stream", False)
    generated: dict = {}
    exec(index_module([found]), generated)  # the guest module the SDK imports: one JSON string
    [entry] = json.loads(generated["INDEX"])["entries"]
    assert list(entry["frontmatter"].items()) == list(found.frontmatter.items())
    first = {"path": "SKILL.md", "mime_type": "text/markdown", "text": True, "size": len(text)}
    assert entry["files"][0] == {**first, "sha256": files["SKILL.md"].sha256}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# no frontmatter\n", "no YAML frontmatter"),
        ("---\nname: [unclosed\n---\n", "not valid YAML (frontmatter line"),
        ("---\n- a list\n---\n", "must be a YAML mapping"),
        ("---\ndescription: x\n---\n", "has no `name` (add `name: my-skill`)"),
        ("---\nname: other\ndescription: x\n---\n", "is not its folder's name 'my-skill'"),
        ("---\nname: my-skill\n---\n", "needs a non-empty `description`"),
        ("---\nname: my-skill\ndescription: '  '\n---\n", "needs a non-empty `description`"),
        ("---\nname: my-skill\ndescription: " + "x" * 1025 + "\n---\n", "over 1024"),
        ("---\nname: my-skill\ndescription: x\nwhen: !!python/name:os.system\n---\n", "not valid YAML"),
    ],
)
def test_a_bad_skill_md_is_one_line_naming_the_file_and_the_fix(tmp_path, text, expected):
    skill(tmp_path, "my-skill", text)
    message = refusal(tmp_path)
    assert message.startswith(str(tmp_path / "skills" / "my-skill" / "SKILL.md") + ":") or message.startswith(
        "skills/my-skill/SKILL.md:"
    )
    assert expected in message


@pytest.mark.parametrize("name", ["My-Skill", "-lead", "trail-", "dou--ble", "under_score", "x" * 65])
def test_names_follow_the_agent_skills_rules(tmp_path, name):
    skill(tmp_path, name)
    assert "lowercase letters, digits and single hyphens" in refusal(tmp_path) or "longer than 64" in refusal(tmp_path)


def test_a_folder_without_skill_md_and_a_loose_file_are_refused(tmp_path):
    (tmp_path / "skills" / "empty").mkdir(parents=True)
    (tmp_path / "skills" / "empty" / "notes.md").write_text("x")
    assert "SKILL.md: missing" in refusal(tmp_path)
    loose = tmp_path / "other"
    (loose / "skills").mkdir(parents=True)
    (loose / "skills" / "README.md").write_text("x")
    assert "a file directly in skills/" in refusal(loose)


def test_files_are_bounded(tmp_path):
    skill(tmp_path / "big", "big", **{"huge.txt": b"x" * (MAX_FILE_BYTES + 1)})
    assert f"over {MAX_FILE_BYTES} per skill file" in refusal(tmp_path / "big")
    many = {f"f{i}.txt": b"x" for i in range(MAX_FILES_PER_SKILL)}
    skill(tmp_path / "many", "many", **many)
    assert f"over {MAX_FILES_PER_SKILL} per skill" in refusal(tmp_path / "many")


def test_capsule_build_says_it_in_one_line_before_building(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST)
    (folder / "app.py").write_text("from astrid_sdk import Capsule\nWitWorld = Capsule('tiny').world()\n")
    skill(folder, "my-skill", "---\nname: my_skill\ndescription: x\n---\n")
    done = subprocess.run([astrid_exe(), "capsule", "build", str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "my-skill/SKILL.md" in errors[0] and "single hyphens" in errors[0]
    assert not (folder / "tiny.wasm").exists()


def test_capsule_new_with_skill_scaffolds_a_skill_the_build_accepts(tmp_path):
    from astrid.host.capsule.manifest import load_manifest
    from tests.support.processes import run_astrid

    done = run_astrid("capsule", "new", "my_notes", "--with-skill", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "skills/using-my-notes/SKILL.md" in done.stdout
    folder = tmp_path / "my_notes"
    [found] = read_skills(folder)
    assert found.name == "using-my-notes" and "astrid://my_notes/" in found.frontmatter["description"]
    assert load_manifest(folder).resources.families == ["astrid://my_notes/", "skill://my_notes/"]
    refused = run_astrid("capsule", "new", "tsy", "--with-skill", "--lang", "ts", cwd=tmp_path)
    assert refused.returncode == 1 and "only Python capsules serve skills" in refused.stderr
    assert not (tmp_path / "tsy").exists()


def test_a_typescript_capsule_with_skills_is_refused_in_one_line(tmp_path):
    from astrid.host.build import build_capsule

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST)
    (folder / "app.ts").write_text("export {};\n")
    skill(folder, "my-skill")
    with pytest.raises(BuildError) as caught:
        build_capsule(folder, cache_dir=tmp_path / "cache")
    assert "do not serve skills yet" in str(caught.value) and "\n" not in str(caught.value)
