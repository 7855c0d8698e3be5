"""S3's XML: documents built with xml.etree, and request bodies parsed safely.

A body with a DTD, an entity or a processing instruction is refused (MalformedXML) before
any parse: no entity expansion, no external fetch, whatever the parser would allow.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
Element = ET.Element
MAX_BODY = 1024 * 1024  # a DeleteObjects or CompleteMultipartUpload body; S3's own cap is 2 MiB


def root(tag: str) -> ET.Element:
    return ET.Element(tag, xmlns=NS)


def sub(parent: ET.Element, tag: str, text: Any = None) -> ET.Element:
    el = ET.SubElement(parent, tag)
    if text is not None:
        el.text = str(text)
    return el


def dump(el: ET.Element) -> bytes:
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + \
        ET.tostring(el, encoding="unicode").encode("utf-8", "surrogateescape")


class BadXml(ValueError):
    pass


def parse(body: bytes) -> ET.Element:
    """The document's root (namespaces dropped from tags); BadXml for anything else."""
    if b"<!" in body or b"<?xml-stylesheet" in body:  # DOCTYPE, ENTITY, CDATA tricks
        raise BadXml("DTDs and entities are not accepted")
    try:
        doc = ET.fromstring(body)
    except ET.ParseError as exc:
        raise BadXml(str(exc)) from None
    for el in doc.iter():
        if isinstance(el.tag, str) and el.tag.startswith("{"):
            el.tag = el.tag.split("}", 1)[1]
    return doc


def text(el: ET.Element, tag: str) -> str | None:
    found = el.find(tag)
    return None if found is None else (found.text or "")
