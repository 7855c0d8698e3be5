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
import urllib.request
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import swift_suite

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
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


def read_expected() -> dict[str, str]:
    """{test id: reason} from expected_failures.txt ('id  # reason'; '#' lines are comments)."""
    out: dict[str, str] = {}
    for line in EXPECTED.read_text().splitlines() if EXPECTED.exists() else []:
        test_id, _, reason = line.partition("#")
        if test_id.strip():
            out[test_id.strip()] = reason.strip()
    return out


# -- the cluster ----------------------------------------------------------------------------

def start_cluster(root: str) -> tuple[subprocess.Popen, dict]:
    log = open(os.path.join(root, "up.log"), "wb")
    # Expired objects stay readable (X-Open-Expired) for a while, as the suite's open-expired
    # tests expect: else an expirer pass landing between expiry and the read fails them.
    proc = subprocess.Popen([sys.executable, "-m", "swiftlite.cli", "up", "--root", root,
                             "--port", "0", "--delay-reaping", "300"],
                            stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    try:
        return proc, wait_answering(proc, root)
    except BaseException:  # no answer, Ctrl-C, SIGTERM: the caller does not know of it yet
        stop_cluster(proc, root)
        raise


def wait_answering(proc: subprocess.Popen, root: str) -> dict:
    path = os.path.join(root, "cluster.json")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"conformance: swiftlite up exited {proc.returncode}; "
                             f"see {root}/up.log:\n{Path(root, 'up.log').read_text()[-2000:]}")
        if os.path.exists(path) and answers(json.loads(Path(path).read_text())):
            return json.loads(Path(path).read_text())
        time.sleep(0.2)
    raise SystemExit(f"conformance: the cluster did not answer within 120s; see {root}/logs")


def answers(info: dict) -> bool:
    """The proxy authenticates the suite's first user (so tempauth and the backends are up)."""
    req = urllib.request.Request(info["proxy"]["auth_url"],
                                 headers={"X-Auth-User": "test:tester", "X-Auth-Key": "testing"})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def stop_cluster(proc: subprocess.Popen, root: str) -> None:
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
        cases = list(ET.parse(results / "junit.xml").getroot().iter("testcase"))
    except (OSError, ET.ParseError) as e:
        raise SystemExit(f"conformance: FAILED: the suite did not run or did not finish "
                         f"({e}); see {results}/pytest.log") from None
    if not cases or not (results / "failures.txt").exists():
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
        host, port = clusters[0]["proxy"]["url"].split("//")[1].rsplit(":", 1)
        return run_suite(host, int(port), parts[0], LAST / "run")
    shutil.rmtree(LAST / "run", ignore_errors=True)
    failed: dict[str, str] = {}
    with ThreadPoolExecutor(len(parts)) as pool:
        try:
            futures = []
            for i, (info, part) in enumerate(zip(clusters, parts, strict=True)):
                host, port = info["proxy"]["url"].split("//")[1].rsplit(":", 1)
                results = LAST / "run" / f"shard{i}"
                futures.append(pool.submit(run_suite, host, int(port), part, results))
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
    passed = skipped = 0
    for junit in (LAST / "run").glob("shard*/junit.xml"):
        for case in ET.parse(junit).getroot().iter("testcase"):
            kinds = {c.tag for c in case}
            skipped += "skipped" in kinds
            passed += not kinds & {"skipped", "failure", "error"}
    print(f"conformance: {len(parts)} runs side by side: {passed} passed, {len(failed)} "
          f"failed, {skipped} skipped in all")
    return failed


def scoped(test_id: str, tests: str) -> bool:
    """Whether test_id's file was part of this run (a core run says nothing about the rest)."""
    return tests == "all" or test_file(test_id) in tests.split()


def gate(tests: str) -> int:
    expected = read_expected()
    prepare()  # before starting a cluster for nothing
    parts = shards(tests, int(os.environ.get("CONFORMANCE_SHARDS", "2")))
    roots = [tempfile.mkdtemp(prefix="swiftlite-conformance-") for _ in parts]
    root = " ".join(roots)
    procs: list[tuple[subprocess.Popen, str]] = []
    try:
        clusters = []
        for r, part in zip(roots, parts, strict=True):
            print(f"conformance: starting swiftlite up --root {r} --port 0", flush=True)
            proc, info = start_cluster(r)
            procs.append((proc, r))
            clusters.append(info)
            print(f"conformance: cluster at {info['proxy']['url']}; running FUNC_TESTS={part}",
                  flush=True)
        host, port = clusters[0]["proxy"]["url"].split("//")[1].rsplit(":", 1)
        failed = run_shards(clusters, parts)
        unexpected = [t for t in failed if t not in expected]
        rerun_passed: list[str] = []
        if unexpected and len(unexpected) <= MAX_RERUN:
            print(f"\nconformance: {len(unexpected)} unexpected failure(s); rerunning just "
                  "those once (the suite polls for eventual consistency and can flake)",
                  flush=True)
            again = run_suite(host, int(port), " ".join(node_id(t) for t in unexpected),
                              LAST / "rerun")
            rerun_passed = [t for t in unexpected if t not in again]
            unexpected = [t for t in unexpected if t in again]
        elif unexpected:
            print(f"\nconformance: {len(unexpected)} unexpected failures: not rerunning "
                  f"(over {MAX_RERUN})")
    finally:
        # A second Ctrl-C (or a SIGTERM) must not cut the stop short.
        handlers = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        for proc, r in procs:
            stop_cluster(proc, r)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    final = [t for t in failed if t not in rerun_passed]
    (LAST / "run.json").write_text(json.dumps({"tests": tests, "failed": final}, indent=1))

    print("\nconformance: results in", LAST)
    if rerun_passed:
        print(f"conformance: {len(rerun_passed)} failed once and passed on the rerun (flaky):")
        print("".join(f"  {t}\n" for t in rerun_passed), end="")
    fixed = [t for t in expected if scoped(t, tests) and t not in failed]
    if fixed:
        print(f"conformance: {len(fixed)} expected failure(s) now pass and may be removed "
              f"from the list ({EXPECTED.relative_to(REPO)}; or run it with --write-expected):")
        print("".join(f"  {t}\n" for t in fixed), end="")
    if unexpected:
        print(f"conformance: FAILED: {len(unexpected)} test(s) failed that are not in "
              f"{EXPECTED.relative_to(REPO)}:")
        print("".join(f"  {t} :: {failed[t][:160]}\n" for t in unexpected), end="")
        print(f"conformance: the cluster's logs are in {root}")
        return 1
    for r in roots:
        shutil.rmtree(r, ignore_errors=True)
    print(f"conformance: OK: {len(failed) - len(rerun_passed)} failure(s), all expected")
    return 0


def write_expected() -> int:
    """Rewrite the list from the last run: keep reasons, drop fixed ids, add new ones."""
    try:
        last = json.loads((LAST / "run.json").read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"conformance: no last run to write from ({e})") from None
    tests, failed = last["tests"], last["failed"]
    lines = EXPECTED.read_text().splitlines() if EXPECTED.exists() else []
    kept: list[str] = []
    seen: set[str] = set()
    for line in lines:
        test_id = line.partition("#")[0].strip()
        if test_id and scoped(test_id, tests) and test_id not in failed:
            continue  # fixed
        seen.add(test_id)
        kept.append(line)
    new = [f"{t} # TODO reason" for t in failed if t not in seen]
    EXPECTED.write_text("\n".join(kept + new) + "\n")
    print(f"conformance: {EXPECTED.relative_to(REPO)}: {len(kept)} line(s) kept, "
          f"{len(lines) - len(kept)} removed, {len(new)} added")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--core", action="store_true", help="the CI set (CORE), whatever "
                    "FUNC_TESTS says")
    ap.add_argument("--write-expected", action="store_true",
                    help="rewrite expected_failures.txt from the last run (no run)")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # keep our lines in order with the suite's
    if args.write_expected:
        return write_expected()
    # SIGTERM (a CI timeout) unwinds like Ctrl-C, so the cluster is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tests = CORE if args.core else (os.environ.get("FUNC_TESTS") or CORE)
    try:
        return gate(tests)
    except KeyboardInterrupt:
        print("\nconformance: interrupted (the cluster was stopped)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
