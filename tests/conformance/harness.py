"""What the conformance runners share: a fresh `swiftlite up`, a suite's own virtualenv,
pytest's junit results, and the gate against a list of expected failures.

run.py (Swift's functional suite) and run_s3.py (ceph's s3-tests) differ only in how they
install and run their suite; both start and stop the cluster, read junit and judge the
failures with the functions here.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
Cluster = dict[str, Any]  # cluster.json, as `swiftlite up` writes it


# -- the cluster ----------------------------------------------------------------------------

def start_cluster(root: str, *extra: str) -> tuple[subprocess.Popen[bytes], Cluster]:
    """`swiftlite up --root root --port 0 *extra`, once its proxy authenticates test:tester.
    Its output goes to root/up.log."""
    log = open(os.path.join(root, "up.log"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "swiftlite.cli", "up", "--root", root,
                             "--port", "0", *extra],
                            stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    try:
        return proc, wait_answering(proc, root)
    except BaseException:  # no answer, Ctrl-C, SIGTERM: the caller does not know of it yet
        stop_cluster(proc, root)
        raise


def wait_answering(proc: subprocess.Popen[bytes], root: str) -> Cluster:
    path = os.path.join(root, "cluster.json")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"conformance: swiftlite up exited {proc.returncode}; "
                             f"see {root}/up.log:\n{Path(root, 'up.log').read_text()[-2000:]}")
        if os.path.exists(path) and answers(json.loads(Path(path).read_text())):
            info: Cluster = json.loads(Path(path).read_text())
            return info
        time.sleep(0.2)
    raise SystemExit(f"conformance: the cluster did not answer within 120s; see {root}/logs")


def answers(info: Cluster) -> bool:
    """The proxy authenticates the suites' first user (so tempauth and the backends are up)."""
    req = urllib.request.Request(info["proxy"]["auth_url"],
                                 headers={"X-Auth-User": "test:tester", "X-Auth-Key": "testing"})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def endpoint(info: Cluster) -> tuple[str, int]:
    """The proxy's host and port."""
    host, port = info["proxy"]["url"].split("//")[1].rsplit(":", 1)
    return host, int(port)


def stop_cluster(proc: subprocess.Popen[bytes], root: str) -> None:
    """SIGTERM `swiftlite up` (it stops its servers); if it hangs, kill everything it named."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        info = json.loads(Path(root, "cluster.json").read_text())
    except (OSError, ValueError):
        return
    pids = [info["proxy"]["pid"]] + [s["pid"] for n in info["nodes"]
                                     for s in [*n["servers"].values(), *n["daemons"].values()]]
    for pid in pids:  # each server leads its own process group (start_new_session)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def stop_clusters(procs: Iterable[tuple[subprocess.Popen[bytes], str]]) -> None:
    """Stop each cluster; a second Ctrl-C (or a SIGTERM) must not cut the stop short."""
    handlers = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for proc, root in procs:
            stop_cluster(proc, root)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def line_buffered() -> None:
    """Our lines stay in order with a suite's output, also when stdout is a pipe."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)


def exit_on_sigterm() -> None:
    """SIGTERM (a CI timeout) unwinds like Ctrl-C, so the `finally`s stop the cluster."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


# -- a suite's own virtualenv -----------------------------------------------------------------

@contextmanager
def install_lock(home: Path) -> Iterator[None]:
    """Held while installing into home: two runs starting together install once (the
    second, once it has the lock, finds the first's work done)."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"conformance: waiting for another run installing into {home}", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def step(what: str, cmd: list[str], log: Path, suite: str) -> None:
    """Run cmd with its output appended to log; on failure exit with one line saying why
    (pip's last error line where it printed one)."""
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        try:
            rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, check=False).returncode
        except OSError as e:
            rc, why = -1, str(e)
    if rc == 0:
        return
    if rc != -1:
        errors = [line.strip() for line in log.read_text(errors="replace").splitlines()
                  if line.startswith(("ERROR:", "Error:"))]
        why = errors[-1] if errors else f"exit status {rc}"
    raise SystemExit(f"conformance: FAILED: could not {what} for {suite}: {why} "
                     f"(is PyPI reachable? full output in {log})")


def suite_env(**extra: str) -> dict[str, str]:
    """Our environment without what would point a suite's venv at another Python."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End proc and everything in its session (it was started with start_new_session)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# -- results ----------------------------------------------------------------------------------

@dataclass
class Results:
    """One pytest run's junit: failed and errored tests by id, with their first line."""
    passed: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)  # by message
    kinds: dict[str, str] = field(default_factory=dict)  # failed id -> FAIL or ERROR

    @property
    def total(self) -> int:
        return self.passed + len(self.failed) + self.skipped.total()

    def add(self, other: Results) -> None:
        self.passed += other.passed
        self.failed.update(other.failed)
        self.skipped.update(other.skipped)
        self.kinds.update(other.kinds)

    def counts(self) -> str:
        return (f"{self.passed} passed, {len(self.failed)} failed, "
                f"{self.skipped.total()} skipped")


def default_id(classname: str, name: str) -> str:
    return f"{classname}::{name}"


def read_junit(path: Path, test_id: Callable[[str, str], str] = default_id) -> Results:
    """pytest's junit.xml; raises OSError or ET.ParseError where there is none (pytest did
    not finish). A test failing in its call and erroring in teardown counts once."""
    out = Results()
    for case in ET.parse(path).getroot().iter("testcase"):
        tid = test_id(case.get("classname") or "", case.get("name") or "")
        found = case.find("failure")
        if found is None:
            found = case.find("error")
        if found is not None:
            lines = (found.get("message") or "").strip().splitlines()
            out.failed.setdefault(tid, lines[0][:200] if lines else "")
            out.kinds.setdefault(tid, "FAIL" if found.tag == "failure" else "ERROR")
        elif (skip := case.find("skipped")) is not None:
            out.skipped[(skip.get("message") or "").strip()[:120]] += 1
        else:
            out.passed += 1
    return out


def write_summary(results: Path, res: Results) -> None:
    """failures.txt ("FAIL|ERROR <id> :: <message>") and skips.txt (count, message)."""
    (results / "failures.txt").write_text("".join(
        f"{res.kinds[t]} {t} :: {m}\n" for t, m in res.failed.items()))
    (results / "skips.txt").write_text("".join(
        f"{n:5d}  {m}\n" for m, n in res.skipped.most_common()))


# -- the list of expected failures ------------------------------------------------------------

def read_expected(path: Path) -> dict[str, str]:
    """{test id: reason} from a list of 'id  # reason' lines ('#' lines are comments)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        test_id, _, reason = line.partition("#")
        if test_id.strip():
            out[test_id.strip()] = reason.strip()
    return out


def report(expected: dict[str, str], failed: dict[str, str], rerun_passed: list[str],
           unexpected: list[str], in_scope: Callable[[str], bool], listed: Path,
           hint: str) -> int:
    """Print what the run found against the list; 1 if a test outside it failed."""
    name = listed.relative_to(REPO)
    if rerun_passed:
        print(f"conformance: {len(rerun_passed)} failed once and passed on the rerun (flaky):")
        print("".join(f"  {t}\n" for t in rerun_passed), end="")
    fixed = [t for t in expected if in_scope(t) and t not in failed]
    if fixed:
        print(f"conformance: {len(fixed)} expected failure(s) now pass and may be removed "
              f"from the list ({name}; or run it with --write-expected):")
        print("".join(f"  {t}\n" for t in fixed), end="")
    if unexpected:
        print(f"conformance: FAILED: {len(unexpected)} test(s) failed that are not in {name}:")
        print("".join(f"  {t} :: {failed[t][:160]}\n" for t in unexpected), end="")
        print(f"conformance: {hint}")
        return 1
    print(f"conformance: OK: {len(failed) - len(rerun_passed)} failure(s), all expected")
    return 0


def write_expected(listed: Path, failed: list[str], in_scope: Callable[[str], bool],
                   new_reason: str) -> int:
    """Rewrite the list from a run's failures: keep the reasons of ids still failing and
    every line out of the run's scope, drop fixed ids, add new ones with new_reason."""
    lines = listed.read_text().splitlines() if listed.exists() else []
    kept: list[str] = []
    seen: set[str] = set()
    still = set(failed)
    for line in lines:
        test_id = line.partition("#")[0].strip()
        if test_id and in_scope(test_id) and test_id not in still:
            continue  # fixed
        seen.add(test_id)
        kept.append(line)
    new = [f"{t} # {new_reason}" for t in failed if t not in seen]
    listed.write_text("\n".join(kept + new) + "\n")
    print(f"conformance: {listed.relative_to(REPO)}: {len(kept)} line(s) kept, "
          f"{len(lines) - len(kept)} removed, {len(new)} added")
    return 0


def read_last(path: Path) -> dict[str, Any]:
    """A runner's run.json (what --write-expected reads), or exit saying there is none."""
    try:
        last: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"conformance: no last run to write from ({e})") from None
    return last
