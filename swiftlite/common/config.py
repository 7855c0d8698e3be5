"""INI configuration: typed getters with documented defaults, one parser for every server."""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from typing import Any

from swiftlite.common import signing
from swiftlite.common.hashing import set_hash_path_affixes

TRUE_VALUES = {"1", "true", "yes", "on", "t", "y"}
_SIZE_SUFFIX = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def config_true(value: Any) -> bool:
    return value is True or str(value).strip().lower() in TRUE_VALUES


def parse_size(value: str | int) -> int:
    """"64k" -> 65536; plain integers pass through."""
    if isinstance(value, int):
        return value
    s = value.strip().lower()
    if s.endswith("ib"):
        s = s[:-2]
    elif s.endswith("b") and len(s) > 1 and s[-2] in _SIZE_SUFFIX:
        s = s[:-1]
    if s and s[-1] in _SIZE_SUFFIX:
        return int(float(s[:-1]) * _SIZE_SUFFIX[s[-1]])
    return int(s)


class Section(dict):
    """One INI section with typed getters; missing keys fall back to the given default."""

    name: str = ""

    def get_int(self, key: str, default: int) -> int:
        return int(self.get(key, default))

    def get_float(self, key: str, default: float) -> float:
        return float(self.get(key, default))

    def get_bool(self, key: str, default: bool) -> bool:
        return config_true(self.get(key, default))

    def get_size(self, key: str, default: int) -> int:
        return parse_size(self.get(key, default))

    def get_str(self, key: str, default: str) -> str:
        return str(self.get(key, default))

    def get_list(self, key: str, default: str = "") -> list[str]:
        raw = str(self.get(key, default))
        return [p.strip() for p in raw.replace("\n", ",").split(",") if p.strip()]


def load_config(path: str, section: str, defaults: Mapping[str, Any] | None = None) -> Section:
    """Read `section` of an INI file, layered over its [DEFAULT] and the given defaults.

    A missing [hash] section is fine for tests; a real cluster sets it once for all nodes.
    """
    parser = configparser.ConfigParser(interpolation=None)
    if not parser.read(path):
        raise FileNotFoundError(f"cannot read config {path}")
    conf = Section(defaults or {})
    conf.name = section
    conf.update(parser.defaults())
    if parser.has_section(section):
        conf.update({k: v for k, v in parser.items(section)})
    elif section != "DEFAULT":
        raise KeyError(f"config {path} has no [{section}] section")
    conf["__file__"] = os.path.abspath(path)
    load_hash_config(parser)
    return conf


def load_hash_config(parser: configparser.ConfigParser) -> None:
    if parser.has_section("hash"):
        affixes = [parser.get("hash", key, fallback="")
                   for key in ("hash_path_prefix", "hash_path_suffix")]
        # The salts place every object and must stay secret (they keep a client from aiming
        # names at one partition): a sample config's placeholder must not run.
        for key, value in zip(("hash_path_prefix", "hash_path_suffix"), affixes, strict=True):
            if value and signing.is_placeholder(value):
                raise signing.SecretError(
                    f"[hash] {key} is a placeholder; set it to a random value shared by every "
                    "node: python3 -c 'import secrets; print(secrets.token_hex(16))'")
        set_hash_path_affixes(*affixes)


def load_sections(path: str) -> dict[str, Section]:
    parser = configparser.ConfigParser(interpolation=None)
    if not parser.read(path):
        raise FileNotFoundError(f"cannot read config {path}")
    load_hash_config(parser)
    out: dict[str, Section] = {}
    for name in parser.sections():
        sec = Section(parser.defaults())
        sec.name = name
        sec.update(dict(parser.items(name)))
        sec["__file__"] = os.path.abspath(path)
        out[name] = sec
    return out
