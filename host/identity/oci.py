"""Capsule artifacts in OCI registries: push one, pull one back and check every byte.

A capsule artifact (`NAME-VERSION.capsule`, opaque bytes here) travels as an
OCI artifact: one manifest (`artifactType` `application/vnd.astrid.capsule.v1`,
the empty config `{}`) with exactly one layer, the artifact itself, of media
type `application/vnd.astrid.capsule.v1+tar` and an
`org.opencontainers.image.title` annotation (its file name).

References are strict: `oci://HOST[:PORT]/REPO[/MORE]:TAG` or
`oci://HOST[:PORT]/REPO@sha256:<64 hex>` (no implied `latest`, no tag and
digest together). Pin by digest: a tag can be moved by whoever can push.

What is checked on pull, none of it trusting the registry:

- a pull by digest gets the manifest whose sha256 is that digest, else it is
  refused; a pull by tag gets a manifest whose sha256 agrees with the
  registry's `Docker-Content-Digest` header when it sends one;
- the manifest is an OCI image manifest with exactly one layer of our media
  type (and our `artifactType` if it names one);
- the layer's bytes hash to the digest and size the manifest gives;
- nothing larger than the caps is read (4 MiB for a manifest, `max_bytes`,
  256 MiB by default, for the artifact, 1 MiB for any other answer: the
  `/v2/` check, a token, an error): a registry cannot fill memory;
- nothing takes longer than the transfer's deadline, and no body arrives
  slower than its minimum rate (`oci_deadline.py`): a registry cannot hold a
  command forever, whether it trickles its headers or its body or never
  answers at all.

Transport: a registry on loopback (`localhost`, `127.0.0.0/8`, `::1`) is
spoken to over plain HTTP, as other OCI tools do; any other over HTTPS
unless `plain_http=True`, which logs a warning (then only the digests, and
the artifact's signature, protect what arrives).

The registry protocol is the maintained `oras` library's
(`oras.provider.Registry`): its requests session, its credentials (the
docker config `~/.docker/config.json`: `auths`, `credsStore`,
`credHelpers`, as `docker login` or `oras login` write it; a token
registry's anonymous tokens), its URL building and blob upload. What is
added over its session: one try per request with a timeout (oras retries
every failure five times, sleeping up to 83 s), the whole operation under
one deadline and minimum rate, every body read capped, a manifest built with
`artifactType` and put as exact bytes (so its digest is ours, not the
registry's word), reading with size caps and the digest checks above,
Basic-auth registries (picked from the `/v2/` challenge), and errors as
one line naming the reference and the cause.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.cookiejar import DefaultCookiePolicy
from pathlib import Path
from typing import Any

import oras.container  # type: ignore[import-untyped]
import oras.provider  # type: ignore[import-untyped]
import requests
import urllib3

from astrid.host.errors import IdentityError
from astrid.host.identity.oci_deadline import TooSlow, Transfer, TransferLimits, WatchedAdapter
from astrid.host.tuning import IDENTITY_TUNING

log = logging.getLogger(__name__)


class _OrasOnlyWhenDebugging(logging.Filter):
    """oras logs its own view of a failure (ERROR lines) on top of the one line we raise: only at -vv."""

    def filter(self, record: logging.LogRecord) -> bool:
        return log.isEnabledFor(logging.DEBUG)


logging.getLogger("oras.logger").addFilter(_OrasOnlyWhenDebugging())

SCHEME = "oci://"
ARTIFACT_TYPE = "application/vnd.astrid.capsule.v1"
LAYER_MEDIA_TYPE = "application/vnd.astrid.capsule.v1+tar"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
# OCI 1.1's empty descriptor: the config of an artifact that needs none.
EMPTY_CONFIG = b"{}"
EMPTY_CONFIG_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
TITLE_ANNOTATION = "org.opencontainers.image.title"

MAX_ARTIFACT_BYTES = 256 * 1024 * 1024
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # what containerd and distribution allow a manifest
MAX_ANSWER_BYTES = 1024 * 1024  # any other body: the /v2/ check, a token, an error, an upload's answer
_READ_SIZE = 1024 * 1024

EXAMPLES = "e.g. oci://registry.example.com/team/notes:1.0 or oci://127.0.0.1:5000/notes@sha256:<64 hex>"

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# the OCI distribution spec's repository name and tag grammars
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
_PORT = re.compile(r"[0-9]{1,5}")


class OciError(IdentityError):
    """A push or pull that failed or was refused; the message is one line naming the reference and the cause."""


class OciReferenceError(OciError, ValueError):
    """A string that is not an `oci://` reference astrid accepts."""


# -- references ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OciRef:
    """`oci://HOST[:PORT]/REPOSITORY:TAG` or `oci://HOST[:PORT]/REPOSITORY@sha256:...`: exactly one of tag, digest."""

    host: str  # a DNS name, an IPv4 address, or an IPv6 address (without brackets)
    port: int | None
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def registry(self) -> str:
        """`HOST[:PORT]` as it goes in a URL (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def by_digest(self, digest: str) -> OciRef:
        """The same repository, pinned to `digest` (the tag dropped)."""
        return replace(self, tag=None, digest=digest)

    def __str__(self) -> str:
        where = f"{SCHEME}{self.registry}/{self.repository}"
        return f"{where}@{self.digest}" if self.digest else f"{where}:{self.tag}"


def _bad_reference(text: str, why: str) -> OciReferenceError:
    return OciReferenceError(f"bad OCI reference {text!r}: {why} ({EXAMPLES})")


def _parse_host(text: str, authority: str) -> tuple[str, int | None]:
    if authority.startswith("["):
        host, bracket, rest = authority[1:].partition("]")
        try:
            if not bracket or "%" in host:
                raise ValueError(host)
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _bad_reference(text, f"{authority!r} is not a bracketed IPv6 address") from None
    else:
        host, colon, port_text = authority.partition(":")
        rest = colon + port_text
        if not _HOSTNAME.fullmatch(host):
            raise _bad_reference(text, f"{host!r} is not a registry host name or address")
    if not rest:
        return host, None
    if not rest.startswith(":") or not _PORT.fullmatch(rest[1:]) or not 0 < int(rest[1:]) < 65536:
        raise _bad_reference(text, f"{rest[1:]!r} is not a port number (1-65535)")
    return host, int(rest[1:])


def parse_ref(text: str) -> OciRef:
    """Parse a strict `oci://` reference; `OciReferenceError` (one line, with an example) when it is not one."""
    if not text.startswith(SCHEME):
        raise _bad_reference(text, f"it must start with {SCHEME}")
    body = text[len(SCHEME) :]
    authority, slash, path = body.partition("/")
    if not authority or not slash or not path:
        raise _bad_reference(text, "it needs a registry host and a repository path")
    host, port = _parse_host(text, authority)
    tag = digest = None
    if "@" in path:
        path, _, digest = path.partition("@")
        if ":" in path:
            raise _bad_reference(text, "give a tag or a digest, not both")
        if not _DIGEST.fullmatch(digest):
            raise _bad_reference(text, f"{digest!r} is not sha256: followed by 64 lowercase hex digits")
    elif ":" in path:
        path, _, tag = path.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise _bad_reference(text, f"{tag!r} is not a tag (letters, digits, . _ -; at most 128)")
    else:
        raise _bad_reference(text, "name a tag (:TAG) or a digest (@sha256:...); there is no implied latest")
    if not _REPOSITORY.fullmatch(path) or len(path) > 255:
        raise _bad_reference(
            text, f"{path!r} is not a repository path (lowercase letters and digits, . _ - inside, / between parts)"
        )
    return OciRef(host=host, port=port, repository=path, tag=tag, digest=digest)


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PushResult:
    manifest_digest: str  # sha256:... of the manifest: what `ref` pins
    artifact_digest: str  # sha256:... of the artifact bytes (the one layer)
    ref: OciRef  # the pushed reference, pinned by manifest digest
    size: int  # the artifact's length in bytes


@dataclass(frozen=True)
class Pulled:
    data: bytes  # the artifact, verified against the manifest's layer digest and size
    manifest_digest: str  # sha256:... of the manifest bytes received (equal to the digest asked, for a by-digest ref)
    artifact_digest: str  # sha256:... of `data`
    ref: OciRef  # the reference pulled, pinned by manifest digest
    title: str | None = None  # the layer's title annotation when it is a plain file name (informational)


# -- the client over oras -------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _AuthFailed(Exception):
    """oras could not answer the registry's request for credentials."""


class _Session(requests.Session):
    """oras's session inside one `Transfer`: every request timed out (oras sets no timeout), its sockets
    watched, and every body read capped (requests would read one it was not asked to stream whole)."""

    def __init__(self, ref: OciRef, transfer: Transfer) -> None:
        super().__init__()
        self.ref, self.transfer = ref, transfer
        for prefix in ("https://", "http://"):
            self.mount(prefix, WatchedAdapter())

    def request(self, method, url, *args, stream=False, **kwargs):
        tuning = IDENTITY_TUNING
        kwargs["timeout"] = self.transfer.timeouts(tuning.oci_connect_timeout_s, tuning.oci_read_timeout_s)
        self.transfer.requesting(method, url)
        response = super().request(method, url, *args, stream=True, **kwargs)
        self.transfer.check()  # headers cut short by the watchdog can still parse as an answer
        if not stream:
            what = f"the answer to {self.transfer.request}"
            body = _read_capped(response, MAX_ANSWER_BYTES, self.ref, what, self.transfer)
            response._content, response._content_consumed = body, True
        return response


# oras wraps Registry.do_request in `decorator.retry()`: five tries, sleeping 3 s to 83 s between
# them, on every failure (a dead registry would hold a command for two minutes, a 500 too).
_DO_REQUEST_ONCE = getattr(oras.provider.Registry.do_request, "__wrapped__", oras.provider.Registry.do_request)


class _Client(oras.provider.Registry):
    def __init__(self, ref: OciRef, transfer: Transfer, *, plain_http: bool, auth_backend: str) -> None:
        super().__init__(hostname=ref.registry, insecure=plain_http, auth_backend=auth_backend)
        session = _Session(ref, transfer)
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # as oras does
        self.session = session
        self.auth.session = session
        self.container = oras.container.Container(ref.repository, registry=ref.registry)
        # oras's parser splits "namespace/name" and guesses the registry; ours already did
        self.container.registry, self.container.namespace = ref.registry, None
        self.container.repository, self.container.tag, self.container.digest = ref.repository, ref.tag, ref.digest

    def do_request(self, url, method="GET", data=None, headers=None, json=None, stream=False):
        try:
            return _DO_REQUEST_ONCE(self, url, method, data, headers, json, stream)
        except requests.RequestException:
            raise
        except ValueError as exc:  # raised by oras's auth flow only ("Cannot respond to request for authentication.")
            raise _AuthFailed(str(exc)) from exc

    def url(self, path: str) -> str:
        return f"{self.prefix}://{self.container.registry}/v2/{self.container.repository}/{path}"


def _connect(ref: OciRef, plain_http: bool, transfer: Transfer) -> _Client:
    """A client for `ref`'s registry, with the credentials oras finds for it, after one `GET /v2/`."""
    insecure = plain_http or ref.is_loopback
    if plain_http and not ref.is_loopback:
        log.warning(
            "PLAIN HTTP to %s (--plain-http): anyone on the network path can read and change this traffic; "
            "only digests and signatures protect what arrives",
            ref.registry,
        )
    client = _Client(ref, transfer, plain_http=insecure, auth_backend="token")
    ping = client.session.get(f"{client.prefix}://{ref.registry}/v2/", allow_redirects=False)
    challenge = ping.headers.get("Www-Authenticate", "")
    if ping.status_code == 401 and challenge.lower().startswith("basic"):
        client = _Client(ref, transfer, plain_http=insecure, auth_backend="basic")
        client.auth.load_configs(client.container)
        if not getattr(client.auth, "_basic_auth", None):
            raise OciError(f"{ref}: the registry asks for a login: {_LOGIN_HINT.format(registry=ref.registry)}")
        # Basic credentials are checked once here, not found wrong halfway through an upload
        checked = client.do_request(f"{client.prefix}://{ref.registry}/v2/")
        if checked.status_code != 200:
            raise _http_error(ref, checked, "the credentials found for it")
    elif ping.status_code not in (200, 401):
        moved = ping.headers.get("Location")
        where = f" (a redirect to {moved[:200]})" if moved and 300 <= ping.status_code < 400 else ""
        raise OciError(
            f"{ref}: {client.prefix}://{ref.registry}/v2/ answered HTTP {ping.status_code}{where}: not an OCI registry?"
        )
    else:
        client.auth.load_configs(client.container)
    return client


_LOGIN_HINT = (
    "log in with `docker login {registry}` or `oras login {registry}` "
    "(astrid reads their credentials from ~/.docker/config.json)"
)


def _registry_says(response: requests.Response) -> str:
    """The registry's own error codes and messages (the OCI error body, its first 64 KiB), when it sent any."""
    body = b""
    try:
        with response:
            for chunk in response.iter_content(chunk_size=8192):
                body += chunk
                if len(body) >= 65536:
                    break
        errors = json.loads(body).get("errors", [])
        said = [f"{e.get('code', '?')}: {e.get('message', '')}".strip() for e in errors if isinstance(e, dict)]
    except Exception:  # a body that is not the OCI error JSON (or not there): the status line says enough
        return ""
    return "; ".join(said)[:300]


def _http_error(ref: OciRef, response: requests.Response, what: str, missing: str | None = None) -> OciError:
    """`what` the request was for; `missing`: what a 404 means, in a few words."""
    status = response.status_code
    said = _registry_says(response)
    detail = f", {said}" if said else ""
    if status in (401, 403):
        return OciError(
            f"{ref}: the registry refused access to {what} (HTTP {status}{detail}): "
            + _LOGIN_HINT.format(registry=ref.registry)
        )
    if status == 404:
        return OciError(f"{ref}: {missing or what + ' not found'} (HTTP 404{detail})")
    return OciError(f"{ref}: the registry answered HTTP {status} for {what}{detail}")


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"()\]]+)")


@contextmanager
def _transfer(ref: OciRef, verb: str) -> Iterator[Transfer]:
    """One pull or push of `ref` under its deadline and minimum rate; what fails in it, one `OciError` line."""
    try:
        limits = TransferLimits.from_env()
    except ValueError as exc:
        raise OciError(f"{ref}: {exc}") from None
    with Transfer(limits, verb) as transfer, _one_line_errors(ref, transfer):
        yield transfer


@contextmanager
def _one_line_errors(ref: OciRef, transfer: Transfer) -> Iterator[None]:
    """Turn what requests, urllib3 and oras raise into one `OciError` line naming the reference and the cause."""
    try:
        yield
    except Exception as exc:
        why = transfer.failed()
        if why is not None:  # whatever a cut socket (or the deadline's timeout) made fail, the cause is the limit
            raise OciError(f"{ref}: {why}") from None
        one_line = _as_one_line(ref, exc)
        if one_line is exc:
            raise
        raise one_line from None


def _as_one_line(ref: OciRef, exc: Exception) -> Exception:
    """The `OciError` for what a request raised (`exc` itself when it is one already, or not a transfer's)."""
    if isinstance(exc, TooSlow):
        return OciError(f"{ref}: {exc}")
    if isinstance(exc, _AuthFailed):
        return OciError(
            f"{ref}: the registry asks for credentials and none worked ({exc}): "
            + _LOGIN_HINT.format(registry=ref.registry)
        )
    if isinstance(exc, requests.exceptions.SSLError):
        return OciError(
            f"{ref}: TLS with {ref.registry} failed ({_short(exc)}); "
            "for a registry that only speaks plain HTTP, use --plain-http"
        )
    if isinstance(exc, requests.exceptions.Timeout | urllib3.exceptions.TimeoutError):
        return OciError(f"{ref}: the registry at {ref.registry} did not answer in time")
    if isinstance(exc, requests.exceptions.ConnectionError):
        return OciError(f"{ref}: cannot reach the registry at {ref.registry} ({_short(exc)})")
    if isinstance(exc, requests.RequestException | urllib3.exceptions.HTTPError):
        # urllib3's own: a body read as it arrives (`_read_capped`) raises them unwrapped
        return OciError(f"{ref}: talking to the registry at {ref.registry} failed ({_short(exc)})")
    return exc


def _short(exc: BaseException) -> str:
    text = str(exc)
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    return text if len(text) <= 200 else text[:200] + "..."


def _read_capped(response: requests.Response, cap: int, ref: OciRef, what: str, transfer: Transfer) -> bytes:
    """The body of a streamed response, refused as soon as it passes `cap` bytes.

    It is read as it arrives (`read1`: what one socket read gave) so that `transfer` counts
    every byte towards its minimum rate; a plain `read` would wait for a whole chunk."""
    read = getattr(response.raw, "read1", None) or response.raw.read  # read1: urllib3 2.3 and later
    chunks: list[bytes] = []
    total = 0
    with response, transfer.receiving():
        while chunk := read(_READ_SIZE, decode_content=True):
            total += len(chunk)
            if total > cap:
                raise OciError(f"{ref}: the registry sent more than {cap} bytes for {what}: refused")
            transfer.received(len(chunk))
            chunks.append(chunk)
    transfer.check()  # a body whose socket was cut can end like a short one
    return b"".join(chunks)


def _safe_title(title: object) -> str | None:
    """A title annotation that is one plain file name, else None."""
    if not isinstance(title, str) or not title or len(title) > 255 or title in (".", ".."):
        return None
    if any(c in title for c in "/\\\0") or any(ord(c) < 32 for c in title):
        return None
    return title


# -- push ----------------------------------------------------------------------------------------


def _artifact_bytes(data: bytes | os.PathLike[str], max_bytes: int) -> bytes:
    if isinstance(data, bytes):
        blob = data
    else:
        path = Path(data)
        try:
            size = path.stat().st_size
            if size > max_bytes:
                raise OciError(f"{path}: {size} bytes, more than the {max_bytes} an artifact may have")
            blob = path.read_bytes()
        except OSError as exc:
            raise OciError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(blob) > max_bytes:
        raise OciError(f"the artifact has {len(blob)} bytes, more than the {max_bytes} an artifact may have")
    return blob


def _manifest(layer: dict[str, Any]) -> bytes:
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": EMPTY_CONFIG_MEDIA_TYPE, "digest": _sha256(EMPTY_CONFIG), "size": len(EMPTY_CONFIG)},
        "layers": [layer],
    }
    return json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()


def push(
    data: bytes | os.PathLike[str],
    ref: str | OciRef,
    *,
    plain_http: bool = False,
    title: str | None = None,
    max_bytes: int = MAX_ARTIFACT_BYTES,
) -> PushResult:
    """Push the artifact `data` (bytes, or a file's path) to the tag `ref` as one OCI layer.

    `title` (the layer's file-name annotation) defaults to the file's name, or
    `REPO-TAG.capsule` for bytes. The result pins the push by manifest digest,
    computed here from the bytes sent (a registry that reports another digest
    is refused).
    """
    target = ref if isinstance(ref, OciRef) else parse_ref(ref)
    if target.tag is None:
        raise OciError(f"{target}: push to a tag (oci://HOST/REPO:TAG); the digest comes from what is pushed")
    blob = _artifact_bytes(data, max_bytes)
    if title is None:
        default = f"{target.repository.rsplit('/', 1)[-1]}-{target.tag}.capsule"
        title = default if isinstance(data, bytes) else Path(data).name
    if _safe_title(title) is None:
        raise OciError(f"title {title!r} must be a plain file name")
    layer = {
        "mediaType": LAYER_MEDIA_TYPE,
        "digest": _sha256(blob),
        "size": len(blob),
        "annotations": {TITLE_ANNOTATION: title},
    }
    raw_manifest = _manifest(layer)
    manifest_digest = _sha256(raw_manifest)
    with _transfer(target, "push") as transfer, tempfile.TemporaryDirectory(prefix="astrid-oci-") as scratch:
        transfer.allow(len(blob))
        client = _connect(target, plain_http, transfer)
        # oras uploads from files: the artifact and the empty config go through a private scratch folder
        for name, content, descriptor in (
            ("artifact", blob, layer),
            ("config", EMPTY_CONFIG, {"digest": _sha256(EMPTY_CONFIG), "size": len(EMPTY_CONFIG)}),
        ):
            path = Path(scratch) / name
            path.write_bytes(content)
            try:
                uploaded = client.upload_blob(str(path), client.container, descriptor)
            except ValueError as exc:  # oras: the registry gave no upload session
                raise OciError(
                    f"{target}: the registry refused to upload {descriptor['digest']} ({_short(exc)})"
                ) from None
            if uploaded.status_code not in (200, 201, 202):
                raise _http_error(target, uploaded, f"the upload of {name} {descriptor['digest']}")
        put = client.do_request(
            client.url(f"manifests/{target.tag}"),
            "PUT",
            data=raw_manifest,
            headers={"Content-Type": MANIFEST_MEDIA_TYPE},
        )
        if put.status_code not in (200, 201):
            raise _http_error(target, put, f"the manifest for tag {target.tag!r}")
        stored = put.headers.get("Docker-Content-Digest")
        if stored and stored != manifest_digest:
            raise OciError(f"{target}: the registry stored the manifest as {stored}, not {manifest_digest}: refused")
    log.info("pushed %s (%d bytes) to %s", layer["digest"], len(blob), target)
    return PushResult(manifest_digest, str(layer["digest"]), target.by_digest(manifest_digest), len(blob))


# -- pull ----------------------------------------------------------------------------------------


def _check_manifest(ref: OciRef, raw: bytes, content_type: str, max_bytes: int) -> dict[str, Any]:
    """The one layer of a capsule manifest; `OciError` when the manifest is anything else."""

    def refuse(why: str) -> OciError:
        return OciError(f"{ref}: not an astrid capsule artifact: {why}")

    try:
        manifest = json.loads(raw)
    except ValueError:
        raise refuse("the manifest is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("schemaVersion") != 2:
        raise refuse("the manifest is not an OCI manifest (schemaVersion 2)")
    media_type = manifest.get("mediaType", content_type.split(";")[0].strip())
    if media_type != MANIFEST_MEDIA_TYPE:
        raise refuse(f"the manifest's media type is {media_type!r}, not {MANIFEST_MEDIA_TYPE}")
    artifact_type = manifest.get("artifactType")
    if artifact_type is not None and artifact_type != ARTIFACT_TYPE:
        raise refuse(f"its artifactType is {artifact_type!r}")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict):
        count = len(layers) if isinstance(layers, list) else 0
        raise refuse(f"it has {count} layers, not exactly one")
    layer = layers[0]
    if layer.get("mediaType") != LAYER_MEDIA_TYPE:
        raise refuse(f"its layer's media type is {layer.get('mediaType')!r}, not {LAYER_MEDIA_TYPE}")
    digest, size = layer.get("digest"), layer.get("size")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise refuse(f"its layer's digest {digest!r} is not sha256: and 64 lowercase hex digits")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise refuse(f"its layer's size {size!r} is not a byte count")
    if size > max_bytes:
        raise OciError(f"{ref}: the artifact has {size} bytes, more than the {max_bytes} allowed: refused")
    return layer


def pull(ref: str | OciRef, *, plain_http: bool = False, max_bytes: int = MAX_ARTIFACT_BYTES) -> Pulled:
    """Fetch the artifact at `ref` into memory, verified (see the module docstring); `OciError` otherwise."""
    target = ref if isinstance(ref, OciRef) else parse_ref(ref)
    with _transfer(target, "pull") as transfer:
        client = _connect(target, plain_http, transfer)
        reference = target.digest or target.tag
        missing = "no manifest with this digest in the registry" if target.digest else "no such tag in the registry"
        got = client.do_request(
            client.url(f"manifests/{reference}"), "GET", headers={"Accept": MANIFEST_MEDIA_TYPE}, stream=True
        )
        if got.status_code != 200:
            raise _http_error(target, got, "the manifest", missing)
        raw = _read_capped(got, MAX_MANIFEST_BYTES, target, "a manifest", transfer)
        manifest_digest = _sha256(raw)
        if target.digest is not None and manifest_digest != target.digest:
            raise OciError(
                f"{target}: the registry served a manifest whose sha256 is {manifest_digest}, "
                "not the digest asked: refused"
            )
        claimed = got.headers.get("Docker-Content-Digest")
        if claimed and claimed != manifest_digest:
            raise OciError(
                f"{target}: the registry says the manifest is {claimed}, "
                f"but its bytes hash to {manifest_digest}: refused"
            )
        layer = _check_manifest(target, raw, got.headers.get("Content-Type", ""), max_bytes)
        transfer.allow(layer["size"])
        blob = client.get_blob(client.container, layer["digest"], stream=True)
        if blob.status_code != 200:
            raise _http_error(
                target, blob, f"the artifact blob {layer['digest']}", "the manifest's artifact blob is missing"
            )
        data = _read_capped(
            blob, layer["size"], target, f"the artifact blob {layer['digest']} (its manifest size)", transfer
        )
    if len(data) != layer["size"] or _sha256(data) != layer["digest"]:
        raise OciError(
            f"{target}: the artifact bytes from the registry ({len(data)} bytes, {_sha256(data)}) do not match "
            f"the manifest ({layer['size']} bytes, {layer['digest']}): refused"
        )
    annotations = layer.get("annotations")
    title = _safe_title(annotations.get(TITLE_ANNOTATION)) if isinstance(annotations, dict) else None
    return Pulled(data, manifest_digest, layer["digest"], target.by_digest(manifest_digest), title)
