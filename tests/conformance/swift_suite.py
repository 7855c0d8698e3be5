"""Swift's own functional suite: fetched, installed and run by the project itself.

`ensure()` makes, once, a virtualenv of its own with Swift (its dependencies bring eventlet
and more, kept out of the project's venv), python-swiftclient and pytest, and unpacks
Swift's sdist, whose test/functional is the suite; all under `.venv/swift-<version>/`
(SWIFT_SUITE_DIR elsewhere), so `make clean` removes it. It takes a lock, so two runs
starting together install once. `run()` points the suite at an endpoint with a test.conf
for the development users of tempauth and runs pytest, writing junit.xml, failures.txt
("FAIL|ERROR <id> :: <message>"), skips.txt and pytest.log into a results dir.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import harness

SWIFT_VERSION = "2.38.3"  # the one place the suite's version is named
# The versions a passing run used: a new release of a test tool changes no CI run by itself.
REQUIREMENTS = [f"swift=={SWIFT_VERSION}", "python-swiftclient==4.11.0", "pytest==9.2.0",
                "pytest-timeout==2.4.0"]
HOME = Path(os.environ.get("SWIFT_SUITE_DIR") or harness.REPO / ".venv" / f"swift-{SWIFT_VERSION}")
VENV = HOME / "venv"
PYTHON = VENV / "bin" / "python"
SDIST = HOME / "sdist" / f"swift-{SWIFT_VERSION}.tar.gz"  # the download, kept
SRC = HOME / "src"  # the unpacked sdist: test/functional is the suite
READY = HOME / "ready"  # written last, holding REQUIREMENTS: all of the above is in place
LOG = HOME / "install.log"

# The users of swiftlite's (and Swift's all-in-one) tempauth, as the suite names them.
CONFIG = """\
[func_test]
auth_host = {host}
auth_port = {port}
auth_ssl = no
auth_prefix = /auth/
auth_version = 1
account = test
username = tester
password = testing
account2 = test2
username2 = tester2
password2 = testing2
username3 = tester3
password3 = testing3
account5 = test5
username5 = tester5
password5 = testing5
service_prefix = SERVICE
account6 = admin
username6 = admin
password6 = admin
collate = C
insecure = no
storage_domain =

[unit_test]
fake_syslog = False
"""

_running: set[subprocess.Popen[bytes]] = set()  # the pytest runs going on, for stop_all
_running_lock = threading.Lock()


# -- install ----------------------------------------------------------------------------------

def ensure() -> None:
    """Install the suite unless it is in place; exits with one line if that fails."""
    if _ready():
        return
    with harness.install_lock(HOME):
        if _ready():  # the other run did it
            return
        print(f"conformance: installing Swift {SWIFT_VERSION}'s functional suite into "
              f"{HOME} (once; pip's output in {LOG})", flush=True)
        LOG.write_text("")
        if not PYTHON.exists():
            _step("make a virtualenv for it", [sys.executable, "-m", "venv", str(VENV)])
        _step(f"install {' '.join(REQUIREMENTS)}",
              [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check",
               *REQUIREMENTS])
        if not SDIST.exists():
            _download_sdist()
        if not (SRC / "test" / "functional" / "__init__.py").exists():
            _unpack_sdist()
        READY.write_text("\n".join(REQUIREMENTS) + "\n")
        print(f"conformance: Swift {SWIFT_VERSION}'s functional suite is ready", flush=True)


def _ready() -> bool:
    try:
        listed = READY.read_text().split()
    except OSError:
        return False
    return listed == REQUIREMENTS and PYTHON.exists() and (SRC / "test" / "functional").is_dir()


def _step(what: str, cmd: list[str]) -> None:
    harness.step(what, cmd, LOG, f"Swift {SWIFT_VERSION}'s functional suite")


def _download_sdist() -> None:
    """Swift's source distribution (the wheel has no tests) from the package index."""
    SDIST.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="download-", dir=HOME))
    try:
        _step(f"download the swift=={SWIFT_VERSION} sdist",
              [str(PYTHON), "-m", "pip", "download", "--disable-pip-version-check",
               "--no-binary", ":all:", "--no-deps", "--dest", str(tmp),
               f"swift=={SWIFT_VERSION}"])
        got = sorted(tmp.glob("swift-*.tar.gz"))
        if not got:
            raise SystemExit(f"conformance: FAILED: pip downloaded no swift-*.tar.gz for "
                             f"swift=={SWIFT_VERSION} (see {LOG})")
        os.replace(got[0], SDIST)  # whole or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack_sdist() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="unpack-", dir=HOME))
    try:
        try:
            with tarfile.open(SDIST) as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(tmp, filter="data")
                else:  # Python before 3.11.4
                    tar.extractall(tmp)
        except (OSError, tarfile.TarError) as e:
            SDIST.unlink(missing_ok=True)  # a bad download: fetch it again next time
            raise SystemExit(f"conformance: FAILED: could not unpack {SDIST} ({e})") from None
        top = [p for p in tmp.iterdir() if p.is_dir()]
        if len(top) != 1 or not (top[0] / "test" / "functional").is_dir():
            raise SystemExit(f"conformance: FAILED: {SDIST} holds no test/functional")
        shutil.rmtree(SRC, ignore_errors=True)
        top[0].rename(SRC)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- run --------------------------------------------------------------------------------------

def targets(tests: str) -> list[str]:
    """FUNC_TESTS -> pytest args: files or node ids under test/functional; "all" for every
    file but test_domain_remap.py (and s3api/, a directory)."""
    functional = SRC / "test" / "functional"
    if tests == "all":
        names = sorted(p.name for p in functional.glob("test_*.py")
                       if p.name != "test_domain_remap.py")
        return ["test/functional/tests.py"] + [f"test/functional/{n}" for n in names]
    return [f"test/functional/{t}" for t in tests.split()]


def run(host: str, port: int, tests: str, results: Path) -> None:
    """The suite against http://host:port/auth/v1.0; its files in `results`. FUNC_TIMEOUT
    (seconds, default 1800) bounds the whole run and TEST_TIMEOUT (300) each test."""
    ensure()
    results.mkdir(parents=True, exist_ok=True)
    conf = results / "test.conf"
    conf.write_text(CONFIG.format(host=host, port=port))
    env = harness.suite_env(SWIFT_TEST_CONFIG_FILE=str(conf), SWIFT_TEST_IN_PROCESS="0")
    cmd = [str(PYTHON), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE",
           f"--junitxml={results / 'junit.xml'}",
           f"--timeout={os.environ.get('TEST_TIMEOUT', '300')}", *targets(tests)]
    limit = float(os.environ.get("FUNC_TIMEOUT", "1800"))
    print(f"conformance: Swift {SWIFT_VERSION}'s suite against http://{host}:{port}/auth/v1.0 "
          f"(log {results / 'pytest.log'})", flush=True)
    with open(results / "pytest.log", "wb") as log:
        # A session of its own: stop_all and the timeout end pytest and anything it started.
        proc = subprocess.Popen(cmd, cwd=SRC, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    with _running_lock:
        _running.add(proc)
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        harness.kill_group(proc)
        (results / "junit.xml").unlink(missing_ok=True)
        raise SystemExit(f"conformance: FAILED: the suite ran past FUNC_TIMEOUT={limit:g}s; "
                         f"see {results / 'pytest.log'}") from None
    finally:
        harness.kill_group(proc)  # interrupted (Ctrl-C, SIGTERM): pytest must not outlive us
        with _running_lock:
            _running.discard(proc)
    summarize(results)


def stop_all() -> None:
    """End every suite run in progress (their run() calls then return)."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        harness.kill_group(proc)


def summarize(results: Path) -> None:
    """junit.xml -> failures.txt and skips.txt, and a line of counts. No junit.xml (pytest
    did not finish) writes nothing: the caller says the suite did not run."""
    try:
        res = harness.read_junit(results / "junit.xml")
    except (OSError, ET.ParseError):
        return
    harness.write_summary(results, res)
    print(f"conformance: suite in {results}: {res.counts()}", flush=True)
