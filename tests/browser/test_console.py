"""The web console in a real browser: Debian's chromium, driven by its chromium-driver through
Selenium, against a real all-in-one cluster (whose proxy serves the console at /console/).

Skipped, saying why, where chromium or its driver is missing (`make test` installs both where
it runs as root). CONSOLE_SCREENSHOTS=DIR also saves the README's screenshots there.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import time
from collections.abc import Iterator

import pytest
import requests
from PIL import Image

from tests.cluster import Cluster, start_cluster, swift_api

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium and chromium-driver are not installed (apt-get install chromium "
           "chromium-driver)")
WAIT = 30.0


def jpeg(size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "JPEG", quality=80)
    return out.getvalue()


def tar_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    # With screenshots to take, the daemons run too, so the cluster page shows a cluster at
    # work rather than a list of daemons that never started.
    c = start_cluster(str(tmp_path_factory.mktemp("console")), nodes=2, devices=2,
                      replicas=2, part_power=6,
                      daemons=bool(os.environ.get("CONSOLE_SCREENSHOTS")))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--no-first-run", "--disable-extensions",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(DRIVER))
    driver.set_page_load_timeout(WAIT)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots() -> str | None:
    where = os.environ.get("CONSOLE_SCREENSHOTS")
    if where:
        os.makedirs(where, exist_ok=True)
    return where


def wait(driver, cond, timeout: float = WAIT, what: str = "the page"):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(
        cond, message=f"waited {timeout}s for {what}")


def css(driver, selector: str):
    return driver.find_elements(By.CSS_SELECTOR, selector)


def severe_logs(driver) -> list[str]:
    """The browser console's errors (a CSP violation, a script error, a failed fetch)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def listed(driver) -> str:
    """`container|marker|rows` of the listing the page last laid out ('' before any)."""
    return driver.execute_script("return document.body.dataset.listed") or ""


def sign_in(driver, cluster: Cluster, user: str, key: str, s3: bool = False) -> None:
    driver.get(cluster.proxy_url + "/console/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(cluster.proxy_url + "/console/#/")
    wait(driver, lambda d: d.find_element(By.ID, "login").is_displayed(), what="the sign-in form")
    if s3:
        driver.find_element(By.ID, "tab-s3").click()
    driver.find_element(By.ID, "login-user").send_keys(user)
    driver.find_element(By.ID, "login-key").send_keys(key)
    driver.find_element(By.ID, "login-submit").click()
    wait(driver, lambda d: d.find_element(By.ID, "bar").is_displayed(), what="signing in")


def go(driver, cluster: Cluster, route: str) -> None:
    driver.execute_script("location.hash = arguments[0]", route)


def shot(driver, shots: str | None, name: str) -> None:
    if shots:
        driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        driver.save_screenshot(os.path.join(shots, name))


def test_sign_in_create_container_upload_three_images(cluster, browser, tmp_path, shots):
    call = swift_api(cluster)
    sign_in(browser, cluster, "test:tester", "testing")
    token = browser.execute_script("return sessionStorage.getItem('swiftlite.console')")
    assert "AUTH_tk" in token and "AUTH_tk" not in browser.current_url
    # The account page is laid out once its listing arrives, after the bar is shown.
    wait(browser, lambda d: d.find_elements(By.ID, "new-container"), what="the account page")
    browser.find_element(By.ID, "new-container").send_keys("photos")
    browser.find_element(By.ID, "create-container").click()
    wait(browser, lambda d: d.find_elements(By.ID, "file-input"), what="the new container")
    assert call("HEAD", "/photos").status_code == 204
    paths = []
    for i, color in enumerate([(220, 40, 40), (40, 160, 60), (30, 80, 220)]):
        p = tmp_path / f"pic{i}.jpg"
        p.write_bytes(jpeg((800, 600), color))
        paths.append(str(p))
    browser.find_element(By.ID, "file-input").send_keys("\n".join(paths))
    loaded = "return [...document.querySelectorAll('#thumbs img')]" \
             ".filter(i => i.complete && i.naturalWidth > 0).map(i => [i.alt, i.naturalWidth])"
    wait(browser, lambda d: len(d.execute_script(loaded)) == 3, what="three thumbnails")
    thumbs = dict(browser.execute_script(loaded))
    assert set(thumbs) == {"pic0.jpg", "pic1.jpg", "pic2.jpg"}
    # Thumbnails are image variants (256 px wide at most), not the 800 px originals.
    assert all(0 < w <= 256 for w in thumbs.values()), thumbs
    for i, p in enumerate(paths):
        r = call("GET", f"/photos/pic{i}.jpg")
        assert r.status_code == 200 and r.content == open(p, "rb").read()
        assert r.headers["Content-Type"] == "image/jpeg"
    wait(browser, lambda d: "3 objects" in d.find_element(By.CSS_SELECTOR, ".toolbar").text,
         what="the container's count")
    assert "null" not in browser.find_element(By.ID, "main").text
    shot(browser, shots, "console-images.png")
    go(browser, cluster, "#/")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#containers tr[data-name=photos]"),
         what="the container list")
    shot(browser, shots, "console-containers.png")
    assert severe_logs(browser) == []


def test_pages_through_2500_objects_by_marker(cluster, browser):
    call = swift_api(cluster)
    names = [f"doc-{i:05d}.txt" for i in range(2500)]
    r = call("PUT", "/many", params={"extract-archive": "tar"},
             data=tar_of({n: n.encode() for n in names}), headers={"Accept": "application/json"})
    assert r.status_code in (200, 201), r.text
    assert r.json()["Number Files Created"] == 2500
    sign_in(browser, cluster, "test:tester", "testing")
    go(browser, cluster, "#/c/many?limit=1000")
    seen: list[str] = []
    for page in range(3):
        marker = seen[-1] if seen else ""
        wait(browser, lambda d, m=marker: listed(d).startswith(f"many|{m}|"),
             what=f"page {page + 1}")
        rows = browser.execute_script(
            "return [...document.querySelectorAll('#objects tr[data-name]')]"
            ".map(r => r.dataset.name)")
        assert len(rows) == (1000 if page < 2 else 500)
        seen += rows
        nxt = browser.find_element(By.ID, "page-next")
        if page < 2:
            assert nxt.is_enabled()
            nxt.click()
        else:
            assert not nxt.is_enabled()
    assert seen == names
    # Back one page: the second page again, by its marker.
    browser.find_element(By.ID, "page-prev").click()
    wait(browser, lambda d: listed(d).startswith(f"many|{names[999]}|1000"),
         what="the previous page")


def test_temp_url_made_in_the_browser_fetches_the_object(cluster, browser, shots):
    call = swift_api(cluster)
    body = jpeg((640, 480), (10, 120, 200))
    assert call("PUT", "/shared", headers={}).status_code in (201, 202)
    assert call("PUT", "/shared/dir/ph oto ü.jpg", data=body,
                headers={"Content-Type": "image/jpeg", "X-Object-Meta-Camera": "x100"}
                ).status_code == 201
    call("POST", "", headers={"X-Remove-Account-Meta-Temp-URL-Key": "x"})
    sign_in(browser, cluster, "test:tester", "testing")
    go(browser, cluster, "#/o/shared/dir/ph%20oto%20%C3%BC.jpg")
    wait(browser, lambda d: d.find_elements(By.ID, "make-tempurl"), what="the object page")
    meta = browser.find_element(By.ID, "object-meta").text
    assert "x100" in meta and str(len(body)) in meta
    browser.find_element(By.ID, "make-tempurl").click()
    # The account has no temp URL key yet: the page offers to make one.
    wait(browser, EC.alert_is_present(), what="the offer of a key")
    assert "no temp URL key" in browser.switch_to.alert.text
    browser.switch_to.alert.accept()
    wait(browser, lambda d: d.find_element(By.ID, "tempurl").get_attribute("value"),
         what="the temp URL")
    assert call("HEAD", "").headers.get("X-Account-Meta-Temp-Url-Key")
    url = browser.find_element(By.ID, "tempurl").get_attribute("value")
    assert "temp_url_sig=" in url and "X-Auth-Token" not in url
    r = requests.get(url, timeout=10)  # no token: the signature alone
    assert r.status_code == 200 and r.content == body
    # The link is for this object only.
    assert requests.get(url.replace("ph%20oto", "other"), timeout=10).status_code == 401
    shot(browser, shots, "console-object.png")


def test_large_file_goes_up_as_slo_segments(cluster, browser, tmp_path):
    call = swift_api(cluster)
    call("PUT", "/big")
    data = os.urandom(2 * 1024 * 1024 + 12345)
    p = tmp_path / "movie.bin"
    p.write_bytes(data)
    sign_in(browser, cluster, "test:tester", "testing")
    browser.execute_script("sessionStorage.setItem('swiftlite.console.segment', '1048576')")
    go(browser, cluster, "#/c/big")
    wait(browser, lambda d: d.find_elements(By.ID, "file-input"), what="the container")
    browser.find_element(By.ID, "file-input").send_keys(str(p))
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#objects tr[data-name='movie.bin']"),
         what="the uploaded file")
    head = call("HEAD", "/big/movie.bin")
    assert head.headers.get("X-Static-Large-Object") == "True"
    assert call("GET", "/big/movie.bin").content == data
    segs = call("GET", "/big_segments", params={"format": "json"}).json()
    assert len(segs) == 3


def test_operator_page_lists_every_node(cluster, browser, shots):
    sign_in(browser, cluster, "admin:admin", "admin")
    assert browser.find_element(By.ID, "nav-ops").is_displayed()
    go(browser, cluster, "#/ops")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#ops-servers tr.server"),
         what="the servers table")
    shown = set(browser.execute_script(
        "return [...document.querySelectorAll('#ops-servers tr.server')].map(r => r.dataset.host)"))
    hosts = {f"{n['ip']}:{s['port']}" for n in cluster.nodes for s in n["servers"].values()}
    assert hosts <= shown, (hosts, shown)
    states = browser.execute_script(
        "return [...document.querySelectorAll('#ops-servers tr.server .pill')]"
        ".map(p => p.textContent)")
    assert set(states) == {"up"}
    assert browser.execute_script("return document.querySelectorAll('#ops-rings tbody tr').length"
                                  " && document.querySelectorAll('#ops-devices tbody tr').length")
    # A second report draws the request-rate chart from the counters' differences.
    call = swift_api(cluster)
    for i in range(40):
        call("HEAD" if i % 4 else "GET", "")
    # (For the README's picture, a line of a few points: 10 s more.)
    points = 3 if shots else 1
    # Read in one script: the page redraws every 5 s, which makes held elements stale.
    most = "return Math.max(0, ...[...document.querySelectorAll('svg.chart polyline')]" \
           ".map(p => p.getAttribute('points').split(' ').length))"
    wait(browser, lambda d: d.execute_script(most) >= points, timeout=20 + 5 * points,
         what="a chart line")
    shot(browser, shots, "console-cluster.png")
    assert severe_logs(browser) == []


def test_a_user_without_rights_sees_no_other_account(cluster, browser):
    call = swift_api(cluster)
    call("PUT", "/secret-box")
    call("PUT", "/secret-box/plans.txt", data=b"mine")
    sign_in(browser, cluster, "test2:tester2", "testing2")
    assert not browser.find_element(By.ID, "nav-ops").is_displayed()
    wait(browser, lambda d: d.find_elements(By.ID, "containers"), what="test2's containers")
    assert "secret-box" not in browser.page_source
    # Point the page at test's account by hand: the proxy refuses test2's token there.
    browser.execute_script("""
        const s = JSON.parse(sessionStorage.getItem('swiftlite.console'));
        s.storageUrl = s.storageUrl.replace('AUTH_test2', 'AUTH_test');
        sessionStorage.setItem('swiftlite.console', JSON.stringify(s));
        location.hash = '#/c/secret-box';""")
    wait(browser, lambda d: "Could not load this page" in d.find_element(By.ID, "main").text,
         what="the refusal")
    assert "plans.txt" not in browser.page_source
    token = browser.execute_script(
        "return JSON.parse(sessionStorage.getItem('swiftlite.console')).token")
    r = requests.get(cluster.proxy_url + "/console/api/cluster",
                     headers={"X-Auth-Token": token}, timeout=10)
    assert r.status_code == 403 and "servers" not in r.text
    # test:tester3 has no .admin: its own account is closed to it without an ACL.
    sign_in(browser, cluster, "test:tester3", "testing3")
    wait(browser, lambda d: "Could not load this page" in d.find_element(By.ID, "main").text,
         what="tester3's refusal")
    assert "secret-box" not in browser.page_source and "photos" not in browser.page_source


def test_s3_key_sign_in_and_sign_out(cluster, browser):
    call = swift_api(cluster)
    call("PUT", "/s3-visible")
    sign_in(browser, cluster, "test:tester", "testing", s3=True)
    wait(browser, lambda d: css(d, "#containers tr[data-name=s3-visible]"), what="the containers")
    browser.find_element(By.ID, "logout").click()
    wait(browser, lambda d: d.find_element(By.ID, "login").is_displayed(), what="signing out")
    assert browser.execute_script("return sessionStorage.getItem('swiftlite.console')") is None
    # A wrong secret is refused, and says so.
    browser.find_element(By.ID, "tab-s3").click()
    browser.find_element(By.ID, "login-user").send_keys("test:tester")
    browser.find_element(By.ID, "login-key").send_keys("wrong")
    browser.find_element(By.ID, "login-submit").click()
    wait(browser, lambda d: "wrong secret" in d.find_element(By.ID, "login-error").text,
         what="the refusal")


def test_first_paint_of_1000_images(cluster, browser):
    """A benchmark line, not a timed assertion: how long the listing of a 1,000-image
    container takes to lay out, and the first screen of thumbnails to arrive."""
    call = swift_api(cluster)
    pic = jpeg((320, 240), (200, 200, 40))
    r = call("PUT", "/gallery", params={"extract-archive": "tar"},
             data=tar_of({f"img-{i:04d}.jpg": pic for i in range(1000)}),
             headers={"Accept": "application/json"})
    assert r.json()["Number Files Created"] == 1000
    sign_in(browser, cluster, "test:tester", "testing")
    t0 = time.monotonic()
    go(browser, cluster, "#/c/gallery?limit=1000")
    wait(browser, lambda d: listed(d).startswith("gallery||1000"), what="the listing")
    wait(browser, lambda d: d.execute_script("return window.consoleTimings.paint"), what="paint")
    timings = browser.execute_script("return window.consoleTimings")
    visible = "return [...document.querySelectorAll('#thumbs img')].filter(i => i.complete).length"
    wait(browser, lambda d: d.execute_script(visible) >= 12, timeout=60, what="thumbnails")
    first_screen = time.monotonic() - t0
    print(f"\nconsole first paint, 1,000-image container: listing laid out in "
          f"{timings['listing']:.0f} ms, painted in {timings['paint']:.0f} ms; first screen of "
          f"thumbnails (12, computed as variants) in {first_screen * 1000:.0f} ms")
    assert timings["rows"] == 1000


def test_the_pages_own_sha256_matches_pythons(cluster, browser):
    """Temp URLs signed on a page served over plain http from a LAN address, where the
    browser offers no WebCrypto, use the console's own HMAC-SHA256."""
    import hashlib
    import hmac

    browser.get(cluster.proxy_url + "/console/")
    cases = [("key", ""), ("k" * 100, "GET\n1700000000\n/v1/AUTH_test/c/ü ö.jpg"),
             ("secret", "x" * 1000), ("ключ", "a" * 55), ("", "b" * 64)]
    got = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('./hmac.js').then(m => done(arguments[0].map(([k, v]) => m._test.hmacHex(k, v))));
    """, cases)
    want = [hmac.new(k.encode(), m.encode(), hashlib.sha256).hexdigest() for k, m in cases]
    assert got == want
