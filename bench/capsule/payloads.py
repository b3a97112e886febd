"""What every benchmark server serves (shared by the capsule and the baseline)."""

TEXT_COUNT = 5
BLOB_COUNT = 5
TEXT = ("astrid bench " * 79)[:1023] + "\n"  # 1 KiB
BLOB = bytes(range(256)) * 256  # 64 KiB


def keys_for(index: str) -> list[str]:
    return [f"{index}-text-{n}" for n in range(TEXT_COUNT)] + [f"{index}-blob-{n}" for n in range(BLOB_COUNT)]
