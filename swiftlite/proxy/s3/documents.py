"""What every S3 resource module reads and writes the same way: a small request body (an XML
document, its signature and checksums checked), its parsing, an XML answer, an Owner element
and the hidden container of a bucket's multipart uploads. Kept below the resource modules so
that none of them imports another for these."""

from __future__ import annotations

from aiohttp import web

from swiftlite.common.reserved import reserved_name
from swiftlite.proxy.s3 import payload, xml
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.errors import S3Error, malformed_xml


def uploads_container(bucket: str) -> str:
    """The hidden container where a bucket's multipart uploads keep their parts."""
    return reserved_name("mpu", bucket)


def xml_response(el, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(status=status, body=xml.dump(el), headers=headers,
                        content_type="application/xml")


async def small_body(s3: S3Request, limit: int = xml.MAX_BODY,
                     header_sums: bool = True) -> bytes:
    """A request body meant as a document (XML), its signature and checksums checked."""
    mode = payload.payload_mode(s3.auth)
    length = payload.decoded_length(s3.request.headers, mode)
    if length is None:
        if s3.request.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise S3Error("MissingContentLength", 411,
                          "You must provide the Content-Length HTTP header.")
        length = 0
    if length > limit:
        raise S3Error("MaxMessageLengthExceeded", 400, "Your request was too big.")
    return b"".join([c async for c in payload.body(s3.request, s3.auth, s3.signing_key,
                                                     length, header_sums=header_sums)])


def parse_xml(body: bytes):
    try:
        return xml.parse(body)
    except xml.BadXml:
        raise malformed_xml() from None


def owner(parent, s3: S3Request, who: str | None = None) -> None:
    el = xml.sub(parent, "Owner")
    # A canonical id is `account:user`; the caller's unless told whose.
    who = who or (s3.ident.user if s3.ident is not None else s3.account)
    xml.sub(el, "ID", who)
    xml.sub(el, "DisplayName", who)
