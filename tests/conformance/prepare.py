"""Install both conformance suites' virtualenvs (Swift's functional suite, ceph's s3-tests),
side by side, so that `make test` need not wait for them later.

usage: prepare.py [--detach]

A fresh clone installs each suite on its first run (run.py, run_s3.py): minutes of pip
downloads that use little CPU. `make test` starts this with --detach before anything else,
so the installs overlap the project's own venv and the pytest part; each runner later finds
its suite ready, or waits on the install lock (harness.install_lock) until it is, or, where
an install failed here, tries again itself and says why. Only the standard library is used:
the system's python3 can run it before the project's venv exists. Output goes to
.venv/conformance-prepare.log.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from pathlib import Path

import harness
import s3_suite
import swift_suite

LOG = harness.REPO / ".venv" / "conformance-prepare.log"


def install() -> int:
    """Both suites at once (each holds its own install lock); 1 if either failed."""
    failed: list[str] = []

    def one(name: str, fn) -> None:
        try:
            fn()
        except SystemExit as e:  # the suite's one-line reason; its runner will retry
            failed.append(f"{name}: {e}")
        except Exception as e:  # our own bug: say so, the runner retries all the same
            failed.append(f"{name}: {type(e).__name__}: {e}")

    tar = s3_suite.tarball()
    jobs = []
    if not os.environ.get("SWIFT_ANCHORS"):  # else run.py runs another suite, not ours
        jobs.append(threading.Thread(target=one, args=("swift", swift_suite.ensure)))
    if tar is not None:
        jobs.append(threading.Thread(target=one, args=("s3-tests", lambda: s3_suite.ensure(tar))))
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()
    for line in failed:
        print(f"conformance: prepare: {line}", flush=True)
    return 1 if failed else 0


def detach() -> int:
    """Run install() in a process of its own session, not waited for."""
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(LOG, "ab") as log:
        subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdout=log,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, env=harness.suite_env())
    print(f"conformance: installing the suites in the background (log {LOG})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--detach", action="store_true", help="start the installs and return")
    args = ap.parse_args()
    harness.line_buffered()
    return detach() if args.detach else install()


if __name__ == "__main__":
    sys.exit(main())
