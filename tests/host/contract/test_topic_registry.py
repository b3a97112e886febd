"""Every topic is spelled once, in `astrid.host.contract.topics`.

A second spelling of a topic in the host or the CLI (a string that starts
with `resource.v1.` or `astrid.v1.`) is the start of drift: the registry is
the only place to name one. Docstrings and comments may mention topics.
The guest SDK spells its reply prefixes itself (it runs inside wasm and
cannot import the host); they must equal the host's, and the capsule
template must bind and publish on what the registry says.
"""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from astrid.host.bus.topics import pattern_matches, topic_problem
from astrid.host.contract import topics

REPO = Path(__file__).resolve().parents[3]
REGISTRY = REPO / "host" / "contract" / "topics.py"
TOPIC_PREFIXES = ("resource.v1", "astrid.v1")


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def topic_literals(source: str) -> list[str]:
    """The string literals in `source` (not docstrings) that spell a topic or a part of one."""
    tree = ast.parse(source)
    docstrings = _docstring_nodes(tree)
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and node.value.startswith(TOPIC_PREFIXES)
    ]


def spelled_outside_the_registry() -> dict[str, list[str]]:
    found = {}
    for root in (REPO / "host", REPO / "cli"):
        for path in sorted(root.rglob("*.py")):
            if path == REGISTRY:
                continue
            literals = topic_literals(path.read_text(encoding="utf-8"))
            if literals:
                found[str(path.relative_to(REPO))] = literals
    return found


def test_no_topic_is_spelled_outside_the_registry() -> None:
    assert spelled_outside_the_registry() == {}, "name these topics in astrid.host.contract.topics and import them"


def test_the_registry_spells_each_topic_once() -> None:
    counts = Counter(topic_literals(REGISTRY.read_text(encoding="utf-8")))
    assert [value for value, count in counts.items() if count > 1] == []


@pytest.mark.parametrize(
    "source",
    [
        'READ = "resource.v1.request.read"\n',
        'def f(c):\n    return f"astrid.v1.response.{c}"\n',
        'x = {"topic": "astrid.v1.capsules_loaded"}\n',
    ],
)
def test_a_second_spelling_is_caught(source: str) -> None:
    assert topic_literals(source) != []


def test_docstrings_may_mention_topics() -> None:
    assert topic_literals('"""Answers `resource.v1.request.read`."""\nX = 1\n') == []


def test_every_registered_topic_and_pattern_is_valid() -> None:
    names = [name for name in dir(topics) if name.isupper() and isinstance(getattr(topics, name), str)]
    assert names, "the registry names no topic"
    for name in names:
        value = getattr(topics, name)
        if value.endswith("."):
            value += "x"  # a reply prefix: valid once a segment follows
        assert topic_problem(value, pattern=value.endswith("*")) is None, name


@pytest.mark.parametrize("role", [topics.BROKER, topics.MCP_SERVER, topics.KERNEL], ids=lambda r: r.name)
def test_each_role_has_the_acls_its_exchanges_need(role: topics.HostRole) -> None:
    participant = role.participant()
    needs = {
        "broker": (
            [topics.DESCRIBE_TOPIC, topics.READ_REQUEST_TOPIC, topics.COMPLETE_TOPIC],
            [topics.DESCRIBE_REPLIES, topics.READ_REPLY_PREFIX + "c1", topics.CAPSULES_LOADED_TOPIC],
        ),
        "mcp-server": ([], [topics.CAPSULES_LOADED_TOPIC]),
        "kernel": ([topics.CAPSULES_LOADED_TOPIC, topics.INVENTORY_REPLY_PREFIX + "c1"], [topics.INVENTORY_REQUEST]),
    }
    publishes, subscribes = needs[role.name]
    assert all(participant.may_publish(topic) for topic in publishes)
    assert all(participant.may_subscribe(topic) for topic in subscribes)
    # and no more than that: nobody but the broker asks capsules anything, and nobody asks over the bus
    assert participant.may_publish(topics.DESCRIBE_TOPIC) == (role is topics.BROKER)
    assert not participant.may_publish("astrid.v1.request.mcp.resource.read")


def test_the_guest_sdk_replies_where_the_host_listens() -> None:
    from astrid_sdk import _capsule

    assert _capsule.DESCRIBE_REPLY_PREFIX == topics.DESCRIBE_REPLY_PREFIX
    assert _capsule.READ_REPLY_PREFIX == topics.READ_REPLY_PREFIX
    assert pattern_matches(topics.DESCRIBE_REPLIES, _capsule.DESCRIBE_REPLY_PREFIX + "docs")


def test_the_capsule_template_binds_the_registered_requests() -> None:
    template = (REPO / "capsules" / "templates" / "Capsule.toml.tmpl").read_text(encoding="utf-8")
    manifest = tomllib.loads(template.replace("{{", "").replace("}}", ""))
    assert set(manifest["subscribe"]) == {topics.DESCRIBE_TOPIC, topics.READ_REQUEST_TOPIC}
    assert set(manifest["publish"]) == {topics.DESCRIBE_REPLIES, topics.READ_REPLY_PREFIX + "*"}
