"""ceph's s3-tests against a fresh `swiftlite up`, gated by a list of known failures.

usage: run_s3.py [--write-expected | --write-durations]

Without the suite's tarball (../shared/conformance/s3-tests-<rev>.tar.gz beside the
checkout, or S3_TESTS_TARBALL) it says so in one line and exits 0: a bare clone skips it.
Else it installs the suite on first use (s3_suite.py), starts `swiftlite up --port 0` in a
temp dir, runs the selected tests of s3tests/functional/test_s3.py against it (S3_TESTS:
test names or node ids, to run only those; S3_TESTS_SHARDS: pytest processes side by side,
default 2), stops the cluster whatever happens, and compares the failures with
s3_expected_failures.txt. Unexpected failures are rerun once by id before the run fails.
`--write-expected` rewrites the list from the last run instead of running;
`--write-durations` rewrites s3_durations.txt (how the shards are dealt) from it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
import s3_suite

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "s3_expected_failures.txt"
LAST = HERE / "last-run-s3"  # results of the last run (gitignored), read by --write-expected
MAX_RERUN = 50  # more unexpected failures than this is a broken build, not flakiness
NEW_REASON = "not implemented yet"  # what --write-expected gives a newly failing test


def chosen() -> list[str] | None:
    """S3_TESTS as node ids ('test_x' -> 's3tests/functional/test_s3.py::test_x'), or None:
    the whole selection."""
    names = os.environ.get("S3_TESTS", "").split()
    return [n if "::" in n else f"{s3_suite.SUITE}::{n}" for n in names] or None


def scoped(test_id: str, tests: list[str] | None) -> bool:
    """Whether test_id was part of the run (a run of some tests says nothing of the rest);
    a test named without its parameters covers each of them."""
    return tests is None or test_id in tests or test_id.partition("[")[0] in tests


def gate(tar: Path, tests: list[str] | None) -> int:
    expected = harness.read_expected(EXPECTED)
    s3_suite.ensure(tar)  # before starting a cluster for nothing
    shards = int(os.environ.get("S3_TESTS_SHARDS", "2"))
    root = tempfile.mkdtemp(prefix="swiftlite-s3-conformance-")
    procs: list[tuple[subprocess.Popen[bytes], str]] = []
    began = time.monotonic()
    try:
        print(f"conformance: starting swiftlite up --root {root} --port 0", flush=True)
        proc, info = harness.start_cluster(root)
        procs.append((proc, root))
        host, port = harness.endpoint(info)
        res = s3_suite.run(host, port, tests, LAST / "run", shards)
        failed = res.failed
        unexpected = [t for t in failed if t not in expected]
        rerun_passed: list[str] = []
        if unexpected and len(unexpected) <= MAX_RERUN:
            print(f"\nconformance: {len(unexpected)} unexpected failure(s); rerunning just "
                  "those once, one at a time", flush=True)
            again = s3_suite.run(host, port, unexpected, LAST / "rerun", 1)
            rerun_passed = [t for t in unexpected if t not in again.failed]
            unexpected = [t for t in unexpected if t in again.failed]
        elif unexpected:
            print(f"\nconformance: {len(unexpected)} unexpected failures: not rerunning "
                  f"(over {MAX_RERUN})")
    finally:
        harness.stop_clusters(procs)
    final = sorted(t for t in failed if t not in rerun_passed)  # shards interleave the order
    (LAST / "run.json").write_text(json.dumps({"tests": tests, "failed": final}, indent=1))

    print("\nconformance: results in", LAST)
    print(f"s3-tests: {res.passed + len(rerun_passed)} passed, {len(final)} failed, "
          f"{res.skipped.total()} skipped")
    print(f"conformance: {res.total} tests in {time.monotonic() - began:.0f}s")
    rc = harness.report(expected, failed, rerun_passed, unexpected,
                        lambda t: scoped(t, tests), EXPECTED,
                        f"the cluster's logs are in {root}")
    if rc == 0:
        shutil.rmtree(root, ignore_errors=True)
    return rc


def write_expected() -> int:
    """Rewrite the list from the last run: keep reasons, drop fixed ids, add new ones."""
    last = harness.read_last(LAST / "run.json")
    tests = last["tests"]
    return harness.write_expected(EXPECTED, last["failed"], lambda t: scoped(t, tests),
                                  NEW_REASON)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-expected", action="store_true",
                    help=f"rewrite {EXPECTED.name} from the last run (no run)")
    ap.add_argument("--write-durations", action="store_true",
                    help=f"rewrite {s3_suite.DURATIONS.name} from the last run (no run)")
    args = ap.parse_args()
    harness.line_buffered()
    if args.write_expected:
        return write_expected()
    if args.write_durations:
        return s3_suite.write_durations(LAST / "run")
    tar = s3_suite.tarball()
    if tar is None:
        print(f"conformance: s3-tests skipped: no ../shared/conformance/{s3_suite.TARBALL} "
              "beside the checkout (S3_TESTS_TARBALL names it elsewhere)")
        return 0
    harness.exit_on_sigterm()
    try:
        return gate(tar, chosen())
    except KeyboardInterrupt:
        print("\nconformance: interrupted (the cluster was stopped)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
