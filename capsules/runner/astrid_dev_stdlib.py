"""The standard library modules the dev runner carries (`astrid capsule dev`).

A componentize-py guest has no standard library on disk when it runs: only
the modules imported while it was built exist. A built capsule gets every
module it imports; the dev runner is built once for every capsule, so it
imports these at build time (docs/capsules.md lists them). A capsule that
imports another one is told to build (`astrid capsule build` includes it).

Left out on purpose: modules that reach for what a capsule never has
(sockets, processes, files: `urllib.request`, `http.client`, `asyncio`,
`subprocess`, `tempfile`, `shutil`, `glob`, `sqlite3` on disk), that need
code the guest lacks (`lzma`, `bz2`), or that are large and rare in a
resource handler (`unittest`, `doctest`, `pdb`, `tkinter`). Stdlib only.
"""

MODULES = (
    # text, data and formats
    "json", "re", "string", "string.templatelib", "textwrap", "difflib", "unicodedata", "html", "html.parser",
    "html.entities", "csv", "base64", "binascii", "quopri", "struct", "codecs", "pprint", "reprlib", "shlex",
    "fnmatch", "tomllib", "configparser", "xml.etree.ElementTree", "xml.dom.minidom", "mimetypes",
    "email", "email.utils", "email.message", "email.parser", "email.policy", "email.headerregistry",
    "email.mime.text", "email.mime.multipart", "urllib.parse", "ipaddress",
    # time
    "datetime", "_strptime", "time", "calendar", "zoneinfo",
    # numbers
    "math", "cmath", "decimal", "fractions", "numbers", "statistics", "random", "secrets",
    # hashing and compression
    "hashlib", "hmac", "zlib", "gzip", "uuid",
    # data structures and functions
    "collections", "collections.abc", "itertools", "functools", "operator", "copy", "copyreg", "bisect", "heapq",
    "array", "dataclasses", "enum", "graphlib", "weakref", "contextlib", "contextvars", "queue", "pickle",
    # the language
    "typing", "types", "abc", "inspect", "ast", "keyword", "warnings", "traceback", "logging", "annotationlib",
    "io", "colorsys", "locale", "pathlib",
    # text encodings the codecs machinery would import on first use
    "encodings.ascii", "encodings.latin_1", "encodings.cp1252", "encodings.utf_16", "encodings.utf_32",
    "encodings.utf_8_sig", "encodings.idna", "encodings.punycode", "encodings.unicode_escape",
    "encodings.raw_unicode_escape", "encodings.base64_codec", "encodings.hex_codec",
)  # fmt: skip
