"""HTML form uploads (multipart/form-data POSTs), as Swift's FormPost (middleware/formpost.py)
and S3's POST Object (s3/postform.py) both read them."""

from __future__ import annotations

from aiohttp.multipart import BodyPartReader

# Longest value of a plain form field that counts (the rest is read and dropped).
MAX_VALUE_LENGTH = 4096
READ_CHUNK = 64 * 1024


async def field_value(part: BodyPartReader, limit: int = MAX_VALUE_LENGTH) -> tuple[str, bool]:
    """A plain form field's value: its first `limit` bytes as text (the rest is read and
    dropped, so the next part can be read), and whether there was more."""
    value = bytearray()
    while len(value) <= limit:
        # Whole chunks: aiohttp's reader needs room for the boundary in each read.
        chunk = await part.read_chunk(READ_CHUNK)
        if not chunk:
            break
        value += chunk
    await part.release()
    return value[:limit].decode("utf-8", "replace"), len(value) > limit
