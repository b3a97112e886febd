"""Capsule artifacts through a real OCI registry (docker-registry on loopback) and a lying one.

The lying registry is a small real HTTP server on loopback that speaks the
`/v2/` API with bytes chosen by the test: what astrid must refuse.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from astrid.host.identity import oci
from tests.support.processes import free_port, run_astrid
from tests.support.registry import Registry, registry_server


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry_server(tmp_path_factory.mktemp("oci-registry")) as served:
        yield served


@pytest.fixture(autouse=True)
def no_user_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own: the user's ~/.docker/config.json never reaches a test."""
    home = tmp_path / "user-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def one_line(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message, message


# -- references -------------------------------------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("oci://127.0.0.1:5000/notes:1.0", "127.0.0.1:5000", "notes", "1.0", None),
        (
            "oci://registry.example.com/team/sub/notes:v1_2-rc.3",
            "registry.example.com",
            "team/sub/notes",
            "v1_2-rc.3",
            None,
        ),
        (f"oci://localhost/notes@{DIGEST}", "localhost", "notes", None, DIGEST),
        ("oci://[::1]:5000/a.b__c-d/e:latest", "[::1]:5000", "a.b__c-d/e", "latest", None),
    ],
)
def test_good_references_parse(text: str, registry: str, repository: str, tag: str | None, digest: str | None) -> None:
    ref = oci.parse_ref(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert str(ref) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("127.0.0.1:5000/notes:1.0", "must start with oci://"),
        ("https://ghcr.io/notes:1.0", "must start with oci://"),
        ("oci://ghcr.io/notes", "name a tag"),
        ("oci://ghcr.io:1.0", "registry host and a repository"),
        ("oci://ghcr.io/:1.0", "not a repository path"),
        ("oci://ghcr.io/Notes:1.0", "not a repository path"),
        ("oci://ghcr.io/notes/:1.0", "not a repository path"),
        ("oci://ghcr.io/notes:1.0@" + DIGEST, "not both"),
        ("oci://ghcr.io/notes@sha256:abc", "64 lowercase hex"),
        ("oci://ghcr.io/notes@sha512:" + "ab" * 64, "64 lowercase hex"),
        ("oci://ghcr.io/notes@" + DIGEST.upper(), "64 lowercase hex"),
        ("oci://ghcr.io/notes:.hidden", "not a tag"),
        ("oci://ghcr.io/notes:" + "t" * 129, "not a tag"),
        ("oci://ghcr.io:0/notes:1", "not a port"),
        ("oci://ghcr.io:99999/notes:1", "not a port"),
        ("oci://ghcr.io:http/notes:1", "not a port"),
        ("oci://-bad-.io/notes:1", "not a registry host"),
        ("oci://user@ghcr.io/notes:1", "not a registry host"),
        ("oci://[::1/notes:1", "not a bracketed IPv6"),
        ("oci://[fe80::1%eth0]/notes:1", "not a bracketed IPv6"),
        ("oci://ghcr.io/notes:1.0\n", "not a tag"),
    ],
)
def test_bad_references_are_one_clear_line(text: str, why: str) -> None:
    with pytest.raises(oci.OciReferenceError) as refused:
        oci.parse_ref(text)
    message = str(refused.value)
    assert why in message and "e.g. oci://" in message and message.startswith("bad OCI reference")
    one_line(message)


def test_push_needs_a_tag(registry: Registry) -> None:
    with pytest.raises(oci.OciError, match="push to a tag"):
        oci.push(b"x", registry.ref(f"notes@{DIGEST}"))


# -- against the real registry ------------------------------------------------------------------------


def test_push_then_pull_by_tag_and_by_digest_give_the_same_bytes(registry: Registry, tmp_path: Path) -> None:
    artifact = tmp_path / "notes-1.0.capsule"
    data = bytes(range(256)) * 4096 + b"end"  # 1 MiB and a bit
    artifact.write_bytes(data)

    pushed = oci.push(artifact, registry.ref("team/notes:1.0"))
    assert pushed.artifact_digest == sha256(data) and pushed.size == len(data)
    assert str(pushed.ref) == registry.ref(f"team/notes@{pushed.manifest_digest}")

    by_tag = oci.pull(registry.ref("team/notes:1.0"))
    by_digest = oci.pull(str(pushed.ref))
    for pulled in (by_tag, by_digest):
        assert pulled.data == data
        assert pulled.manifest_digest == pushed.manifest_digest
        assert pulled.artifact_digest == pushed.artifact_digest
        assert pulled.ref == pushed.ref
        assert pulled.title == "notes-1.0.capsule"

    # what the registry holds is our artifact: one layer, our media types, the title
    manifest = json.loads(_registry_get(registry, f"team/notes/manifests/{pushed.manifest_digest}"))
    assert manifest["artifactType"] == oci.ARTIFACT_TYPE
    assert [layer["mediaType"] for layer in manifest["layers"]] == [oci.LAYER_MEDIA_TYPE]
    assert manifest["layers"][0]["annotations"] == {"org.opencontainers.image.title": "notes-1.0.capsule"}

    # the same bytes pushed again: the same manifest, the same pin
    again = oci.push(data, registry.ref("team/notes:1.0"), title="notes-1.0.capsule")
    assert again.manifest_digest == pushed.manifest_digest


def _registry_get(registry: Registry, path: str) -> bytes:
    import urllib.request

    request = urllib.request.Request(
        f"http://{registry.address}/v2/{path}", headers={"Accept": oci.MANIFEST_MEDIA_TYPE}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read()


def test_pulling_a_digest_the_registry_lacks_is_a_clear_error(registry: Registry) -> None:
    oci.push(b"something", registry.ref("lacks:1"))
    missing = "sha256:" + "0" * 64
    with pytest.raises(oci.OciError) as refused:
        oci.pull(registry.ref(f"lacks@{missing}"))
    message = str(refused.value)
    assert message.startswith(registry.ref(f"lacks@{missing}") + ": no manifest with this digest")
    assert "404" in message
    one_line(message)


def test_pulling_a_tag_or_repository_the_registry_lacks_is_a_clear_error(registry: Registry) -> None:
    for ref in (registry.ref("never-pushed:1.0"), registry.ref("lacks-tag:1.0")):
        with pytest.raises(oci.OciError, match="no such tag in the registry") as refused:
            oci.pull(ref)
        assert str(refused.value).startswith(ref + ": ")
        one_line(str(refused.value))


def test_a_moved_tag_leaves_the_old_digest_pinned(registry: Registry) -> None:
    first = oci.push(b"version one", registry.ref("moving:stable"))
    second = oci.push(b"version two, other bytes", registry.ref("moving:stable"))
    assert first.manifest_digest != second.manifest_digest

    assert oci.pull(str(first.ref)).data == b"version one"
    assert oci.pull(registry.ref("moving:stable")).data == b"version two, other bytes"
    assert oci.pull(registry.ref("moving:stable")).manifest_digest == second.manifest_digest


def test_an_artifact_over_the_cap_is_refused_before_it_is_read(registry: Registry) -> None:
    pushed = oci.push(b"x" * 1000, registry.ref("big:1"))
    with pytest.raises(oci.OciError, match="the artifact has 1000 bytes, more than the 100 allowed"):
        oci.pull(str(pushed.ref), max_bytes=100)
    with pytest.raises(oci.OciError, match="more than the 100 an artifact may have"):
        oci.push(b"x" * 101, registry.ref("big:2"), max_bytes=100)


def test_an_unreachable_registry_is_one_line_at_once() -> None:
    ref = f"oci://127.0.0.1:{free_port()}/notes:1.0"
    started = time.monotonic()
    with pytest.raises(oci.OciError) as refused:
        oci.pull(ref)
    assert time.monotonic() - started < 5  # no retry loop
    message = str(refused.value)
    assert message == f"{ref}: cannot reach the registry at {ref[6:].split('/')[0]} (Connection refused)"
    with pytest.raises(oci.OciError, match="cannot reach the registry"):
        oci.push(b"x", ref)


# -- credentials: a registry with htpasswd (Basic) auth -------------------------------------------------


def test_a_registry_that_wants_a_login_uses_the_docker_config(tmp_path: Path, no_user_credentials: Path) -> None:
    with registry_server(tmp_path, users={"alice": "s3cret"}) as locked:
        ref = locked.ref("private/notes:1.0")
        for attempt in (lambda: oci.push(b"secret notes", ref), lambda: oci.pull(ref)):
            with pytest.raises(oci.OciError) as refused:
                attempt()
            message = str(refused.value)
            assert message.startswith(ref + ": the registry asks for a login")
            assert f"docker login {locked.address}" in message
            one_line(message)

        wrong = base64.b64encode(b"alice:wrong").decode()
        config = no_user_credentials / ".docker" / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps({"auths": {locked.address: {"auth": wrong}}}))
        with pytest.raises(
            oci.OciError, match=r"refused access to the credentials found for it \(HTTP 401.*docker login"
        ) as refused:
            oci.push(b"secret notes", ref)
        one_line(str(refused.value))

        right = base64.b64encode(b"alice:s3cret").decode()
        config.write_text(json.dumps({"auths": {locked.address: {"auth": right}}}))
        pushed = oci.push(b"secret notes", ref)
        assert oci.pull(str(pushed.ref)).data == b"secret notes"


# -- a lying registry: a real loopback HTTP server answering /v2/ with the test's bytes ---------------------


class LyingRegistry:
    """Answers `/v2/...` from `routes` (path -> status, headers, body); everything else 404.

    With `challenge` set, every request but the token realm's gets 401 and that `Www-Authenticate`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {"/v2/": (200, {}, b"{}")}
        self.requests: list[str] = []
        self.challenge: str | None = None
        owner, routes, seen = self, self.routes, self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                if owner.challenge and not self.path.startswith("/token"):
                    status, headers = 401, {"Www-Authenticate": owner.challenge}
                    body = b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}'
                else:
                    status, headers, body = routes.get(self.path, (404, {}, b'{"errors":[{"code":"NOT_FOUND"}]}'))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_POST = do_PUT = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.address = f"{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LyingRegistry:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def ref(self, rest: str) -> str:
        return f"oci://{self.address}/{rest}"

    def serve_manifest(self, repository: str, reference: str, body: bytes, **headers: str) -> None:
        self.routes[f"/v2/{repository}/manifests/{reference}"] = (
            200,
            {"Content-Type": oci.MANIFEST_MEDIA_TYPE, **headers},
            body,
        )

    def serve_blob(self, repository: str, digest: str, body: bytes) -> None:
        self.routes[f"/v2/{repository}/blobs/{digest}"] = (200, {"Content-Type": "application/octet-stream"}, body)


def capsule_manifest(blob: bytes, **changes: object) -> bytes:
    manifest: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": oci.MANIFEST_MEDIA_TYPE,
        "artifactType": oci.ARTIFACT_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256(b"{}"), "size": 2},
        "layers": [{"mediaType": oci.LAYER_MEDIA_TYPE, "digest": sha256(blob), "size": len(blob)}],
    }
    manifest.update(changes)
    return json.dumps(manifest).encode()


def test_a_manifest_that_does_not_hash_to_the_digest_asked_is_refused() -> None:
    good, evil = b"the real capsule", b"a capsule the registry prefers"
    pinned = sha256(capsule_manifest(good))
    with LyingRegistry() as lying:
        # the registry answers the pinned digest with another, well-formed capsule manifest (and says it matches)
        lying.serve_manifest("notes", pinned, capsule_manifest(evil), **{"Docker-Content-Digest": pinned})
        lying.serve_blob("notes", sha256(evil), evil)
        with pytest.raises(oci.OciError) as refused:
            oci.pull(lying.ref(f"notes@{pinned}"))
        message = str(refused.value)
        assert "served a manifest whose sha256 is" in message and "not the digest asked: refused" in message
        one_line(message)
        assert not any("/blobs/" in path for path in lying.requests)  # refused before any blob is fetched


def test_artifact_bytes_that_do_not_hash_to_the_layer_digest_are_refused() -> None:
    good = b"the real capsule"
    manifest = capsule_manifest(good)
    with LyingRegistry() as lying:
        lying.serve_manifest("notes", sha256(manifest), manifest)
        lying.serve_blob("notes", sha256(good), b"the evil capsule")  # same length, other bytes
        with pytest.raises(oci.OciError, match="do not match the manifest") as refused:
            oci.pull(lying.ref(f"notes@{sha256(manifest)}"))
        one_line(str(refused.value))

        lying.serve_blob("notes", sha256(good), good + b" and more")  # longer than the manifest says
        with pytest.raises(oci.OciError, match=f"more than {len(good)} bytes"):
            oci.pull(lying.ref(f"notes@{sha256(manifest)}"))

        lying.serve_blob("notes", sha256(good), good)  # the honest answer passes
        assert oci.pull(lying.ref(f"notes@{sha256(manifest)}")).data == good


def test_a_tag_whose_manifest_contradicts_the_registry_digest_header_is_refused() -> None:
    blob = b"capsule"
    manifest = capsule_manifest(blob)
    with LyingRegistry() as lying:
        lying.serve_manifest("notes", "1.0", manifest, **{"Docker-Content-Digest": "sha256:" + "1" * 64})
        lying.serve_blob("notes", sha256(blob), blob)
        with pytest.raises(oci.OciError, match="its bytes hash to"):
            oci.pull(lying.ref("notes:1.0"))
        lying.serve_manifest("notes", "1.0", manifest, **{"Docker-Content-Digest": sha256(manifest)})
        assert oci.pull(lying.ref("notes:1.0")).manifest_digest == sha256(manifest)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"layers": []}, "0 layers"),
        (
            {
                "layers": [
                    {"mediaType": oci.LAYER_MEDIA_TYPE, "digest": sha256(b"a"), "size": 1},
                    {"mediaType": oci.LAYER_MEDIA_TYPE, "digest": sha256(b"b"), "size": 1},
                ]
            },
            "2 layers",
        ),
        (
            {"layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha256(b"a"), "size": 1}]},
            "layer's media type",
        ),
        ({"layers": [{"mediaType": oci.LAYER_MEDIA_TYPE, "digest": "md5:abc", "size": 1}]}, "layer's digest"),
        ({"layers": [{"mediaType": oci.LAYER_MEDIA_TYPE, "digest": sha256(b"a"), "size": -1}]}, "layer's size"),
        ({"artifactType": "application/vnd.example.other"}, "artifactType"),
        ({"mediaType": "application/vnd.oci.image.index.v1+json"}, "media type"),
        ({"schemaVersion": 1}, "schemaVersion 2"),
    ],
)
def test_a_manifest_that_is_not_a_capsule_artifact_is_refused(changes: dict, why: str) -> None:
    manifest = capsule_manifest(b"a", **changes)
    with LyingRegistry() as lying:
        lying.serve_manifest("notes", "1.0", manifest)
        with pytest.raises(oci.OciError, match="not an astrid capsule artifact") as refused:
            oci.pull(lying.ref("notes:1.0"))
        assert why in str(refused.value)
        one_line(str(refused.value))


def test_a_huge_manifest_is_not_read_to_the_end() -> None:
    with LyingRegistry() as lying:
        lying.serve_manifest("notes", "1.0", b" " * (oci.MAX_MANIFEST_BYTES + 1))
        with pytest.raises(oci.OciError, match="more than 4194304 bytes for a manifest"):
            oci.pull(lying.ref("notes:1.0"))


def test_a_huge_answer_to_the_registry_check_is_not_read_to_the_end() -> None:
    with LyingRegistry() as lying:
        lying.routes["/v2/"] = (200, {}, b" " * (oci.MAX_ANSWER_BYTES + 1))
        with pytest.raises(oci.OciError, match=r"more than 1048576 bytes for the answer to GET /v2/: refused"):
            oci.pull(lying.ref("notes:1.0"))


def test_a_token_registry_that_refuses_every_token_is_one_line() -> None:
    with LyingRegistry() as lying:
        lying.challenge = f'Bearer realm="http://{lying.address}/token",service="lying",scope="repository:notes:pull"'
        for attempt in (lambda: oci.pull(lying.ref("notes:1.0")), lambda: oci.push(b"x", lying.ref("notes:1.0"))):
            with pytest.raises(oci.OciError) as refused:
                attempt()
            message = str(refused.value)
            assert message.startswith(lying.ref("notes:1.0") + ": the registry asks for credentials and none worked")
            assert "docker login" in message
            one_line(message)
        assert any(path.startswith("/token") for path in lying.requests)  # oras did ask its token realm


def test_a_registry_that_is_not_one_is_named() -> None:
    with LyingRegistry() as lying:
        lying.routes["/v2/"] = (404, {}, b"not here")
        with pytest.raises(oci.OciError, match=r"/v2/ answered HTTP 404: not an OCI registry"):
            oci.pull(lying.ref("notes:1.0"))


# -- plain HTTP only for loopback, unless asked (loudly) -------------------------------------------------


def _non_loopback_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = probe.getsockname()[0]
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address to serve on")
    return address


def test_a_registry_off_loopback_gets_https_unless_plain_http_is_asked(caplog: pytest.LogCaptureFixture) -> None:
    blob = b"capsule"
    manifest = capsule_manifest(blob)
    with LyingRegistry(_non_loopback_address()) as plain:
        plain.serve_manifest("notes", "1.0", manifest)
        plain.serve_blob("notes", sha256(blob), blob)
        with pytest.raises(oci.OciError, match="TLS with .* failed .*use --plain-http") as refused:
            oci.pull(plain.ref("notes:1.0"))
        one_line(str(refused.value))
        assert plain.requests == []  # nothing went out in clear

        with caplog.at_level(logging.WARNING, logger="astrid.host.identity.oci"):
            assert oci.pull(plain.ref("notes:1.0"), plain_http=True).data == blob
        assert any("PLAIN HTTP" in record.getMessage() for record in caplog.records)


# -- the CLI -------------------------------------------------------------------------------------------


def test_cli_push_prints_the_reference_by_digest(registry: Registry, tmp_path: Path) -> None:
    artifact = tmp_path / "notes-2.0.capsule"
    artifact.write_bytes(b"a capsule artifact")
    done = run_astrid("capsule", "push", str(artifact), registry.ref("cli/notes:2.0"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    pinned = done.stdout.strip()
    assert done.stdout == pinned + "\n"
    assert pinned.startswith(registry.ref("cli/notes@sha256:")) and len(pinned.split("@sha256:")[1]) == 64
    assert "pushing" in done.stderr and "pin it by digest" in done.stderr
    assert oci.pull(pinned).data == b"a capsule artifact"


def test_cli_push_errors_are_one_line(tmp_path: Path) -> None:
    artifact = tmp_path / "notes-2.0.capsule"
    artifact.write_bytes(b"a capsule artifact")
    unreachable = f"oci://127.0.0.1:{free_port()}/notes:2.0"
    with LyingRegistry() as lying:
        lying.challenge = f'Bearer realm="http://{lying.address}/token",service="lying"'
        cases = (
            (unreachable, f"error: {unreachable}: cannot reach the registry"),
            ("oci://127.0.0.1/notes", "error: bad OCI reference 'oci://127.0.0.1/notes': name a tag"),
            (lying.ref("notes:2.0"), f"error: {lying.ref('notes:2.0')}: the registry asks for credentials"),
        )
        results = [(run_astrid("capsule", "push", str(artifact), ref, cwd=tmp_path), want) for ref, want in cases]
    for done, expected in results:
        assert done.returncode == 1
        assert done.stdout == ""
        errors = [line for line in done.stderr.splitlines() if not line.startswith("astrid: pushing ")]
        assert len(errors) == 1 and errors[0].startswith(expected), done.stderr
