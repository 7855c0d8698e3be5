"""Find the files to upload: a walk of SRC_DIR or a manifest of paths, one per line."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class Item:
    """One file to upload; `part`/`dev` are filled in by ordering.place()."""

    name: str  # object name (relative path with '/' separators, under the prefix)
    path: str  # absolute path on the local disk
    size: int
    part: int = -1
    dev: int = -1


@dataclass(slots=True)
class Failure:
    path: str
    reason: str


def object_name(rel: str, prefix: str) -> str:
    rel = rel.replace(os.sep, "/")
    return prefix + rel if prefix else rel


def _valid_name(name: str) -> str | None:
    """Why a name cannot be a Swift object name, or None when it can."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "file name is not valid UTF-8"
    if len(encoded) > 1024:
        return "object name longer than 1024 bytes"
    return None


def _add(items: list[Item], failures: list[Failure], path: str, rel: str, prefix: str,
         st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        failures.append(Failure(path, "not a regular file"))
        return
    name = object_name(rel, prefix)
    why = _valid_name(name)
    if why:
        failures.append(Failure(path, why))
        return
    items.append(Item(name, path, st.st_size))


def walk_tree(src: str, prefix: str = "") -> tuple[list[Item], list[Failure]]:
    """Every file under `src` (symlinks to files are followed, to directories not)."""
    src = os.path.abspath(src)
    items: list[Item] = []
    failures: list[Failure] = []
    stack = [src]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError as exc:
            failures.append(Failure(d, f"unreadable directory: {exc.strerror or exc}"))
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                    continue
                st = e.stat(follow_symlinks=True)
            except OSError as exc:
                failures.append(Failure(e.path, f"unreadable: {exc.strerror or exc}"))
                continue
            _add(items, failures, e.path, os.path.relpath(e.path, src), prefix, st)
    return items, failures


def read_manifest(src: str, lines: Iterable[str], prefix: str = "") -> tuple[list[Item],
                                                                             list[Failure]]:
    """Paths relative to `src` (or absolute paths under it), one per line; blanks skipped."""
    src = os.path.abspath(src)
    items: list[Item] = []
    failures: list[Failure] = []
    seen: set[str] = set()
    for line in lines:
        p = line.rstrip("\r\n")
        if not p.strip():
            continue
        path = os.path.normpath(os.path.join(src, p))
        rel = os.path.relpath(path, src)
        if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
            failures.append(Failure(path, "outside SRC_DIR"))
            continue
        if path in seen:
            continue  # the same file twice would be the same object twice
        seen.add(path)
        try:
            st = os.stat(path)
        except OSError as exc:
            failures.append(Failure(path, f"unreadable: {exc.strerror or exc}"))
            continue
        _add(items, failures, path, rel, prefix, st)
    return items, failures
