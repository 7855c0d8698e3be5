"""Object server request checks that need no process: devices, partitions, timestamps."""

from __future__ import annotations

import pytest

from swiftlite.common.config import Section
from swiftlite.common.http import HTTPError
from swiftlite.obj.container_updates import parse_targets
from swiftlite.obj.server import ObjectServer


async def test_mount_check_refuses_a_plain_directory(tmp_path):
    (tmp_path / "sda").mkdir()
    loose = ObjectServer(Section(devices=str(tmp_path)))
    assert await loose.device_path("sda") == str(tmp_path / "sda")
    strict = ObjectServer(Section(devices=str(tmp_path), mount_check="true"))
    with pytest.raises(HTTPError) as ei:
        await strict.device_path("sda")
    assert ei.value.status == 507
    for bad in ("..", ".", "a/b", "a\x00b"):
        with pytest.raises(HTTPError) as ei:
            await loose.device_path(bad)
        assert ei.value.status == 400
    with pytest.raises(HTTPError) as ei:
        await loose.device_path("sdz")  # missing
    assert ei.value.status == 507


@pytest.mark.parametrize("value,ok", [("0", True), ("4294967295", True), ("4294967296", False),
                                      ("-1", False), ("1e3", False), ("\u0661", False),
                                      ("", False)])
def test_partition(value, ok):
    if ok:
        assert ObjectServer.partition(value) == int(value)
    else:
        with pytest.raises(HTTPError):
            ObjectServer.partition(value)


def test_parse_targets():
    h = {"X-Container-Host": "10.0.0.1:6201, [::1]:6202", "X-Container-Device": "sda,sdb",
         "X-Container-Partition": "7"}
    assert parse_targets(h) == [
        {"ip": "10.0.0.1", "port": 6201, "device": "sda", "partition": 7},
        {"ip": "::1", "port": 6202, "device": "sdb", "partition": 7}]
    assert parse_targets({**h, "X-Container-Device": "sda"}) == []
    assert parse_targets({k: v for k, v in h.items() if k != "X-Container-Host"}) == []
    assert parse_targets({**h, "X-Container-Host": "nohost"}) == []
