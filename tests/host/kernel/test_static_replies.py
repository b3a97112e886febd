"""Static describes: the kernel answers a capsule's describe (templates) itself when the reply is
the same for every principal, with no sandbox and no guest call, and indistinguishably on the bus.

Real components, built through the build cache (tests/support/capsules.py).
Each test that checks what is kept on disk runs on a private compile cache:
the shared entry is copied there (with its seal), so nothing is compiled again
and nothing of the shared cache is touched.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrid.host.broker.broker import Broker
from astrid.host.build import build_capsule
from astrid.host.bus import Message, Principal
from astrid.host.contract.topics import BROKER, DESCRIBE_REPLIES, DESCRIBE_TOPIC, TEMPLATES_REPLIES, TEMPLATES_TOPIC
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.kernel import Kernel, KernelConfig
from astrid.host.kernel.static_replies import RECORD_SUFFIX, StaticReplies, parse_answer
from astrid.host.limits import DEFAULT_LIMITS, Limits
from astrid.host.settings import CACHE_DIR_ENV
from tests.support.capsules import Built
from tests.support.paths import FIXTURES
from tests.support.wat import build_wat

pytestmark = pytest.mark.slow

PRINCIPALS = [Principal.verified(name) for name in ("alice", "bob", "carol")]

APP = """from astrid_sdk import Capsule

capsule = Capsule("rebuilt")


@capsule.resource("astrid://rebuilt/{which}", mime_type="text/plain")
def only(ctx):
    return "{which}"


WitWorld = capsule.world()
"""
MANIFEST = """[package]
name = "rebuilt"
version = "0.1.0"

[[component]]
id = "rebuilt"
file = "rebuilt.wasm"

[subscribe]
"resource.v1.request.describe" = { wit = "astrid-bus:resource@1.0.0", handler = "describe" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }

[publish]
"resource.v1.response.describe.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }
"""


@pytest.fixture
def kernels() -> Iterator[list[Kernel]]:
    made: list[Kernel] = []
    yield made
    for kernel in made:
        kernel.close()


def start(
    kernels: list[Kernel],
    *folders: Path,
    cache_dir: Path | None = None,
    static: bool = True,
    limits: Limits | None = None,
) -> Kernel:
    config = KernelConfig(capsule_paths=list(folders), cache_dir=cache_dir, static_replies=static)
    if limits is not None:
        config.limits = limits
    kernel = Kernel(config)
    report = kernel.start()
    assert all(r.ok for r in report), report
    kernels.append(kernel)
    return kernel


def private_cache(tmp_path: Path, *folders: Path) -> Path:
    """A compile cache of its own holding the shared entries of `folders`' components (sealed as they are)."""
    shared, private = CompileCache(), tmp_path / "cache"
    private.mkdir()
    for folder in folders:
        for wasm in folder.glob("*.wasm"):
            entry = shared.entry_for(wasm)
            shared.precompile(wasm)
            for path in (entry, entry.with_name(entry.name + ".seal")):
                shutil.copy2(path, private / path.name)
    return private


def describe_round(kernel: Kernel, principal: Principal, topic: str = DESCRIBE_TOPIC, replies: str = DESCRIBE_REPLIES):
    """Publish a request as the broker would and return every reply: (topic, payload, source-id, principal)."""
    broker = BROKER.participant()
    with kernel.bus.subscribe(broker, replies) as queue:
        delivery = kernel.bus.publish(broker, topic, "{}", principal)
        assert delivery.wait(10)
        got: list[Message] = queue.poll()
    return sorted((m.topic, m.payload, m.source_id, m.principal) for m in got)


def guest_calls(kernel: Kernel, name: str) -> int:
    return kernel.sandboxes.health(name).calls


def test_a_static_describe_makes_no_guest_call_and_is_what_the_capsule_publishes(
    kernels, built_introspect: Built, built_templated: Built
):
    folders = (built_introspect.folder, built_templated.folder)
    static = start(kernels, *folders)
    called = start(kernels, *folders, static=False)  # the same capsules, always called
    for principal in PRINCIPALS:
        host_answers = describe_round(static, principal)
        assert host_answers == describe_round(called, principal)  # topic, payload, source-id and principal
        assert {source for _, _, source, _ in host_answers} == {c.source_id for c in static.loaded()}
        assert all(who == principal for _, _, _, who in host_answers)
    assert static.sandboxes.stats.instances_created == 0  # no sandbox at all
    assert guest_calls(static, "introspect") == guest_calls(static, "templated") == 0
    assert static.static_replies.stats.answered == 2 * len(PRINCIPALS)
    assert called.sandboxes.stats.instances_created == 2 * len(PRINCIPALS)


def test_the_broker_lists_exactly_what_it_listed_before(kernels, built_introspect: Built, built_templated: Built):
    folders = (built_introspect.folder, built_templated.folder)
    static, called = start(kernels, *folders), start(kernels, *folders, static=False)
    for principal in PRINCIPALS:
        listed = [Broker(kernel.bus).start().listings.snapshot(principal) for kernel in (static, called)]
        assert listed[0].resources == listed[1].resources and listed[0].resources
        assert listed[0].owners == listed[1].owners
    assert static.sandboxes.stats.instances_created == 0


def test_a_dynamic_describe_is_still_called_per_principal(kernels, built_probe: Built, built_docs: Built):
    kernel = start(kernels, built_probe.folder, built_docs.folder)  # a `visible` filter; a family lister
    for capsule in kernel.loaded():
        known = kernel.static_replies.known(capsule.wasm_sha256)
        assert known is not None and known.describe is None
    for principal in PRINCIPALS:
        describe_round(kernel, principal)
    assert guest_calls(kernel, "probe") == guest_calls(kernel, "docs") == len(PRINCIPALS)
    assert kernel.sandboxes.stats.instances_created == 2 * len(PRINCIPALS)
    seen = {
        p.name: [r.uri for r in Broker(kernel.bus).start().listings.snapshot(p).resources if "probe" in r.uri]
        for p in PRINCIPALS
    }
    assert "astrid://probe/alice-only" in seen["alice"] and "astrid://probe/alice-only" not in seen["bob"]
    assert kernel.static_replies.stats.answered == 0


def test_templates_are_answered_apart_from_describe(kernels, built_templated: Built):
    # templated: no lister and no `visible` resource (describe static), one template with `visible` (dynamic).
    kernel = start(kernels, built_templated.folder)
    [capsule] = kernel.loaded()
    replies = kernel.static_replies.known(capsule.wasm_sha256)
    assert replies is not None and replies.describe is not None and replies.templates is None
    for principal in PRINCIPALS:
        [(_, payload, _, _)] = describe_round(kernel, principal, TEMPLATES_TOPIC, TEMPLATES_REPLIES)
        names = [template["name"] for template in json.loads(payload)["templates"]]
        assert ("private" in names) == (principal.name == "alice")  # its `visible` ran, per principal
    assert guest_calls(kernel, "templated") == len(PRINCIPALS)  # templates: the guest, per principal
    describe_round(kernel, PRINCIPALS[0])
    assert guest_calls(kernel, "templated") == len(PRINCIPALS)  # describe: the host


def test_anyone_not_verified_gets_nothing(kernels, built_introspect: Built):
    kernel = start(kernels, built_introspect.folder)
    for principal in (Principal.claimed("alice"), Principal.system(), Principal.verified("")):
        assert describe_round(kernel, principal) == []
    assert kernel.static_replies.stats.answered == 0
    assert kernel.sandboxes.stats.instances_created == 0
    assert Broker(kernel.bus).start().listings.listed(Principal.claimed("alice")) == ()


def test_a_static_reply_is_published_without_a_second_parse(
    kernels, monkeypatch: pytest.MonkeyPatch, built_introspect: Built, built_templated: Built
):
    """Checked at load, a static reply carries its JSON value: the bus parses only the request."""
    static = start(kernels, built_introspect.folder, built_templated.folder)
    parsed: list[str] = []
    original = json.loads

    def counted(text, *args, **kwargs):
        parsed.append(text)
        return original(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    broker = BROKER.participant()
    with static.bus.subscribe(broker, DESCRIBE_REPLIES) as queue:
        assert static.bus.publish(broker, DESCRIBE_TOPIC, "{}", PRINCIPALS[0]).wait(10)
        replies: list[Message] = queue.poll()
    assert parsed == ["{}"]  # the broker's request; neither capsule's reply
    assert len(replies) == 2
    monkeypatch.setattr(json, "loads", original)
    assert all(reply.parsed() == json.loads(reply.payload) for reply in replies)


def test_a_reply_the_manifest_does_not_allow_is_refused_as_the_guests_would_be(
    kernels, tmp_path: Path, built_introspect: Built
):
    folder = Path(shutil.copytree(built_introspect.folder, tmp_path / "introspect"))  # the same build
    manifest = (folder / "Capsule.toml").read_text()
    (folder / "Capsule.toml").write_text(manifest.replace('"resource.v1.response.describe.*"', '"unrelated.topic"'))
    static, called = start(kernels, folder), start(kernels, folder, static=False)
    assert describe_round(static, PRINCIPALS[0]) == describe_round(called, PRINCIPALS[0]) == []
    assert static.sandboxes.stats.instances_created == 0


def test_the_answer_is_kept_on_disk_and_a_warm_start_asks_no_guest(kernels, tmp_path: Path, built_introspect: Built):
    cache = private_cache(tmp_path, built_introspect.folder)
    first = start(kernels, built_introspect.folder, cache_dir=cache)
    assert (first.static_replies.stats.asked, first.static_replies.stats.from_disk) == (1, 0)
    [capsule] = first.loaded()
    record = first.static_replies.record_path(capsule.wasm_sha256)
    assert record.name.endswith(RECORD_SUFFIX) and record.with_name(record.name + ".seal").exists()
    assert record.name.startswith(CompileCache(cache).entry_path(capsule.wasm_sha256).stem)
    warm = start(kernels, built_introspect.folder, cache_dir=cache)
    assert (warm.static_replies.stats.asked, warm.static_replies.stats.from_disk) == (0, 1)
    assert describe_round(warm, PRINCIPALS[0]) == describe_round(first, PRINCIPALS[0]) != []
    assert warm.sandboxes.stats.instances_created == 0


@pytest.mark.parametrize("damage", ["altered", "unsealed", "garbage"])
def test_a_damaged_record_is_ignored_and_asked_again(kernels, tmp_path: Path, built_introspect: Built, damage: str):
    cache = private_cache(tmp_path, built_introspect.folder)
    first = start(kernels, built_introspect.folder, cache_dir=cache)
    [capsule] = first.loaded()
    record = first.static_replies.record_path(capsule.wasm_sha256)
    honest = describe_round(first, PRINCIPALS[0])
    seal = record.with_name(record.name + ".seal")
    if damage == "altered":  # a forged answer, not resealed: listing a URI the capsule never lists
        saved = json.loads(record.read_text())
        forged = json.loads(saved["answer"])
        forged["describe"]["payload"] = json.dumps({"resources": [{"uri": "astrid://forged", "name": "forged"}]})
        saved["answer"] = json.dumps(forged)
        time.sleep(0.01)
        record.write_text(json.dumps(saved))
    elif damage == "unsealed":  # rewritten (as by another process) with no seal beside it
        seal.unlink()
        record.write_bytes(record.read_bytes())
    else:
        record.write_bytes(b"\xff not json")
        first.static_replies.cache.seal.sign(record)  # sealed, but not a record
    again = start(kernels, built_introspect.folder, cache_dir=cache)
    assert again.static_replies.stats.asked == 1  # asked the build again
    assert describe_round(again, PRINCIPALS[0]) == honest
    assert "forged" not in record.read_text() and seal.exists()  # the record is written (and sealed) anew
    assert start(kernels, built_introspect.folder, cache_dir=cache).static_replies.stats.asked == 0


def test_a_rebuilt_capsule_gets_its_own_answer(kernels, tmp_path: Path):
    folder = tmp_path / "rebuilt"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST)
    (folder / "app.py").write_text(APP.replace("{which}", "first"))
    build_capsule(folder)
    kernel = start(kernels, folder)
    [(_, payload, old_source, _)] = describe_round(kernel, PRINCIPALS[0])
    assert "astrid://rebuilt/first" in payload
    (folder / "app.py").write_text(APP.replace("{which}", "second"))
    build_capsule(folder)
    kernel.reload()
    [(_, payload, new_source, _)] = describe_round(kernel, PRINCIPALS[0])
    assert "astrid://rebuilt/second" in payload and "first" not in payload
    assert new_source != old_source and new_source == kernel.loaded()[0].source_id
    assert kernel.static_replies.stats.asked == 0  # each build recorded its own answer
    assert kernel.static_replies.stats.from_disk == 2
    assert kernel.sandboxes.stats.instances_created == 0


def test_the_build_records_the_answer_and_a_start_asks_no_guest(
    kernels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built_introspect: Built
):
    folder = Path(shutil.copytree(built_introspect.folder, tmp_path / "introspect"))
    cache = private_cache(tmp_path, folder)  # the compiled entry only: no record yet
    monkeypatch.setenv(CACHE_DIR_ENV, str(cache))
    result = build_capsule(folder)  # a build-cache hit: no componentize-py, but it asks and records
    assert result.cached and result.static == ("describe",)
    kernel = start(kernels, folder, cache_dir=cache)
    [capsule] = kernel.loaded()
    record = kernel.static_replies.record_path(capsule.wasm_sha256)
    assert json.loads(record.read_text())["wasm_sha256"] == capsule.wasm_sha256
    assert (kernel.static_replies.stats.asked, kernel.static_replies.stats.from_disk) == (0, 1)
    for principal in PRINCIPALS:  # a fresh principal's list: no guest call, no sandbox
        assert describe_round(kernel, principal) != []
    assert kernel.sandboxes.stats.instances_created == 0
    written = record.stat().st_mtime_ns
    assert build_capsule(folder).static == ("describe",)  # the next build finds it: not asked, not rewritten
    assert record.stat().st_mtime_ns == written


def test_a_sealed_record_of_another_build_is_not_used(
    kernels, tmp_path: Path, built_introspect: Built, built_templated: Built
):
    cache = private_cache(tmp_path, built_introspect.folder, built_templated.folder)
    first = start(kernels, built_introspect.folder, built_templated.folder, cache_dir=cache)
    honest = describe_round(first, PRINCIPALS[0])
    records = [first.static_replies.record_path(c.wasm_sha256) for c in first.loaded()]
    sealed = [(r.read_bytes(), r.with_name(r.name + ".seal").read_bytes()) for r in records]
    # Both records and seals are this host's; swapped, each seal still matches its bytes.
    for record, (data, seal) in zip(records, sealed[::-1], strict=True):
        record.write_bytes(data)
        record.with_name(record.name + ".seal").write_bytes(seal)
    again = start(kernels, built_introspect.folder, built_templated.folder, cache_dir=cache)
    assert (again.static_replies.stats.asked, again.static_replies.stats.from_disk) == (2, 0)
    assert describe_round(again, PRINCIPALS[0]) == honest


def probe_folder(tmp_path: Path, name: str, wasm: Path) -> Path:
    """A WAT probe (not the SDK) bound on the describe topic as the SDK's capsules are."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copyfile(wasm, folder / "probe.wasm")
    (folder / "Capsule.toml").write_text(
        MANIFEST.replace('"rebuilt"', f'"{name}"').replace("rebuilt.wasm", "probe.wasm")
    )
    return folder


def test_a_component_without_the_sdk_is_asked_once_and_stays_dynamic(kernels, tmp_path: Path):
    # The probe answers any handler starting with "a" with "continue": not an answer, but a definitive one.
    wasm = build_wat(FIXTURES / "wat" / "probe.wat", tmp_path / "probe.wasm")
    folder, cache = probe_folder(tmp_path, "plain", wasm), tmp_path / "cache"
    first = start(kernels, folder, cache_dir=cache)
    [capsule] = first.loaded()
    assert first.static_replies.known(capsule.wasm_sha256) == StaticReplies()
    assert json.loads(first.static_replies.record_path(capsule.wasm_sha256).read_text())["answer"] is None
    describe_round(first, PRINCIPALS[0])
    assert guest_calls(first, "plain") == 1  # its describe handler was called
    again = start(kernels, folder, cache_dir=cache)
    assert (again.static_replies.stats.asked, again.static_replies.stats.from_disk) == (0, 1)


def test_a_question_that_fails_is_not_recorded(kernels, tmp_path: Path):
    # A probe that spins on any handler starting with "a" (astrid.static): the call times out.
    wat = (FIXTURES / "wat" / "probe.wat").read_text()
    spinning = wat.replace("(i32.const 115)) (then (loop $forever", "(i32.const 97)) (then (loop $forever")
    assert spinning != wat
    (tmp_path / "spin.wat").write_text(spinning)
    wasm = build_wat(tmp_path / "spin.wat", tmp_path / "spin.wasm")
    folder, cache = probe_folder(tmp_path, "spinner", wasm), tmp_path / "cache"
    quick = Limits(call_wall_time_s=0.2)
    first = start(kernels, folder, cache_dir=cache, limits=quick)
    [capsule] = first.loaded()  # loaded all the same, and called for its describe
    assert first.static_replies.known(capsule.wasm_sha256) == StaticReplies()
    assert not first.static_replies.record_path(capsule.wasm_sha256).exists()
    again = start(kernels, folder, cache_dir=cache, limits=quick)
    assert again.static_replies.stats.asked == 1  # asked again: a timeout may not happen next time


def answer_of(static: object = 1, kind: str = "describe", topic: str | None = None, payload: object = None) -> str:
    topic = topic if topic is not None else f"resource.v1.response.{kind}.x"
    payload = payload if payload is not None else json.dumps({"resources": []})
    return json.dumps({"static": static, kind: {"topic": topic, "payload": payload}})


@pytest.mark.parametrize(
    "answer",
    [
        None,
        "not json",
        "[]",
        '{"static": 2, "describe": null}',
        answer_of(static=True),
        answer_of(static="1"),
        answer_of(topic="resource.v1.response.read.x"),
        answer_of(topic="resource.v1.response.describe.a.b"),
        answer_of(topic="resource.v1.response.describe.UPPER"),
        answer_of(payload=json.dumps({"resources": 1})),
        answer_of(payload="nope"),
        answer_of(payload={"resources": []}),
        answer_of(payload=json.dumps({"resources": [{"uri": "", "name": "x"}]})),
        answer_of(kind="templates"),  # a describe-response on the templates topic
    ],
)
def test_an_answer_that_is_not_a_valid_reply_is_not_used(answer):
    assert parse_answer(answer, DEFAULT_LIMITS) == StaticReplies()


def test_an_over_limit_answer_is_not_used():
    resources = [{"uri": f"astrid://x/{n}", "name": str(n)} for n in range(DEFAULT_LIMITS.resources_per_describe + 1)]
    topic = "resource.v1.response.describe.x"
    too_many = json.dumps({"static": 1, "describe": {"topic": topic, "payload": json.dumps({"resources": resources})}})
    assert parse_answer(too_many, DEFAULT_LIMITS).describe is None
    big = json.dumps({"resources": [{"uri": "astrid://x/a", "name": "a", "meta": json.dumps({"k": "v" * (1 << 20)})}]})
    too_big = json.dumps({"static": 1, "describe": {"topic": topic, "payload": big}})
    assert parse_answer(too_big, DEFAULT_LIMITS).describe is None
    fine = json.dumps({"static": 1, "describe": {"topic": topic, "payload": json.dumps({"resources": resources[:3]})}})
    assert parse_answer(fine, DEFAULT_LIMITS).describe is not None
