"""What every benchmark server serves (shared by the capsule and the baseline)."""

TEXT_COUNT = 5
BLOB_COUNT = 5
FRESH_COUNT = 2  # text resources that declare max_age_s (astrid may serve them from its read cache)
FRESH_MAX_AGE_S = 3600
TEXT = ("astrid bench " * 79)[:1023] + "\n"  # 1 KiB
BLOB = bytes(range(256)) * 256  # 64 KiB


def keys_for(index: str) -> list[str]:
    return [f"{index}-text-{n}" for n in range(TEXT_COUNT)] + [f"{index}-blob-{n}" for n in range(BLOB_COUNT)]


def fresh_keys_for(index: str) -> list[str]:
    return [f"{index}-fresh-{n}" for n in range(FRESH_COUNT)]
