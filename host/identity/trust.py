"""Whom the operator trusts to publish capsules, and which URI namespaces each publisher owns: the trust file.

`astrid trust add PUBKEY --publisher NAME` trusts a public key as a named
publisher; only capsules signed by a trusted key install or load (unless the
operator allows unsigned ones). A publisher may hold several keys (a new key
beside an old one, for rotation: `--another-key`); one key belongs to one
publisher.

Namespaces are bound on first use: the first trusted publisher to install a
capsule whose `[package] namespaces` claims `astrid://notes/` owns that prefix
from then on, for all its keys. Another publisher's capsule claiming the same
prefix, one inside it (`astrid://notes/private/`) or one around it
(`astrid://`-wide prefixes that hold it) is refused with `NamespaceTaken`.
`owner_of(uri)` answers who owns a URI, by the longest claimed prefix.

`astrid trust remove NAME` takes the publisher's keys away but keeps its
namespaces reserved for it: a capsule of another publisher still cannot take
them, and trusting NAME again (with the same or a new key) gives them back.
`--release` frees them too.

The file (`$ASTRID_CONFIG_DIR/trust.json`) is an `OwnerOnlyFile`: whoever
writes it decides whose code runs.

    {"version": 1,
     "publishers": {"acme": {"keys": ["ed25519:..."]}},
     "namespaces": {"astrid://notes/": {"publisher": "acme", "capsule": "notes"}}}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astrid.host.capsule.manifest import namespace_problem
from astrid.host.errors import IdentityError
from astrid.host.identity.errors import NamespaceTaken, TrustError
from astrid.host.identity.keys import PublicKey, name_problem
from astrid.host.owner_file import OwnerOnlyFile
from astrid.host.settings import config_dir

FILE_VERSION = 1
MAX_KEYS_PER_PUBLISHER = 16
MIN_KEY_PREFIX = 8  # hex digits of a fingerprint that `remove --key` accepts


def default_trust_file() -> Path:
    """`$ASTRID_CONFIG_DIR/trust.json`, else the user config dir's: the trusted publishers and their namespaces."""
    return config_dir() / "trust.json"


def trust_add_command(publisher: str = "NAME", key: str = "PUBKEY") -> str:
    """The exact command that trusts `key` as `publisher` (for error texts)."""
    return f"astrid trust add {key} --publisher {publisher}"


@dataclass(frozen=True)
class NamespaceClaim:
    namespace: str
    publisher: str
    capsule: str | None = None  # the capsule whose install claimed it first


@dataclass(frozen=True)
class Publisher:
    """A publisher as `trust list` shows it; no keys: removed, its namespaces kept reserved."""

    name: str
    keys: tuple[PublicKey, ...]
    namespaces: tuple[str, ...]

    @property
    def trusted(self) -> bool:
        return bool(self.keys)


@dataclass(frozen=True)
class Trust:
    """The trust file's content: publisher -> keys, namespace -> claim."""

    publishers: dict[str, tuple[PublicKey, ...]] = field(default_factory=dict)
    claims: dict[str, NamespaceClaim] = field(default_factory=dict)

    def key(self, fingerprint: str) -> tuple[str, PublicKey] | None:
        for publisher, keys in self.publishers.items():
            for key in keys:
                if key.fingerprint == fingerprint:
                    return publisher, key
        return None


@dataclass(frozen=True)
class Added:
    publisher: str
    key: PublicKey
    new: bool  # False: this key was already trusted as this publisher
    reserved: tuple[str, ...]  # namespaces the publisher held while it had no key, now usable again


@dataclass(frozen=True)
class Removed:
    publisher: str
    keys: tuple[PublicKey, ...]  # the keys no longer trusted
    released: tuple[str, ...]  # namespaces freed (--release)
    reserved: tuple[str, ...]  # namespaces still held for the publisher


class TrustStore:
    """The trust file at `path`: trusted publishers' keys and the namespaces they own."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: OwnerOnlyFile[Trust] = OwnerOnlyFile(
            self.path, noun="trust file", stakes="whose capsules run", error=TrustError, parse=_parse, empty=Trust()
        )

    # -- reading -----------------------------------------------------------------------------

    def current(self) -> Trust:
        """The file's content now (one `stat` while it is unchanged)."""
        return self._file.current()

    def signature(self) -> object:
        """What changes whenever the trust file does (the kernel re-checks installed capsules then)."""
        return self._file.signature()

    def trusted(self, fingerprint: str) -> tuple[str, PublicKey] | None:
        """(publisher, key) for a trusted key's fingerprint, else None."""
        return self.current().key(fingerprint)

    def publisher_of(self, fingerprint: str) -> str | None:
        found = self.trusted(fingerprint)
        return found[0] if found else None

    def publishers(self) -> list[Publisher]:
        """Every trusted publisher, and every removed one that still holds namespaces, by name."""
        trust = self.current()
        names = set(trust.publishers) | {claim.publisher for claim in trust.claims.values()}
        return [
            Publisher(
                name,
                trust.publishers.get(name, ()),
                tuple(sorted(ns for ns, claim in trust.claims.items() if claim.publisher == name)),
            )
            for name in sorted(names)
        ]

    def namespaces(self) -> list[NamespaceClaim]:
        return [claim for _, claim in sorted(self.current().claims.items())]

    def owner_of(self, uri: str) -> str | None:
        """The publisher owning `uri`: the one holding the longest claimed namespace that prefixes it."""
        best: NamespaceClaim | None = None
        for namespace, claim in self.current().claims.items():
            if uri.startswith(namespace) and (best is None or len(namespace) > len(best.namespace)):
                best = claim
        return best.publisher if best else None

    def check_claim(self, namespaces: Iterable[str], fingerprint: str | None) -> None:
        """Raise `NamespaceTaken` when the key's publisher (None: an unsigned capsule, which owns
        nothing) may not have every one of `namespaces`; writes nothing."""
        trust = self.current()
        _check_claim(trust, list(namespaces), self._publisher(trust, fingerprint))

    # -- changing ----------------------------------------------------------------------------

    def add(self, key: PublicKey | str, publisher: str, *, another_key: bool = False) -> Added:
        """Trust `key` as `publisher`. A second key for a trusted publisher needs `another_key`."""
        public = key if isinstance(key, PublicKey) else _parse_key_arg(key)
        _check_publisher(publisher)
        with self._changing() as (publishers, claims):
            holder = Trust(publishers).key(public.fingerprint)
            if holder is not None and holder[0] != publisher:
                raise TrustError(
                    f"key {public.short} is already trusted as publisher {holder[0]!r}: a key belongs to one "
                    f"publisher (if it changed hands: `astrid trust remove {holder[0]} --key {public.short}` first)"
                )
            keys = publishers.get(publisher, ())
            reserved = tuple(sorted(ns for ns, claim in claims.items() if claim.publisher == publisher))
            if holder is not None:
                return Added(publisher, public, False, ())
            if keys and not another_key:
                held = ", ".join(k.short for k in keys)
                raise TrustError(
                    f"publisher {publisher!r} is already trusted with key {held}: add --another-key to trust this "
                    f"key for {publisher} too (a new or rotated key), or choose another publisher name"
                )
            if len(keys) >= MAX_KEYS_PER_PUBLISHER:
                raise TrustError(
                    f"publisher {publisher!r} already has {len(keys)} keys: remove an old one first "
                    f"(`astrid trust remove {publisher} --key FINGERPRINT`)"
                )
            publishers[publisher] = (*keys, public)
            return Added(publisher, public, True, () if keys else reserved)

    def remove(self, publisher: str, *, key: str | None = None, release: bool = False) -> Removed:
        """Stop trusting `publisher` (or only its key whose fingerprint starts with `key`).
        Its namespaces stay reserved for it unless `release`."""
        _check_publisher(publisher)
        with self._changing() as (publishers, claims):
            keys = publishers.get(publisher, ())
            held = tuple(sorted(ns for ns, claim in claims.items() if claim.publisher == publisher))
            if not keys and not held:
                raise TrustError(f"no publisher named {publisher!r} in {self.path} (`astrid trust list` shows them)")
            if key is not None:
                gone = _match_key(publisher, keys, key)
                kept = tuple(k for k in keys if k not in gone)
            else:
                gone, kept = keys, ()
            if kept:
                publishers[publisher] = kept
            else:
                publishers.pop(publisher, None)
            released: tuple[str, ...] = ()
            if release:
                released = held
                for namespace in held:
                    del claims[namespace]
            return Removed(publisher, gone, released, tuple(ns for ns in held if ns not in released))

    def claim(self, namespaces: Iterable[str], fingerprint: str, *, capsule: str | None = None) -> tuple[str, ...]:
        """Bind `namespaces` to the publisher of the trusted key `fingerprint`, all or none;
        the ones it did not hold yet. Raises `NamespaceTaken` naming the owner of a collision."""
        wanted = list(namespaces)
        for namespace in wanted:
            problem = namespace_problem(namespace)
            if problem:
                raise TrustError(f"namespace {namespace!r} {problem}")
        with self._changing() as (publishers, claims):
            trust = Trust(publishers, claims)
            publisher = self._publisher(trust, fingerprint)
            if publisher is None:  # pragma: no cover - _publisher raises for an untrusted key
                raise TrustError("an unsigned capsule cannot claim namespaces")
            _check_claim(trust, wanted, publisher)
            new = tuple(sorted(ns for ns in set(wanted) if ns not in claims))
            for namespace in new:
                claims[namespace] = NamespaceClaim(namespace, publisher, capsule)
            return new

    def _publisher(self, trust: Trust, fingerprint: str | None) -> str | None:
        if fingerprint is None:
            return None
        found = trust.key(fingerprint)
        if found is None:
            raise TrustError(
                f"key {fingerprint[:16]} is not trusted, so it owns no namespace "
                f"(trust it with `{trust_add_command()}`)"
            )
        return found[0]

    @contextmanager
    def _changing(self) -> Iterator[tuple[dict[str, tuple[PublicKey, ...]], dict[str, NamespaceClaim]]]:
        with self._file.rewriting() as current:
            publishers, claims = dict(current.publishers), dict(current.claims)
            yield publishers, claims
            if publishers != current.publishers or claims != current.claims:
                self._file.write_json(_document(publishers, claims))


# -- rules ------------------------------------------------------------------------------------


def _check_publisher(name: str) -> None:
    problem = name_problem(name)
    if problem:
        raise TrustError(f"publisher name {name!r} {problem}")


def _parse_key_arg(text: str) -> PublicKey:
    try:
        return PublicKey.parse(text)
    except IdentityError as exc:
        raise TrustError(str(exc)) from None


def _match_key(publisher: str, keys: tuple[PublicKey, ...], prefix: str) -> tuple[PublicKey, ...]:
    prefix = prefix.lower()
    if prefix.startswith("ed25519:"):
        matches = tuple(k for k in keys if k.text == prefix or k.text.lower() == prefix)
    elif len(prefix) < MIN_KEY_PREFIX or not all(c in "0123456789abcdef" for c in prefix):
        raise TrustError(f"--key {prefix!r}: give at least {MIN_KEY_PREFIX} hex digits of the key's fingerprint")
    else:
        matches = tuple(k for k in keys if k.fingerprint.startswith(prefix))
    if len(matches) != 1:
        held = ", ".join(k.short for k in keys) or "none"
        what = "no key" if not matches else "more than one key"
        raise TrustError(f"publisher {publisher!r} has {what} matching {prefix!r} (its keys: {held})")
    return matches


def _check_claim(trust: Trust, namespaces: list[str], publisher: str | None) -> None:
    for namespace in namespaces:
        for held, claim in sorted(trust.claims.items()):
            if claim.publisher == publisher or not (namespace.startswith(held) or held.startswith(namespace)):
                continue
            by = f" (first installed by capsule {claim.capsule})" if claim.capsule else ""
            if held == namespace:
                where = f"namespace {namespace} belongs to publisher {claim.publisher!r}{by}"
            elif namespace.startswith(held):
                where = f"namespace {namespace} lies inside {held}, which belongs to publisher {claim.publisher!r}{by}"
            else:
                where = f"namespace {namespace} holds {held}, which belongs to publisher {claim.publisher!r}{by}"
            claimant = f"publisher {publisher!r}" if publisher else "an unsigned capsule"
            raise NamespaceTaken(
                namespace,
                claim.publisher,
                held,
                f"{where}; {claimant} cannot claim it (the first trusted publisher to install a namespace owns it; "
                f"to free it: `astrid trust remove {claim.publisher} --release`)",
            )


# -- the format ---------------------------------------------------------------------------------


def _document(publishers: dict[str, tuple[PublicKey, ...]], claims: dict[str, NamespaceClaim]) -> dict[str, Any]:
    return {
        "version": FILE_VERSION,
        "publishers": {name: {"keys": [k.text for k in publishers[name]]} for name in sorted(publishers)},
        "namespaces": {
            ns: {"publisher": claims[ns].publisher, **({"capsule": claims[ns].capsule} if claims[ns].capsule else {})}
            for ns in sorted(claims)
        },
    }


def _parse(path: Path, raw: bytes) -> Trust:
    try:
        document = json.loads(raw)
        if not isinstance(document, dict) or document.get("version") != FILE_VERSION:
            raise ValueError(f'expected an object with "version": {FILE_VERSION}')
        if set(document) - {"version", "publishers", "namespaces"}:
            raise ValueError("unknown keys")
        publishers: dict[str, tuple[PublicKey, ...]] = {}
        seen: set[str] = set()
        for name, item in _object(document.get("publishers", {}), "publishers").items():
            if name_problem(name) or not isinstance(item, dict) or set(item) != {"keys"}:
                raise ValueError(f"publisher {name!r} must be a publisher name with {{'keys': [...]}}")
            texts = item["keys"]
            if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
                raise ValueError(f"the keys of {name!r} must be a non-empty list of public keys")
            keys = tuple(PublicKey.parse(t) for t in texts)
            for key in keys:
                if key.fingerprint in seen:
                    raise ValueError(f"key {key.short} is listed twice")
                seen.add(key.fingerprint)
            publishers[name] = keys
        claims: dict[str, NamespaceClaim] = {}
        for namespace, item in _object(document.get("namespaces", {}), "namespaces").items():
            problem = namespace_problem(namespace)
            if problem:
                raise ValueError(f"namespace {namespace!r} {problem}")
            if not isinstance(item, dict) or set(item) - {"publisher", "capsule"}:
                raise ValueError(f"namespace {namespace!r} must be {{'publisher': ..., 'capsule': ...}}")
            publisher, capsule = item.get("publisher"), item.get("capsule")
            if not isinstance(publisher, str) or name_problem(publisher):
                raise ValueError(f"namespace {namespace!r} has no valid publisher")
            if capsule is not None and not isinstance(capsule, str):
                raise ValueError(f"namespace {namespace!r} has a capsule that is not a name")
            claims[namespace] = NamespaceClaim(namespace, publisher, capsule)
        return Trust(publishers, claims)
    except (ValueError, IdentityError) as exc:  # JSON, UTF-8 and key errors
        raise TrustError(
            f"the trust file {path} is corrupt ({exc}): fix it, or delete it and trust again "
            f"with `{trust_add_command()}`"
        ) from None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f'"{what}" must be an object')
    return value
