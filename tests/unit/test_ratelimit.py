"""The ratelimit feature's rate by container size (interpolated between the sizes given)."""

from __future__ import annotations

import pytest

from swiftlite.common.config import Section
from swiftlite.proxy.middleware.ratelimit import _sizes, rate_for


def test_rates_by_size_are_interpolated_and_start_at_the_smallest_size():
    table = _sizes(Section(container_ratelimit_100="100", container_ratelimit_1000="10",
                           container_ratelimit_x="5", container_ratelimit_50="0",
                           account_ratelimit="3"), "container_ratelimit_")
    assert table == [(100, 100.0), (1000, 10.0)]  # junk and zero rates ignored
    assert rate_for(table, 99) == 0  # below the smallest size: no limit
    assert rate_for(table, 100) == 100
    assert rate_for(table, 550) == pytest.approx(55)
    assert rate_for(table, 1000) == 10
    assert rate_for(table, 10**9) == 10  # past the largest it stays
    assert rate_for([], 10**9) == 0
