"""Multipart uploads (to come)."""

from __future__ import annotations

from swiftlite.proxy.s3.errors import not_implemented


async def _todo(s3):
    raise not_implemented("Multipart uploads are not supported yet.")

list_uploads = list_parts = upload_part = abort = create = complete = _todo
