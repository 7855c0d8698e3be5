"""In-process storage nodes on loopback for the replication tests: real servers, real rings."""

from __future__ import annotations

import os
from array import array
from typing import Any

from aiohttp import web

from swiftlite.common.config import load_sections
from swiftlite.ring import RingData, write_ring
from tests.helpers import free_port


class Node:
    """One storage node: a devices root, a conf file, and a running server of one role."""

    def __init__(self, root: str, name: str, role: str, devices: list[str]) -> None:
        self.root = root
        self.name = name
        self.role = role
        self.devices_root = os.path.join(root, name)
        self.devices = devices
        for d in devices:
            os.makedirs(os.path.join(self.devices_root, d), exist_ok=True)
        self.port = free_port()
        self.conf_path = os.path.join(root, f"{name}.conf")
        self.runner: web.AppRunner | None = None

    def write_conf(self, swift_dir: str, extra: dict[str, dict[str, Any]]) -> None:
        lines = ["[DEFAULT]", f"devices = {self.devices_root}", f"swift_dir = {swift_dir}",
                 "mount_check = false", f"status_dir = {os.path.join(self.root, 'run', self.name)}",
                 "", f"[{self.role}-server]", "bind_ip = 127.0.0.1", f"bind_port = {self.port}",
                 "fsync = false", "db_synchronous = NORMAL", ""]
        for sec, items in extra.items():
            lines.append(f"[{sec}]")
            lines.extend(f"{k} = {v}" for k, v in items.items())
            lines.append("")
        with open(self.conf_path, "w") as f:
            f.write("\n".join(lines))

    def section(self, name: str):
        return load_sections(self.conf_path)[name]

    def dev_path(self, dev: str | None = None) -> str:
        return os.path.join(self.devices_root, dev or self.devices[0])

    async def start(self, make_app) -> None:
        app = make_app(self.section(f"{self.role}-server"))
        if hasattr(app, "__await__"):
            app = await app
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


def write_test_ring(path: str, nodes: list[Node], assignment: list[list[int]],
                    part_power: int) -> list[dict[str, Any]]:
    """Ring with one device per node entry (first device of each node); `assignment` is
    replica -> partition -> index into `nodes`."""
    devs = []
    for i, n in enumerate(nodes):
        devs.append({"id": i, "region": 1, "zone": i + 1, "ip": "127.0.0.1", "port": n.port,
                     "device": n.devices[0], "weight": 100.0})
    tables = [array("H", row) for row in assignment]
    write_ring(path, RingData(part_power, len(assignment), devs, tables))
    return devs
