"""StaticWeb: a container served as a web site, configured by its metadata.

- `X-Container-Meta-Web-Index: index.html`: a GET of the container (or of a "directory",
  a path ending in '/') answers with that object under it.
- `X-Container-Meta-Web-Listings: true`: without an index, an HTML listing of the directory
  (names HTML-escaped, links percent-encoded); `-Web-Listings-Css: s.css` links a style
  sheet (relative names are made relative to each directory).
- `X-Container-Meta-Web-Error: error.html`: a 404 (or 401) answers with the body of
  `404error.html` (`401error.html`), keeping the status.
- `X-Container-Meta-Web-Directory-Type` (default application/directory): an object of that
  type is a directory marker.

A path to a directory without its trailing slash answers 301 to the same URL with it.
Anonymous GET/HEAD get this behaviour; authenticated ones only with `X-Web-Mode: true`
(so owners and tools still see the plain API). Every object or listing is read with a
sub-request as the caller, so the container's ACLs decide (`.r:*` to read, `.rlistings`
to list). Containers with none of these settings cost one cached container-info lookup.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web

from swiftlite.proxy.caches.info import ContainerInfo
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import IDENTITY, ApiPath, api_path, request_state, send_sub
from swiftlite.proxy.response import BodyResponse, close_answer

TRUE = ("true", "1", "yes", "on", "t", "y")
META = "x-container-meta-web-"
WEB_MODE = "X-Web-Mode"
# Request headers a sub-request carries (who the caller is, referrer ACLs).
# A temp URL's parameters, carried by every link of a listing reached through one.
TEMPURL_PARAMS = ("temp_url_prefix", "temp_url_expires", "temp_url_sig")
DEFAULT_CSS = ("body{font-family:sans-serif}table{border-collapse:collapse}"
               "td,th{padding:0 1em;text-align:left}.colsize{text-align:right}")


def _size(n: int) -> str:
    """Human-readable size, as a listing shows it."""
    value = float(n)
    for unit in ("", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{int(value)}{unit}" if unit == "" else f"{value:.1f}{unit}"
        value /= 1024
    return str(n)


class _Site:
    """One container's web settings (from its cached info)."""

    def __init__(self, meta: dict[str, str]) -> None:
        web_meta = {k.lower()[len(META):]: v for k, v in meta.items()
                    if k.lower().startswith(META) and v}
        self.index = web_meta.get("index", "")
        self.listings = web_meta.get("listings", "").lower() in TRUE
        self.css = web_meta.get("listings-css", "")
        self.error = web_meta.get("error", "")
        self.dir_type = web_meta.get("directory-type", "application/directory")

    @property
    def enabled(self) -> bool:
        return bool(self.index or self.listings)


def _web_mode(request: web.Request) -> bool:
    asked = request.headers.get(WEB_MODE)
    return asked is not None and asked.lower() in TRUE


def _site_of(info: ContainerInfo) -> _Site:
    return _Site(info.meta)


class StaticWeb(Middleware):
    name = "staticweb"
    plain_reads = HOOKS
    plain_refused_by = (WEB_MODE,)

    def info(self) -> dict[str, Any]:
        return {}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return await self.app(request)
        path = api_path(request)
        if path is None or path.container is None:
            return await self.app(request)
        site = await self._site(request, path)
        if site is None:
            return await self.app(request)
        if path.obj is None:
            if not site.enabled:
                if _web_mode(request):
                    return await self._error(request, path, site, 404)
                return await self.app(request)
            if not request.path.endswith("/"):
                return self._redirect(request)
            return await self._directory(request, path, site, "")
        if not (site.enabled or site.error):
            return await self.app(request)
        return await self._object(request, path, site)

    async def admit_plain(self, request: web.Request, path: ApiPath) -> web.Request | None:
        if request_state(request).get(IDENTITY) is not None:
            return request  # a token's read, not asking for web mode (plain_refused_by)
        site = await self._site(request, path)
        return request if site is None or not (site.enabled or site.error) else None

    async def _site(self, request: web.Request, path: ApiPath) -> _Site | None:
        """The container's web settings when the read is one staticweb may answer (an
        anonymous one, or one asking for web mode); None otherwise."""
        if request.get(IDENTITY) is not None and not _web_mode(request):
            return None
        assert path.container is not None
        info = await self.proxy.container_info(request, path.account, path.container)
        return info.derived(_site_of)

    # ---- pieces --------------------------------------------------------------------------------

    @staticmethod
    def _redirect(request: web.Request) -> web.Response:
        location = f"{request.scheme}://{request.host}{request.rel_url.raw_path}/"
        if request.rel_url.raw_query_string:
            location += "?" + request.rel_url.raw_query_string
        return web.Response(status=301, headers={"Location": location,
                                                 "Content-Type": "text/html; charset=UTF-8"})

    @staticmethod
    def _object_path(path: ApiPath, name: str) -> str:
        return f"/{path.version}/{quote(path.account)}/{quote(path.container or '')}/" \
               f"{quote(name)}"

    async def _error(self, request: web.Request, path: ApiPath, site: _Site, status: int,
                     resp: web.StreamResponse | None = None) -> web.StreamResponse:
        """`status` with the container's `<status><web-error>` page as its body if any."""
        if site.error and status in (401, 404):
            page = await send_sub(self.app, request, "GET",
                                    self._object_path(path, f"{status}{site.error}"))
            if page.status // 100 == 2 and isinstance(page, BodyResponse):
                if resp is not None:
                    close_answer(resp)
                body = await page.read()
                return web.Response(status=status, body=b"" if request.method == "HEAD"
                                    else body, headers={
                                        "Content-Type": page.headers.get(
                                            "Content-Type", "text/html")})
            close_answer(page)
        if resp is not None:
            return resp
        return web.Response(status=status, body=(
            b"" if request.method == "HEAD" else
            b"<html><h1>Not Found</h1><p>The resource could not be found.</p></html>"
            if status == 404 else b""), content_type="text/html", charset="UTF-8")

    async def _directory(self, request: web.Request, path: ApiPath, site: _Site,
                         prefix: str) -> web.StreamResponse:
        """A path ending in '/': its index object, else its listing, else 404."""
        if site.index:
            resp = await send_sub(self.app, request, request.method,
                                    self._object_path(path, prefix + site.index),
                                    request.headers)
            if resp.status != 404:
                if resp.status in (401, 403):
                    return await self._error(request, path, site, resp.status, resp)
                return resp
            close_answer(resp)
        if site.listings:
            return await self._listing(request, path, site, prefix)
        return await self._error(request, path, site, 404)

    async def _object(self, request: web.Request, path: ApiPath,
                      site: _Site) -> web.StreamResponse:
        name = path.obj or ""
        resp = await self.app(request)
        if resp.status // 100 in (2, 3):
            ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if ctype == site.dir_type.lower() and not name.endswith("/"):
                close_answer(resp)
                return self._redirect(request)
            return resp
        if resp.status != 404:
            return await self._error(request, path, site, resp.status, resp)
        if name.endswith("/"):
            if site.enabled:
                close_answer(resp)
                return await self._directory(request, path, site, name)
            return await self._error(request, path, site, 404, resp)
        # 'name' may be a directory without its slash: an index or any object under it.
        if site.index:
            probe = await send_sub(self.app, request, "HEAD",
                                     self._object_path(path, f"{name}/{site.index}"))
            close_answer(probe)
            if probe.status // 100 == 2:
                close_answer(resp)
                return self._redirect(request)
        if site.listings:
            rows = await self._rows(request, path, f"{name}/", limit=1)
            if isinstance(rows, list) and rows:
                close_answer(resp)
                return self._redirect(request)
        return await self._error(request, path, site, 404, resp)

    # ---- listings ------------------------------------------------------------------------------

    async def _rows(self, request: web.Request, path: ApiPath, prefix: str,
                    limit: int = 0, marker: str = "") -> list[dict] | web.StreamResponse:
        query = f"format=json&delimiter=/&prefix={quote(prefix, safe='')}"
        if limit:
            query += f"&limit={limit}"
        if marker:
            query += f"&marker={quote(marker, safe='')}"
        resp = await send_sub(self.app, request, "GET",
                                f"/{path.version}/{quote(path.account)}/"
                                f"{quote(path.container or '')}", query=query)
        if resp.status // 100 != 2:
            return resp
        body = await resp.read() if isinstance(resp, BodyResponse) else \
            getattr(resp, "body", b"") or b""
        try:
            return json.loads(body or b"[]")
        except ValueError:
            return []

    async def _listing(self, request: web.Request, path: ApiPath, site: _Site,
                       prefix: str) -> web.StreamResponse:
        rows: list[dict] = []
        marker = ""
        while True:  # every page: a directory is listed whole
            page = await self._rows(request, path, prefix, marker=marker)
            if not isinstance(page, list):
                if page.status in (401, 403, 404):
                    return await self._error(request, path, site, page.status, page)
                return page
            rows.extend(page)
            if len(page) < 10000 or not page:
                break
            last = page[-1]
            marker = last.get("name") or last.get("subdir", "")
        if prefix and not rows:
            return await self._error(request, path, site, 404)
        body = self._html(request, site, prefix, rows)
        return web.Response(status=200, body=b"" if request.method == "HEAD" else body,
                            headers={"Content-Type": "text/html; charset=UTF-8"})

    def _link_query(self, request: web.Request) -> str:
        """A temp URL's parameters for each link (they open the listed names too)."""
        q = request.query
        if "temp_url_sig" not in q:
            return ""
        parts = [f"{k}={quote(q[k])}" for k in TEMPURL_PARAMS if k in q]
        if "inline" in q:
            parts.append("inline")
        return "?" + "&amp;".join(parts)

    def _html(self, request: web.Request, site: _Site, prefix: str,
              rows: list[dict]) -> bytes:
        title = escape(unquote(request.rel_url.raw_path))
        depth = prefix.count("/")
        if site.css:
            href = site.css if site.css.startswith(("/", "http://", "https://")) else \
                "../" * depth + site.css
            style = f'<link rel="stylesheet" type="text/css" href="{quote(href)}" />'
        else:
            style = f"<style>{DEFAULT_CSS}</style>"
        extra = self._link_query(request)
        out = ["<!DOCTYPE html>", "<html>", "<head>",
               '<meta charset="UTF-8">',
               f"<title>Listing of {title}</title>", style, "</head>", "<body>",
               f"<h1>Listing of {title}</h1>", '<table class="listing">',
               "<tr><th>Name</th><th>Size</th><th>Date</th></tr>"]
        # A temp URL limited to this directory cannot open its parent: no link to it.
        if prefix and prefix != request.query.get("temp_url_prefix"):
            out.append(f'<tr class="parent"><td><a href="../{extra}">../</a></td>'
                       "<td></td><td></td></tr>")
        for row in rows:
            if "subdir" in row:
                short = row["subdir"][len(prefix):]
                out.append(f'<tr class="subdir"><td><a href="./{quote(short)}{extra}">'
                           f"{escape(short)}</a></td><td></td><td></td></tr>")
                continue
            short = row["name"][len(prefix):]
            if not short:
                continue
            stamp = row.get("last_modified", "")[:19].replace("T", " ")
            ctype = escape(row.get("content_type", ""))
            out.append(f'<tr class="object" data-type="{ctype}">'
                       f'<td><a href="./{quote(short)}{extra}">{escape(short)}</a></td>'
                       f'<td>{_size(int(row.get("bytes", 0)))}</td><td>{stamp}</td></tr>')
        out += ["</table>", "</body>", "</html>", ""]
        return "\n".join(out).encode("utf-8")

