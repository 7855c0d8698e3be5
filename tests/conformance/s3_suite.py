"""ceph's s3-tests: unpacked from its pinned tarball, installed and run by the project itself.

No package registry serves the suite: the tarball lies in `../shared/conformance/` beside
the checkout (S3_TESTS_TARBALL names another). `ensure()` unpacks it, once, and makes a
virtualenv of its own with the suite's dependencies (boto3 and the few more that
`s3tests/functional/test_s3.py` imports), all under `.venv/s3-tests-<rev>/` (S3_SUITE_DIR
elsewhere), so `make clean` removes it; a lock makes two runs starting together install once.
`run()` writes the suite's config for the development users of tempauth and runs pytest on
test_s3.py with RGW's own deselection, writing junit, failures.txt, skips.txt and the pytest
logs into a results dir.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import harness

REV = "8f0ae7b404a3"  # the one place the suite's revision is named (commit 8f0ae7b404a3...)
TARBALL = f"s3-tests-{REV}.tar.gz"
# What test_s3.py and its package import (the suite's requirements.txt also names gevent,
# lxml, httplib2, PyYAML and tox, for its other files and its own runner: not needed here),
# at the versions a run used: a new release of any of them changes no CI run by itself.
REQUIREMENTS = ["boto3==1.44.8", "botocore==1.44.8", "munch==4.0.0", "isodate==0.7.2",
                "pytz==2026.6", "requests==2.34.2", "python-dateutil==2.9.0.post0",
                "pytest==9.2.0", "pytest-timeout==2.4.0"]
HOME = Path(os.environ.get("S3_SUITE_DIR") or harness.REPO / ".venv" / f"s3-tests-{REV}")
VENV = HOME / "venv"
PYTHON = VENV / "bin" / "python"
SRC = HOME / "src"  # the unpacked tarball
READY = HOME / "ready"  # written last: REQUIREMENTS and the tarball's sha256
LOG = HOME / "install.log"
SUITE = "s3tests/functional/test_s3.py"
NAME = f"ceph's s3-tests ({REV})"

# RGW's CI deselection, plus what needs APIs beyond S3 itself (IAM users and accounts,
# bucket logging) or a cloud tier (restore). The suite's S3 Select, append-object and STS
# tests live in other files or carry no test_s3.py test today; their markers are named all
# the same, so a newer suite keeps them out.
DESELECTED = ("fails_on_rgw", "lifecycle_expiration", "lifecycle_transition",
              "cloud_transition", "cloud_restore", "sse_s3", "test_of_sts", "webidentity_test",
              "fails_with_subdomain", "iam_account", "iam_user", "iam_role",
              "iam_cross_account", "iam_tenant", "bucket_logging", "s3select", "appendobject")
MARKERS = " and ".join(f"not {m}" for m in DESELECTED)
SELECTED = 612  # tests that MARKERS keeps of test_s3.py at REV
# Tests that need the main user to own no bucket but their own (they list the account):
# run alone after the others, which run side by side in shards.
SERIAL = ("test_list_buckets_paginated",)
# How long each slow test took (seconds, from a run's junit: `run_s3.py --write-durations`),
# so the shards are dealt even loads: dealt in turn, five 70-100 s tests (a thousand
# sequential PUTs each) left one shard three minutes behind the other.
DURATIONS = Path(__file__).resolve().parent / "s3_durations.txt"
MIN_KEPT = 2.0  # a test quicker than this counts as DEFAULT_SECONDS: not worth a line
DEFAULT_SECONDS = 1.0
# Seconds, unless S3_TIMEOUT / S3_TEST_TIMEOUT say otherwise: the whole run (a hung or far
# too slow run fails within CI's budget rather than using it up), and one test (the
# slowest here copy 8 MiB objects or sleep a few seconds).
TIMEOUT = "1500"
TEST_TIMEOUT = "120"

# tempauth's development users, as swiftlite's S3 front end knows them: the access key is
# "account:user", the secret its password, and a user's id and display name are its
# "account:user" (as Swift's s3api names owners). The suite empties each of its three users'
# buckets before every test, so each must be able to list its account: an .admin user.
# `swiftlite up` has two such accounts (test5:tester5 is no admin of test5), so the tenant,
# a third user that RGW puts in a tenant of its own, is test:tester2, main's account's
# other admin. The IAM sections are read when the suite starts but serve only deselected
# tests (and a teardown that ignores their errors): keys no user has.
CONFIG = """\
[DEFAULT]
host = {host}
port = {port}
is_secure = False
ssl_verify = False

[fixtures]
bucket prefix = s3tests-{{random}}-

[s3 main]
display_name = test:tester
user_id = test:tester
email = tester@example.com
access_key = test:tester
secret_key = testing
# SSE-KMS key ids: `swiftlite up`'s kms_root_secret derives a key for any id.
kms_keyid = testkey-1
kms_keyid2 = testkey-2

[s3 alt]
display_name = test2:tester2
user_id = test2:tester2
email = tester2@example.com
access_key = test2:tester2
secret_key = testing2

[s3 tenant]
display_name = test:tester2
user_id = test:tester2
email = tester2@test.example.com
access_key = test:tester2
secret_key = testing2
tenant = test

[iam]
display_name = unused
user_id = unused
email = unused@example.com
access_key = unused-iam
secret_key = unused

[iam root]
user_id = unused-root
email = unused-root@example.com
access_key = unused-iam-root
secret_key = unused

[iam alt root]
user_id = unused-alt-root
email = unused-alt-root@example.com
access_key = unused-iam-alt-root
secret_key = unused
"""


# -- install ----------------------------------------------------------------------------------

def tarball() -> Path | None:
    """The suite's tarball: S3_TESTS_TARBALL (which must exist), else ../shared/conformance/
    beside the checkout; None where neither is (a bare clone)."""
    named = os.environ.get("S3_TESTS_TARBALL")
    if named:
        if not Path(named).is_file():
            raise SystemExit(f"conformance: FAILED: S3_TESTS_TARBALL={named} is not a file")
        return Path(named).resolve()
    path = harness.REPO.parent / "shared" / "conformance" / TARBALL
    return path if path.is_file() else None


def ensure(tar: Path) -> None:
    """Unpack and install the suite unless it is in place; exits with one line if that fails."""
    stamp = "\n".join([*REQUIREMENTS, _sha256(tar)]) + "\n"
    if _ready(stamp):
        return
    with harness.install_lock(HOME):
        if _ready(stamp):  # another run did it
            return
        print(f"conformance: installing {NAME} into {HOME} (once; pip's output in {LOG})",
              flush=True)
        READY.unlink(missing_ok=True)
        LOG.write_text("")
        _unpack(tar)
        if not PYTHON.exists():
            _step("make a virtualenv for it", [sys.executable, "-m", "venv", str(VENV)])
        _step(f"install {' '.join(REQUIREMENTS)}",
              [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check",
               *REQUIREMENTS])
        READY.write_text(stamp)
        print(f"conformance: {NAME} is ready", flush=True)


def _ready(stamp: str) -> bool:
    try:
        return READY.read_text() == stamp and PYTHON.exists() and (SRC / SUITE).is_file()
    except OSError:
        return False


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _step(what: str, cmd: list[str]) -> None:
    harness.step(what, cmd, LOG, NAME)


def _unpack(tar: Path) -> None:
    """tar's one top directory, holding the suite, becomes SRC (whole or not at all)."""
    tmp = Path(tempfile.mkdtemp(prefix="unpack-", dir=HOME))
    try:
        try:
            with tarfile.open(tar) as t:
                if hasattr(tarfile, "data_filter"):
                    t.extractall(tmp, filter="data")
                else:  # Python before 3.11.4
                    t.extractall(tmp)
        except (OSError, tarfile.TarError) as e:
            raise SystemExit(f"conformance: FAILED: could not unpack {tar} ({e})") from None
        top = [p for p in tmp.iterdir() if p.is_dir()]
        if len(top) != 1 or not (top[0] / SUITE).is_file():
            raise SystemExit(f"conformance: FAILED: {tar} holds no */{SUITE}")
        shutil.rmtree(SRC, ignore_errors=True)
        top[0].rename(SRC)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- run --------------------------------------------------------------------------------------

def node_id(classname: str, name: str) -> str:
    """junit's 's3tests.functional.test_s3', 'test_x[p]' -> the pytest node id
    's3tests/functional/test_s3.py::test_x[p]' (test_s3.py's tests are all functions)."""
    if not classname:  # a collection error: junit names the module in `name`
        return name.replace(".", "/") + ".py"
    return f"{classname.replace('.', '/')}.py::{name}"


def run(host: str, port: int, tests: list[str] | None, results: Path,
        shards: int) -> harness.Results:
    """The suite against http://host:port: every selected test (tests None), dealt in turn to
    `shards` pytest processes that run side by side, then SERIAL alone; or just `tests` (node
    ids) in one process. S3_TIMEOUT bounds it all and S3_TEST_TIMEOUT each test. Exits
    loudly if pytest did not finish or the selection is not SELECTED tests."""
    shutil.rmtree(results, ignore_errors=True)  # a failed run must not leave an older one
    results.mkdir(parents=True)
    conf = results / "s3tests.conf"
    conf.write_text(CONFIG.format(host=host, port=port))
    deadline = time.monotonic() + float(os.environ.get("S3_TIMEOUT", TIMEOUT))
    print(f"conformance: {NAME} against http://{host}:{port} (logs in {results})", flush=True)
    if tests is not None:
        passes = [{"": tests}]
    else:
        ids = _collect(conf, results / "collect.log", deadline)
        if len(ids) != SELECTED:
            raise SystemExit(f"conformance: FAILED: the selection holds {len(ids)} tests, not "
                             f"{SELECTED} (a collection error, or a new suite whose selection "
                             f"was not checked: see {results / 'collect.log'})")
        alone = [t for t in ids if t.rpartition("::")[2] in SERIAL]
        rest = [t for t in ids if t not in alone]
        dealt = deal(rest, max(shards, 1), read_durations())
        passes = [{f"-{k}": part for k, part in enumerate(dealt)}, {"-serial": alone}]
    out = harness.Results()
    for part in passes:
        out.add(_side_by_side(part, conf, results, deadline))
    harness.write_summary(results, out)
    print(f"conformance: {NAME}: {out.counts()}", flush=True)
    return out


def read_durations() -> dict[str, float]:
    out = {}
    if DURATIONS.exists():
        for line in DURATIONS.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                secs, _, name = line.partition(" ")
                out[name.strip()] = float(secs)
    return out


def deal(ids: list[str], n: int, durations: dict[str, float]) -> list[list[str]]:
    """`ids` in `n` shards of about equal expected time: longest first, each to the shard
    with the least so far (ties in the suite's order, so the same file deals the same way
    every run), each shard then in the suite's order."""
    order = {t: i for i, t in enumerate(ids)}

    def secs(t: str) -> float:
        return durations.get(t.rpartition("::")[2], DEFAULT_SECONDS)

    loads = [0.0] * n
    shards: list[list[str]] = [[] for _ in range(n)]
    for t in sorted(ids, key=lambda t: (-secs(t), order[t])):
        k = min(range(n), key=lambda k: (loads[k], k))
        loads[k] += secs(t)
        shards[k].append(t)
    return [sorted(s, key=order.__getitem__) for s in shards]


def write_durations(results: Path) -> int:
    """Rewrite DURATIONS from the junit files of a whole run in `results`."""
    times: dict[str, float] = {}
    for junit in sorted(results.glob("junit-*.xml")):
        for case in ET.parse(junit).getroot().iter("testcase"):
            times[case.get("name", "")] = float(case.get("time", 0))
    if not times:
        print(f"conformance: no junit files in {results}", file=sys.stderr)
        return 1
    kept = sorted(((s, t) for t, s in times.items() if s >= MIN_KEPT), reverse=True)
    DURATIONS.write_text(f"# seconds test: the s3-tests that took {MIN_KEPT:g} s or more in "
                         "one run (run_s3.py --write-durations)\n"
                         + "".join(f"{s:.1f} {t}\n" for s, t in kept))
    print(f"conformance: {len(kept)} durations written to {DURATIONS}")
    return 0


def _collect(conf: Path, log: Path, deadline: float) -> list[str]:
    """The selected tests' node ids, in the suite's order."""
    proc = _start(["--collect-only", SUITE], conf, log)
    try:
        _wait(proc, deadline, log)
    finally:
        harness.kill_group(proc)
    return [line for line in log.read_text().splitlines() if line.startswith(f"{SUITE}::")]


def _side_by_side(parts: dict[str, list[str]], conf: Path, results: Path,
                  deadline: float) -> harness.Results:
    """One pytest process for each part (junit<suffix>.xml, pytest<suffix>.log), at once.
    Each chooses its own bucket prefix, so none empties another's buckets; each runs its
    tests in the same order every time (the suite empties a process's buckets before each
    test, so a bucket that cannot be deleted fails the rest of that process's tests: which
    ones must not change from run to run)."""
    procs: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    try:
        for suffix, ids in parts.items():
            if not ids:
                continue
            listed = results / f"tests{suffix}.txt"  # pytest reads its args from @file
            listed.write_text("".join(f"{t}\n" for t in ids))
            junit, log = results / f"junit{suffix}.xml", results / f"pytest{suffix}.log"
            procs.append((_start([f"--junitxml={junit}", f"@{listed}"], conf, log), junit, log))
        for proc, _, log in procs:
            _wait(proc, deadline, log)
    finally:
        for proc, _, _ in procs:  # interrupted (Ctrl-C, SIGTERM): pytest must not outlive us
            harness.kill_group(proc)
    out = harness.Results()
    for _, junit, log in procs:
        try:
            out.add(harness.read_junit(junit, node_id))
        except (OSError, ET.ParseError) as e:
            raise SystemExit(f"conformance: FAILED: the suite did not run or did not finish "
                             f"({e}); see {log}") from None
    return out


def _start(args: list[str], conf: Path, log: Path) -> subprocess.Popen[bytes]:
    """pytest in SRC with no stdin, in a session of its own, its output in log."""
    env = harness.suite_env(S3TEST_CONF=str(conf))
    for key in [k for k in env if k.startswith("AWS_")]:  # no profile, region or keys of ours
        del env[key]
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    cmd = [str(PYTHON), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", MARKERS,
           f"--timeout={os.environ.get('S3_TEST_TIMEOUT', TEST_TIMEOUT)}", *args]
    with open(log, "wb") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        return subprocess.Popen(cmd, cwd=SRC, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _wait(proc: subprocess.Popen[bytes], deadline: float, log: Path) -> None:
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        limit = os.environ.get("S3_TIMEOUT", TIMEOUT)
        raise SystemExit(f"conformance: FAILED: the suite ran past S3_TIMEOUT={limit}s; "
                         f"see {log}") from None
