"""Account node headers and the "does the account need a report" check."""

from __future__ import annotations

import pytest

from swiftlite.common.http import HTTPError
from swiftlite.container.account_reporter import needs_report, parse_account_nodes


def test_parse_account_nodes():
    assert parse_account_nodes({}) is None
    got = parse_account_nodes({"X-Account-Host": "10.0.0.1:6202, [::1]:6202",
                               "X-Account-Device": "sda,sdb", "X-Account-Partition": "7"})
    assert got == {"partition": 7, "nodes": [
        {"ip": "10.0.0.1", "port": 6202, "device": "sda"},
        {"ip": "::1", "port": 6202, "device": "sdb"}]}
    for bad in ({"X-Account-Host": "h:1", "X-Account-Device": "a,b", "X-Account-Partition": "1"},
                {"X-Account-Host": "h:1", "X-Account-Device": "a", "X-Account-Partition": "x"},
                {"X-Account-Host": "nohostport", "X-Account-Device": "a",
                 "X-Account-Partition": "1"}):
        with pytest.raises(HTTPError) as exc:
            parse_account_nodes(bad)
        assert exc.value.status == 400


def test_needs_report():
    info = {"put_timestamp": "1", "delete_timestamp": "0", "object_count": 3, "bytes_used": 9,
            "reported_put_timestamp": "1", "reported_delete_timestamp": "0",
            "reported_object_count": 3, "reported_bytes_used": 9}
    assert not needs_report(info)
    assert needs_report({**info, "object_count": 4})
    assert needs_report({**info, "delete_timestamp": "2"})
