"""Which devices root holds what: objects under `devices`, DBs under `meta_devices`."""

from __future__ import annotations

from swiftlite.common.devices import device_roots, meta_devices, object_devices


def test_dbs_share_the_object_devices_by_default():
    conf = {"devices": "/srv/node"}
    assert object_devices(conf) == meta_devices(conf) == "/srv/node"
    assert device_roots(conf) == ["/srv/node"]
    assert object_devices({}) == meta_devices({}) == "/srv/node"


def test_meta_devices_is_a_second_root():
    conf = {"devices": "/srv/node", "meta_devices": "/srv/meta"}
    assert object_devices(conf) == "/srv/node"
    assert meta_devices(conf) == "/srv/meta"
    assert device_roots(conf) == ["/srv/node", "/srv/meta"]


def test_meta_devices_naming_the_same_root_is_one_root():
    conf = {"devices": "/srv/node", "meta_devices": "/srv/node/"}
    assert device_roots(conf) == ["/srv/node"]
    assert device_roots({"devices": "/srv/node", "meta_devices": ""}) == ["/srv/node"]
