"""`swiftlite up`'s roots keep no working default credential on the network: a proxy bound
beyond loopback has no well-known password (a root made before that rule gets generated ones
when it is started), and every config, each holding a secret, is readable by its owner only."""

from __future__ import annotations

import configparser
import os

import pytest

from swiftlite import allinone


def _root(tmp_path, bind: str, users: dict[str, str]) -> dict:
    """A plan as an older `swiftlite up` left it: world-readable configs."""
    etc = tmp_path / "etc"
    etc.mkdir()
    proxy = etc / "proxy.conf"
    proxy.write_text("[DEFAULT]\nbackend_secret = s3cret-shared-by-the-cluster-0123456789\n"
                     "[proxy-server]\nbind_ip = " + bind + "\nauth_secret = x\n"
                     + "".join(f"{k} = {v}\n" for k, v in users.items()))
    node = etc / "node1.conf"
    node.write_text("[DEFAULT]\nbackend_secret = s3cret-shared-by-the-cluster-0123456789\n")
    (etc / "swiftlite.conf").write_text("[hash]\nhash_path_suffix = abc\n")
    for path in (proxy, node, etc / "swiftlite.conf"):
        os.chmod(path, 0o644)
    return {"bind": bind, "etc_dir": str(etc), "proxy_conf": str(proxy),
            "nodes": [{"conf": str(node)}]}


def _users(plan: dict) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(plan["proxy_conf"])
    return {k: v for k, v in parser.items("proxy-server") if k.startswith("user_")}


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "192.0.2.7", "storage.example"])
def test_a_reachable_proxy_keeps_no_well_known_password(tmp_path, bind):
    mine = {"user_ops_deploy": "Xq7-not-a-known-one .admin"}
    plan = _root(tmp_path, bind, {**allinone.USERS, **mine})
    changed = allinone._secure_users(plan)
    assert sorted(changed) == sorted(k[len("user_"):] for k in allinone.USERS)
    users = _users(plan)
    known = {v.split()[0] for v in allinone.USERS.values()}
    for key, value in allinone.USERS.items():
        new_key, *groups = users[key].split()
        assert new_key not in known and len(new_key) >= 20
        assert groups == value.split()[1:]  # roles kept: .admin, .reseller_admin, service
    assert users["user_ops_deploy"] == mine["user_ops_deploy"]  # an operator's own: kept
    assert len({v.split()[0] for k, v in users.items() if k in allinone.USERS}) == \
        len(allinone.USERS)  # one password each, not one shared
    assert os.stat(plan["proxy_conf"]).st_mode & 0o077 == 0
    # The next start changes nothing: the generated passwords stay the users'.
    assert allinone._secure_users(plan) == []
    assert _users(plan) == users


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.9", "::1", "localhost"])
def test_a_loopback_proxy_keeps_the_development_passwords(tmp_path, bind):
    plan = _root(tmp_path, bind, dict(allinone.USERS))
    assert allinone._secure_users(plan) == []
    assert _users(plan) == dict(allinone.USERS)
    assert allinone._password(plan["proxy_conf"], "user_test_tester") == "testing"


def test_configs_of_an_older_root_become_owner_only(tmp_path):
    plan = _root(tmp_path, "127.0.0.1", dict(allinone.USERS))
    allinone._make_private(plan)
    for path in allinone._conf_paths(plan):
        assert os.stat(path).st_mode & 0o777 == 0o600, path
