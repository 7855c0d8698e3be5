"""Image variants on GET (issue 40) through a real `swiftlite up` proxy: images made here
with Pillow, every operation's output decoded and measured, the cache coherent across an
overwrite, authorization exactly the original's (a token, `.r:*`, a temp URL with the variant
signed, S3), presets and free-form off, a decompression bomb and corrupt bodies refused with
4xx, and the /metrics counters."""

from __future__ import annotations

import hashlib
import hmac
import io
import re
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from PIL import Image

from tests.cluster import swift_api
from tests.helpers import bomb_png, start_proxy_variant, wait_for
from tests.integration import s3_support
from tests.integration.test_backend_signing import primaries

KEY = "image-tempurl-key"


def jpeg(size=(120, 80), orientation: int | None = None, color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    Image.new("RGB", size, color).save(buf, "JPEG", exif=exif.tobytes())
    return buf.getvalue()


def png_rgba(size=(64, 64)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGBA", size, (0, 0, 255, 128)).save(buf, "PNG")
    return buf.getvalue()


def decoded(resp: requests.Response) -> Image.Image:
    assert resp.status_code == 200, (resp.status_code, resp.text[:200])
    im = Image.open(io.BytesIO(resp.content))
    im.load()
    return im


@pytest.fixture(scope="module")
def env(cluster):
    call = swift_api(cluster)
    tag = uuid.uuid4().hex[:8]
    private, public = f"img-{tag}", f"pub-{tag}"
    assert call("PUT", f"/{private}").status_code in (201, 202)
    assert call("PUT", f"/{public}", {"X-Container-Read": ".r:*"}).status_code in (201, 202)
    assert call("POST", "", {"X-Account-Meta-Temp-URL-Key": KEY}).status_code == 204
    # 120 x 80 stored, orientation 6: shown (and made) as 80 x 120.
    for cont in (private, public):
        assert call("PUT", f"/{cont}/photo.jpg", {"Content-Type": "image/jpeg"},
                    data=jpeg(orientation=6)).status_code == 201
    assert call("PUT", f"/{private}/alpha.png", data=png_rgba()).status_code == 201
    return call, private, public


def get(env, cont: str, name: str, variant: str, headers: dict | None = None,
        anonymous: bool = False) -> requests.Response:
    call = env[0]
    query = {"image": variant}
    if anonymous:
        return requests.get(f"{call.url}/{cont}/{name}", params=query, headers=headers)
    return call("GET", f"/{cont}/{name}", headers, params=query)


@pytest.mark.parametrize("variant,size,fmt", [
    ("resize:fit:40:40", (27, 40), "JPEG"),
    ("resize:fill:30:30", (30, 30), "JPEG"),
    ("resize:fill:30:10:north/format:png", (30, 10), "PNG"),
    ("resize:width:20/format:webp", (20, 30), "WEBP"),
    ("resize:height:60/format:webp/quality:50", (40, 60), "WEBP"),
    ("crop:10:20:northeast", (10, 20), "JPEG"),
    ("resize:fit:500:500", (80, 120), "JPEG"),  # never enlarged; orientation applied
    ("resize:fit:16:16/format:avif", (11, 16), "AVIF"),
])
def test_each_operation(env, variant, size, fmt):
    _, private, _ = env
    resp = get(env, private, "photo.jpg", variant)
    im = decoded(resp)
    assert (im.size, im.format) == (size, fmt)
    assert resp.headers["Content-Type"] == Image.MIME[fmt]
    assert 0x0112 not in im.getexif()  # EXIF stripped by default
    # The second read is the stored variant: the same bytes and ETag.
    again = get(env, private, "photo.jpg", variant)
    assert again.content == resp.content
    assert again.headers["ETag"] == resp.headers["ETag"] == hashlib.md5(resp.content).hexdigest()


def test_png_alpha_kept_and_exif_kept_on_request(env):
    _, private, _ = env
    im = decoded(get(env, private, "alpha.png", "resize:fit:32:32/format:webp"))
    assert (im.size, im.format, im.mode) == ((32, 32), "WEBP", "RGBA")
    kept = decoded(get(env, private, "photo.jpg", "resize:width:40/strip:false"))
    assert kept.size == (40, 60) and kept.getexif().get(0x0112) == 1


def test_format_auto_follows_accept(env):
    _, private, _ = env
    resp = get(env, private, "photo.jpg", "resize:width:30/format:auto",
               {"Accept": "image/webp,image/*;q=0.8"})
    assert decoded(resp).format == "WEBP" and resp.headers["Vary"] == "Accept"
    resp = get(env, private, "photo.jpg", "resize:width:30/format:auto", {"Accept": "*/*"})
    assert decoded(resp).format == "JPEG" and resp.headers["Vary"] == "Accept"


def test_overwrite_never_serves_the_old_variant(env):
    call, private, _ = env
    name = f"over-{uuid.uuid4().hex[:6]}.jpg"
    assert call("PUT", f"/{private}/{name}", data=jpeg((100, 50))).status_code == 201
    first = get(env, private, name, "resize:width:50")
    assert decoded(first).size == (50, 25)
    assert call("PUT", f"/{private}/{name}", data=jpeg((100, 100), color=(0, 255, 0))) \
        .status_code == 201
    second = decoded(get(env, private, name, "resize:width:50"))
    assert second.size == (50, 50) and second.getpixel((25, 25))[1] > 200


def stored_variants(cluster, account: str, cont: str, name: str) -> list[list[str]]:
    """Per container replica, the names of the stored variants of `cont/name` (straight from
    the container servers: no client can list the reserved namespace)."""
    hidden = f"\x00image\x00{cont}"
    part, nodes = primaries(cluster, "container", account, hidden)
    prefix = "\x00" + hashlib.sha1(name.encode()).hexdigest() + "\x00"
    out = []
    for n in nodes:
        r = requests.get(f"http://{n['ip']}:{n['port']}/{n['device']}/{part}/{account}/"
                         + urllib.parse.quote(hidden, safe=""),
                         params={"format": "json", "prefix": prefix},
                         headers={"X-Backend-Allow-Reserved-Names": "true"})
        out.append([row["name"] for row in r.json()] if r.status_code == 200 else [])
    return out


def test_overwrite_and_delete_reclaim_old_variants(cluster, env):
    call, private, _ = env
    name = f"reclaim-{uuid.uuid4().hex[:6]}.jpg"
    assert call("PUT", f"/{private}/{name}", data=jpeg((40, 40))).status_code == 201
    for variant in ("resize:width:10", "resize:width:20"):
        assert decoded(get(env, private, name, variant)).size[0] in (10, 20)
    wait_for(lambda: all(len(r) == 2 for r in stored_variants(cluster, call.account, private,
                                                                 name)),
             what="both variants listed")
    assert call("PUT", f"/{private}/{name}", data=jpeg((30, 30))).status_code == 201
    assert decoded(get(env, private, name, "resize:width:10")).size == (10, 10)
    # The two variants of the old bytes go in the background; the new one stays.
    left = wait_for(lambda: (lambda rows: rows if all(len(r) == 1 for r in rows) else None)(
        stored_variants(cluster, call.account, private, name)), what="old variants reclaimed")
    assert len({r[0] for r in left}) == 1
    # Deleting the original takes its variants with it.
    assert call("DELETE", f"/{private}/{name}").status_code == 204
    assert get(env, private, name, "resize:width:10").status_code == 404
    wait_for(lambda: not any(stored_variants(cluster, call.account, private, name)),
             what="a deleted original's variants reclaimed")


def test_head_and_if_none_match(env):
    _, private, _ = env
    got = get(env, private, "photo.jpg", "resize:width:24")
    assert got.status_code == 200
    call = env[0]
    head = call("HEAD", f"/{private}/photo.jpg", params={"image": "resize:width:24"})
    assert head.status_code == 200 and head.headers["ETag"] == got.headers["ETag"]
    assert int(head.headers["Content-Length"]) == len(got.content)
    same = get(env, private, "photo.jpg", "resize:width:24",
               {"If-None-Match": got.headers["ETag"]})
    assert same.status_code == 304 and not same.content


def test_private_refused_anonymously_public_served(env):
    _, private, public = env
    assert get(env, private, "photo.jpg", "resize:width:20", anonymous=True).status_code \
        == 401
    assert decoded(get(env, public, "photo.jpg", "resize:width:20", anonymous=True)).size \
        == (20, 30)
    # The refusal comes before any work: an unknown object is the original's 404.
    assert get(env, private, "nothing.jpg", "resize:width:20").status_code == 404


def test_bomb_refused_quickly_without_decoding(env):
    call, private, _ = env
    assert call("PUT", f"/{private}/bomb.png", data=bomb_png()).status_code == 201
    started = time.monotonic()
    resp = get(env, private, "bomb.png", "resize:fit:100:100")
    assert resp.status_code == 422, resp.text
    # Decoding 50,000 x 50,000 pixels would take minutes and gigabytes (the worker's address
    # space is capped at image_worker_memory_mib = 1024); refused from the header it is fast.
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("body", [jpeg()[:300], b"just some text, not an image"])
def test_corrupt_or_not_an_image_is_4xx(env, body):
    call, private, _ = env
    name = f"bad-{uuid.uuid4().hex[:6]}.jpg"
    assert call("PUT", f"/{private}/{name}", data=body).status_code == 201
    assert get(env, private, name, "resize:width:20").status_code == 415


@pytest.mark.parametrize("variant", ["resize:fit:20", "resize:stretch:1:1", "format:gif",
                                     "quality:500"])
def test_bad_grammar_is_400(env, variant):
    assert get(env, env[1], "photo.jpg", variant).status_code == 400


def test_output_past_limit_is_422(env):
    assert get(env, env[1], "photo.jpg", "resize:fill:5000:5000").status_code == 422


def test_presets_and_free_form_off(env):
    call, _, _ = env
    cont = f"preset-{uuid.uuid4().hex[:6]}"
    assert call("PUT", f"/{cont}", {
        "X-Container-Meta-Image-Preset-Thumb": "resize:fill:16:16/format:png",
        "X-Container-Meta-Image-Free-Form": "false"}).status_code in (201, 202)
    assert call("PUT", f"/{cont}/p.jpg", data=jpeg()).status_code == 201
    im = decoded(get(env, cont, "p.jpg", "thumb"))
    assert (im.size, im.format) == ((16, 16), "PNG")
    assert get(env, cont, "p.jpg", "resize:fit:10:10").status_code == 403
    assert get(env, cont, "p.jpg", "nosuch").status_code == 400


def sign(expires: int, path: str) -> str:
    return hmac.new(KEY.encode(), f"GET\n{expires}\n{path}".encode(), hashlib.sha256).hexdigest()


def test_tempurl_signs_the_variant(env):
    call, private, _ = env
    path = urllib.parse.urlsplit(f"{call.url}/{private}/photo.jpg").path
    expires = int(time.time()) + 300
    base = call.url.split("/v1/")[0] + path
    variant = "resize:width:20/format:webp"
    q = urllib.parse.quote(variant, safe="")
    good = sign(expires, f"{path}?image={variant}")
    resp = requests.get(f"{base}?image={q}&temp_url_sig={good}&temp_url_expires={expires}")
    assert (decoded(resp).size, decoded(resp).format) == ((20, 30), "WEBP")
    # A link for the object itself cannot ask for variants...
    plain = sign(expires, path)
    assert requests.get(f"{base}?temp_url_sig={plain}&temp_url_expires={expires}") \
        .status_code == 200
    assert requests.get(f"{base}?image={q}&temp_url_sig={plain}&temp_url_expires={expires}") \
        .status_code == 401
    # ...nor a variant's link for another variant, or for the original.
    other = urllib.parse.quote("resize:width:21", safe="")
    assert requests.get(f"{base}?image={other}&temp_url_sig={good}&temp_url_expires={expires}") \
        .status_code == 401
    assert requests.get(f"{base}?temp_url_sig={good}&temp_url_expires={expires}") \
        .status_code == 401


def test_free_form_off_still_serves_a_signed_variant(env):
    call, _, _ = env
    cont = f"signed-{uuid.uuid4().hex[:6]}"
    assert call("PUT", f"/{cont}", {"X-Container-Meta-Image-Free-Form": "false",
                                    "X-Container-Read": ".r:*"}).status_code in (201, 202)
    assert call("PUT", f"/{cont}/p.jpg", data=jpeg()).status_code == 201
    assert get(env, cont, "p.jpg", "resize:width:12", anonymous=True).status_code == 403
    path = urllib.parse.urlsplit(f"{call.url}/{cont}/p.jpg").path
    expires = int(time.time()) + 300
    sig = sign(expires, f"{path}?image=resize:width:12")
    resp = requests.get(call.url.split("/v1/")[0] + path, params={
        "image": "resize:width:12", "temp_url_sig": sig, "temp_url_expires": str(expires)})
    assert decoded(resp).size == (12, 8)


def test_info_advertises_image(cluster):
    info = requests.get(cluster.proxy_url + "/info").json()
    assert "webp" in info["image"]["formats"] and info["image"]["max_output_side"] == 4096


def test_s3_get_with_image(cluster):
    s3 = s3_support.client(cluster)
    bucket = f"imgs3-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k.jpg", Body=jpeg((60, 40)), ContentType="image/jpeg")

    def add_image(request, **_):  # the query is added before signing, so it is signed
        sep = "&" if "?" in request.url else "?"
        request.url += sep + "image=" + urllib.parse.quote("resize:width:30/format:png",
                                                           safe="")
    s3.meta.events.register("before-sign.s3.GetObject", add_image)
    body = s3.get_object(Bucket=bucket, Key="k.jpg")["Body"].read()
    im = Image.open(io.BytesIO(body))
    assert (im.size, im.format) == ((30, 20), "PNG")
    # A refusal keeps its status (not S3's BadDigest for a 422).
    refused = s3_support.client(cluster)
    too_big = "?image=" + urllib.parse.quote("resize:fill:9999:9", safe="")
    refused.meta.events.register("before-sign.s3.GetObject",
                                 lambda request, **_: setattr(request, "url",
                                                              request.url + too_big))
    with pytest.raises(Exception) as exc:
        refused.get_object(Bucket=bucket, Key="k.jpg")
    assert s3_support.code_of(exc) == (422, "InvalidImageVariant")


def metric(cluster, result: str, base: str | None = None) -> float:
    text = requests.get((base or cluster.proxy_url) + "/metrics").text
    pattern = r'^swiftlite_proxy_image_variants_total\{result="' + result + r'"\} (\S+)$'
    m = re.search(pattern, text, re.M)
    return float(m.group(1)) if m else 0.0


def test_concurrent_first_requests_compute_once_and_metrics(cluster, env):
    call, private, _ = env
    variant = "resize:fit:33:33/format:webp"
    before = {r: metric(cluster, r) for r in ("computed", "cached", "joined", "refused")}
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: get(env, private, "photo.jpg", variant), range(6)))
    assert len({a.headers["ETag"] for a in answers}) == 1
    assert all(a.status_code == 200 for a in answers)
    assert get(env, private, "photo.jpg", "resize:fit:20").status_code == 400

    def counted():
        now = {r: metric(cluster, r) for r in before}
        delta = {r: now[r] - before[r] for r in now}
        return delta if delta["refused"] >= 1 and \
            delta["computed"] + delta["joined"] + delta["cached"] >= 6 else None
    delta = wait_for(counted, 10, what="image metrics")
    assert delta["computed"] == 1, delta
    assert "swiftlite_proxy_image_compute_seconds" in \
        requests.get(cluster.proxy_url + "/metrics").text


def test_another_proxy_serves_the_stored_variant(cluster, env):
    """A variant made by one proxy is read from the store by another (no memory cache, no
    plain-read short cut there: the full pipeline's path)."""
    call, private, _ = env
    variant = "resize:fit:17:17/format:png"
    made = get(env, private, "photo.jpg", variant)
    assert decoded(made).size == (11, 17)
    other = start_proxy_variant(cluster, "image-store", {"plain_read_shortcut": "false"},
                                {"image": {"image_memory_cache": "0"}})
    try:
        base = f"http://127.0.0.1:{other.port}"
        url = base + urllib.parse.urlsplit(call.url).path
        resp = requests.get(f"{url}/{private}/photo.jpg", params={"image": variant},
                            headers={"X-Auth-Token": call.token})
        assert resp.content == made.content and resp.headers["ETag"] == made.headers["ETag"]
        wait_for(lambda: metric(cluster, "cached", base) >= 1, 10, what="a cached read")
        assert metric(cluster, "computed", base) == 0
    finally:
        other.stop()


def test_a_variant_expires_with_its_original(cluster, env):
    call, private, _ = env
    name = f"expiring-{uuid.uuid4().hex[:6]}.jpg"
    assert call("PUT", f"/{private}/{name}", {"X-Delete-After": "3600"},
                data=jpeg((40, 40))).status_code == 201
    delete_at = call("HEAD", f"/{private}/{name}").headers["X-Delete-At"]
    assert decoded(get(env, private, name, "resize:width:16")).size[0] == 16
    stored = wait_for(lambda: next((r for r in stored_variants(cluster, call.account,
                                                                private, name) if r), None),
                      what="the variant stored")
    hidden = f"\x00image\x00{private}"
    part, nodes = primaries(cluster, "object", call.account, hidden, stored[0])
    n = nodes[0]
    r = requests.head(f"http://{n['ip']}:{n['port']}/{n['device']}/{part}/{call.account}/"
                      + urllib.parse.quote(hidden, safe="") + "/"
                      + urllib.parse.quote(stored[0], safe=""),
                      headers={"X-Backend-Allow-Reserved-Names": "true"}, timeout=10)
    assert r.status_code == 200 and r.headers["X-Delete-At"] == delete_at


def test_a_bulk_delete_reclaims_variants(cluster, env):
    call, private, _ = env
    name = f"bulk-{uuid.uuid4().hex[:6]}.jpg"
    assert call("PUT", f"/{private}/{name}", data=jpeg((40, 40))).status_code == 201
    assert decoded(get(env, private, name, "resize:width:12")).size[0] == 12
    wait_for(lambda: any(stored_variants(cluster, call.account, private, name)),
             what="the variant stored")
    r = call("POST", "", {"Content-Type": "text/plain", "Accept": "application/json"},
             params={"bulk-delete": ""}, data=f"/{private}/{name}\n".encode())
    assert r.status_code == 200 and r.json()["Number Deleted"] == 1, r.text
    wait_for(lambda: not any(stored_variants(cluster, call.account, private, name)),
             what="the bulk-deleted original's variants reclaimed")


def test_an_animated_gif_stays_animated(env):
    call, private, _ = env
    frames = [Image.new("RGB", (60, 30), c) for c in ((250, 0, 0), (0, 250, 0))]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=[80, 160],
                   loop=0)
    assert call("PUT", f"/{private}/anim.gif", {"Content-Type": "image/gif"},
                data=buf.getvalue()).status_code == 201
    r = get(env, private, "anim.gif", "resize:width:30/format:webp")
    assert r.status_code == 200 and r.headers["Content-Type"] == "image/webp"
    im = Image.open(io.BytesIO(r.content))
    assert getattr(im, "n_frames", 1) == 2 and im.size == (30, 15)


def test_an_overwrite_reclaims_old_variants_never_asked_for_again(cluster, env):
    call, private, _ = env
    name = f"rewritten-{uuid.uuid4().hex[:6]}.jpg"
    assert call("PUT", f"/{private}/{name}", data=jpeg((40, 40))).status_code == 201
    assert decoded(get(env, private, name, "resize:width:10")).size[0] == 10
    wait_for(lambda: any(stored_variants(cluster, call.account, private, name)),
             what="the variant stored")
    assert call("PUT", f"/{private}/{name}", data=jpeg((44, 44))).status_code == 201
    wait_for(lambda: not any(stored_variants(cluster, call.account, private, name)),
             what="the old bytes' variants reclaimed by the overwrite")
