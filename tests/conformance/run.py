"""Swift's functional suite against a fresh `swiftlite up`, gated by a list of known failures.

usage: run.py [--core] [--write-expected]

Starts `swiftlite up --port 0` in a temp dir, runs Swift's functional suite against it
(swift_suite.py fetches and installs it on first use; FUNC_TESTS: files of test/functional,
or "all"; default the CI set, CORE: the four core files and the files of every feature
built; `--core` forces it), stops the cluster whatever happens, and compares the failures
with expected_failures.txt. Unexpected failures are rerun once by id (some suite tests poll
for eventual consistency) before the run fails. `--write-expected` rewrites the list from
the last run instead of running. SWIFT_ANCHORS=DIR runs DIR/functests.sh (same interface)
instead of the project's own runner.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harness
import swift_suite

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected_failures.txt"
LAST = HERE / "last-run"  # results of the last run (gitignored), read by --write-expected
# What CI runs: the four core files and those of every feature built (large objects,
# sharing, web serving and history). Only s3api and domain_remap are left out.
CORE = " ".join([
    "tests.py", "test_object.py", "test_container.py", "test_account.py",
    "test_slo.py", "test_dlo.py",
    "test_tempurl.py", "test_staticweb.py", "test_symlink.py",
    "test_versioned_writes.py", "test_object_versioning.py", "test_access_control.py",
    "test_protocol.py",
])
MAX_RERUN = 50  # more unexpected failures than this is a broken build, not flakiness
# Seconds each file took in a CI run (2 cores): the files are dealt to CONFORMANCE_SHARDS
# clusters (default 2), run side by side, longest first onto the least loaded.
WEIGHTS = {
    "test_object_versioning.py": 116, "tests.py": 95, "test_symlink.py": 45,
    "test_slo.py": 31, "test_versioned_writes.py": 27, "test_object.py": 16,
    "test_tempurl.py": 6, "test_container.py": 5, "test_account.py": 4, "test_dlo.py": 3,
    "test_staticweb.py": 2,
}


def test_file(test_id: str) -> str:
    """'test.functional.tests.TestAccount::x' -> 'tests.py' (the suite file it lives in)."""
    module = test_id.split("::")[0].rsplit(".", 1)[0]
    return module.removeprefix("test.functional.").replace(".", "/") + ".py"


def node_id(test_id: str) -> str:
    """The id as functests.sh prints it -> a pytest node relative to test/functional."""
    cls, name = test_id.split("::", 1)
    if "." not in cls:  # a collection error ('::test.functional.test_x'): its whole file
        return name.removeprefix("test.functional.").replace(".", "/") + ".py"
    return f"{test_file(test_id)}::{cls.rsplit('.', 1)[1]}::{name}"


# -- the suite --------------------------------------------------------------------------------

def functests() -> Path | None:
    """SWIFT_ANCHORS/functests.sh where SWIFT_ANCHORS is set, else None: the project's own
    runner (swift_suite)."""
    anchors = os.environ.get("SWIFT_ANCHORS")
    if not anchors:
        return None
    script = Path(anchors) / "functests.sh"
    if not script.exists():
        raise SystemExit(f"conformance: FAILED: {script} not found (SWIFT_ANCHORS names a "
                         "directory holding a functests.sh; unset it to use tests/conformance/"
                         "swift_suite.py)")
    return script


def prepare() -> None:
    """Before any cluster starts: the suite is installed, or the override script is there."""
    if functests() is None:
        swift_suite.ensure()


def run_suite(host: str, port: int, tests: str, results: Path) -> dict[str, str]:
    """Run the suite; {failed test id: message}. Exits loudly if the suite did not run."""
    results.mkdir(parents=True, exist_ok=True)
    for stale in ("junit.xml", "failures.txt"):  # a failed run must not read an older one
        (results / stale).unlink(missing_ok=True)
    script = functests()
    if script is None:
        swift_suite.run(host, port, tests, results)
    else:
        run_script(script, host, port, tests, results)
    try:
        ran = harness.read_junit(results / "junit.xml").total
    except (OSError, ET.ParseError) as e:
        raise SystemExit(f"conformance: FAILED: the suite did not run or did not finish "
                         f"({e}); see {results}/pytest.log") from None
    if not ran or not (results / "failures.txt").exists():
        raise SystemExit(f"conformance: FAILED: the suite ran no tests; see {results}/pytest.log")
    failed: dict[str, str] = {}
    for line in (results / "failures.txt").read_text().splitlines():
        _kind, _, rest = line.partition(" ")  # "FAIL|ERROR <id> :: <message>"
        test_id, _, msg = rest.partition(" :: ")
        failed.setdefault(test_id, msg)
    return failed


def run_script(script: Path, host: str, port: int, tests: str, results: Path) -> None:
    """The SWIFT_ANCHORS override: its functests.sh writes the same files into results."""
    env = dict(os.environ, FUNC_TESTS=tests, RESULTS_DIR=str(results))
    env.setdefault("FUNC_TIMEOUT", "1800")  # a hung run fails in 30 min, not functests' 90
    proc = subprocess.Popen([str(script), host, str(port)], env=env, stdin=subprocess.DEVNULL)
    try:
        proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: stop the script and its pytest
            for pid in [proc.pid, *descendants(proc.pid)]:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            proc.wait()


def descendants(pid: int) -> list[int]:
    """Every process below pid. functests.sh runs pytest under `timeout`, which gives it a
    process group of its own, so neither Ctrl-C nor a signal to the script reaches it."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold spaces and ')'
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def shards(tests: str, n: int) -> list[str]:
    """`tests` dealt to at most n runs by WEIGHTS; one run for node ids, "all" or one file."""
    files = tests.split()
    if n <= 1 or tests == "all" or len(files) < 2 or any("::" in f for f in files):
        return [tests]
    bins: list[list[str]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for f in sorted(files, key=lambda f: -WEIGHTS.get(f, 5)):
        i = loads.index(min(loads))
        bins[i].append(f)
        loads[i] += WEIGHTS.get(f, 5)
    return [" ".join(b) for b in bins if b]


def run_shards(clusters: list[dict], parts: list[str]) -> dict[str, str]:
    """Each part against its own cluster, side by side; the failures of all."""
    if len(parts) == 1:
        return run_suite(*harness.endpoint(clusters[0]), parts[0], LAST / "run")
    shutil.rmtree(LAST / "run", ignore_errors=True)
    failed: dict[str, str] = {}
    with ThreadPoolExecutor(len(parts)) as pool:
        try:
            futures = []
            for i, (info, part) in enumerate(zip(clusters, parts, strict=True)):
                results = LAST / "run" / f"shard{i}"
                futures.append(pool.submit(run_suite, *harness.endpoint(info), part, results))
                if i == 0:
                    # The project's runner is installed before this (prepare); an override
                    # script may install on its first run: the others start once it wrote its
                    # config (after that step), so none races it.
                    deadline = time.monotonic() + 900
                    while not (results / "test.conf").exists() and not futures[0].done() \
                            and time.monotonic() < deadline:
                        time.sleep(0.2)
            for f in futures:
                failed.update(f.result())
        except BaseException:
            swift_suite.stop_all()  # the other runs end too, so the pool can close
            raise
    runs = harness.Results()
    for junit in (LAST / "run").glob("shard*/junit.xml"):
        runs.add(harness.read_junit(junit))
    print(f"conformance: {len(parts)} runs side by side: {runs.passed} passed, {len(failed)} "
          f"failed, {runs.skipped.total()} skipped in all")
    return failed


def scoped(test_id: str, tests: str) -> bool:
    """Whether test_id's file was part of this run (a core run says nothing about the rest)."""
    return tests == "all" or test_file(test_id) in tests.split()


def policy_args() -> list[str]:
    """`swiftlite up` arguments for CONFORMANCE_POLICIES and CONFORMANCE_EC."""
    out: list[str] = []
    pols = os.environ.get("CONFORMANCE_POLICIES")
    if pols:
        out += ["--policies", pols]
    ec = os.environ.get("CONFORMANCE_EC")
    if ec:
        k, _, m = ec.partition("+")
        out += ["--ec", ec, "--devices", str(max(4, int(k) + int(m or 0)))]
        small = os.environ.get("CONFORMANCE_EC_SMALL")
        if small:  # the EC policy's small objects kept by Policy-0 (size_tier)
            out += ["--ec-small", small]
    return out


def gate(tests: str) -> int:
    expected = harness.read_expected(EXPECTED)
    prepare()  # before starting a cluster for nothing
    parts = shards(tests, int(os.environ.get("CONFORMANCE_SHARDS", "2")))
    roots = [tempfile.mkdtemp(prefix="swiftlite-conformance-") for _ in parts]
    root = " ".join(roots)
    procs: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        clusters = []
        for r, part in zip(roots, parts, strict=True):
            print(f"conformance: starting swiftlite up --root {r} --port 0", flush=True)
            # Expired objects stay readable (X-Open-Expired) for a while, as the suite's
            # open-expired tests expect: else an expirer pass landing between expiry and the
            # read fails them.
            # CONFORMANCE_POLICIES=silver: a second replicated storage policy, so the
            # suite's multi-policy tests run instead of skipping. CONFORMANCE_EC=4+2: an
            # erasure-coded policy `ec` beside the default (devices enough for k + m);
            # CONFORMANCE_EC_SMALL=16384 keeps its small objects in Policy-0.
            proc, info = harness.start_cluster(r, "--delay-reaping", "300", *policy_args())
            procs.append((proc, r))
            clusters.append(info)
            print(f"conformance: cluster at {info['proxy']['url']}; running FUNC_TESTS={part}",
                  flush=True)
        host, port = harness.endpoint(clusters[0])
        failed = run_shards(clusters, parts)
        unexpected = [t for t in failed if t not in expected]
        rerun_passed: list[str] = []
        if unexpected and len(unexpected) <= MAX_RERUN:
            print(f"\nconformance: {len(unexpected)} unexpected failure(s); rerunning just "
                  "those once (the suite polls for eventual consistency and can flake)",
                  flush=True)
            again = run_suite(host, port, " ".join(node_id(t) for t in unexpected),
                              LAST / "rerun")
            rerun_passed = [t for t in unexpected if t not in again]
            unexpected = [t for t in unexpected if t in again]
        elif unexpected:
            print(f"\nconformance: {len(unexpected)} unexpected failures: not rerunning "
                  f"(over {MAX_RERUN})")
    finally:
        harness.stop_clusters(procs)
    final = [t for t in failed if t not in rerun_passed]
    (LAST / "run.json").write_text(json.dumps({"tests": tests, "failed": final}, indent=1))

    print("\nconformance: results in", LAST)
    rc = harness.report(expected, failed, rerun_passed, unexpected,
                        lambda t: scoped(t, tests), EXPECTED,
                        f"the cluster's logs are in {root}")
    if rc == 0:
        for r in roots:
            shutil.rmtree(r, ignore_errors=True)
    return rc


def write_expected() -> int:
    """Rewrite the list from the last run: keep reasons, drop fixed ids, add new ones."""
    last = harness.read_last(LAST / "run.json")
    tests = last["tests"]
    return harness.write_expected(EXPECTED, last["failed"], lambda t: scoped(t, tests),
                                  "TODO reason")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--core", action="store_true", help="the CI set (CORE), whatever "
                    "FUNC_TESTS says")
    ap.add_argument("--write-expected", action="store_true",
                    help="rewrite expected_failures.txt from the last run (no run)")
    args = ap.parse_args()
    harness.line_buffered()
    if args.write_expected:
        return write_expected()
    harness.exit_on_sigterm()
    tests = CORE if args.core else (os.environ.get("FUNC_TESTS") or CORE)
    try:
        return gate(tests)
    except KeyboardInterrupt:
        print("\nconformance: interrupted (the cluster was stopped)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
