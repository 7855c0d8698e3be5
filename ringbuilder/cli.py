"""swiftlite-ring-builder: the operator's tool, with swift-ring-builder's words.

    swiftlite-ring-builder <file.builder>                      show devices and balance
    swiftlite-ring-builder <file.builder> create <part_power> <replicas> <min_part_hours>
    swiftlite-ring-builder <file.builder> add <r1z1-ip:port/dev> <weight> [<dev> <weight> ...]
    swiftlite-ring-builder <file.builder> remove <search>
    swiftlite-ring-builder <file.builder> set_weight <search> <weight>
    swiftlite-ring-builder <file.builder> search <search>
    swiftlite-ring-builder <file.builder> rebalance [--seed N]
    swiftlite-ring-builder <file.builder> validate | dispersion | write_ring
    swiftlite-ring-builder <file.builder> pretend_min_part_hours_passed
    swiftlite-ring-builder <file.builder> set_min_part_hours <hours>

Exit status: 0 done, 1 done with a warning (nothing to reassign, balance not reached),
2 error (one line on stderr naming the problem; the builder file is left as it was).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ringbuilder.builder import RingBuilder, RingBuilderError
from ringbuilder.devices import format_device, parse_device_string, parse_weight
from swiftlite.ring.ring import write_ring

EXIT_OK, EXIT_WARNING, EXIT_ERROR = 0, 1, 2


def ring_path(builder_path: str) -> str:
    base = builder_path[:-len(".builder")] if builder_path.endswith(".builder") else builder_path
    return base + ".ring.gz"


def _int(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RingBuilderError(f"invalid {name} {text!r}: must be an integer") from None


def _need(args: list[str], n: int, usage: str) -> None:
    if len(args) != n:
        raise RingBuilderError(f"usage: {usage}")


def _find(b: RingBuilder, search: str) -> list[dict]:
    devs = b.search_devs(search)
    if not devs:
        raise RingBuilderError(f"no device matches search value {search!r}")
    return devs


def cmd_create(path: str, args: list[str]) -> int:
    _need(args, 3, "create <part_power> <replicas> <min_part_hours>")
    b = RingBuilder(_int("part_power", args[0]), _int("replicas", args[1]),
                    _int("min_part_hours", args[2]))
    b.save(path)
    print(f"Created {path}: {b.parts} partitions, {b.replicas} replicas, "
          f"min_part_hours {b.min_part_hours}")
    return EXIT_OK


def cmd_add(path: str, args: list[str]) -> int:
    if not args or len(args) % 2:
        raise RingBuilderError("usage: add <r<region>z<zone>-<ip>:<port>/<device>> <weight> ...")
    b = RingBuilder.load(path)
    added = []
    for text, weight in zip(args[::2], args[1::2], strict=True):
        dev = parse_device_string(text)
        dev["weight"] = parse_weight(weight)
        dev_id = b.add_dev(dev)
        added.append(b.devs[dev_id])
    b.save(path)
    for dev in added:
        print(f"Device {format_device(dev)} with {dev['weight']:g} weight got id {dev['id']}")
    return EXIT_OK


def cmd_remove(path: str, args: list[str]) -> int:
    _need(args, 1, "remove <search value>")
    b = RingBuilder.load(path)
    devs = _find(b, args[0])
    for dev in devs:
        b.remove_dev(dev["id"])
    b.save(path)
    for dev in devs:
        print(f"Device {format_device(dev)} marked for removal; rebalance to move its data")
    return EXIT_OK


def cmd_set_weight(path: str, args: list[str]) -> int:
    _need(args, 2, "set_weight <search value> <weight>")
    b = RingBuilder.load(path)
    weight = parse_weight(args[1])
    devs = _find(b, args[0])
    for dev in devs:
        b.set_dev_weight(dev["id"], weight)
    b.save(path)
    for dev in devs:
        print(f"Device {format_device(dev)} weight set to {weight:g}")
    return EXIT_OK


def cmd_search(path: str, args: list[str]) -> int:
    _need(args, 1, "search <search value>")
    b = RingBuilder.load(path)
    for dev in _find(b, args[0]):
        print(f"{format_device(dev)} weight {dev['weight']:g}")
    return EXIT_OK


def cmd_rebalance(path: str, args: list[str]) -> int:
    seed = None
    rest = list(args)
    if rest and rest[0].startswith("--seed"):
        flag = rest.pop(0)
        value = flag.split("=", 1)[1] if "=" in flag else (rest.pop(0) if rest else "")
        seed = _int("seed", value)
    elif len(rest) == 1:
        seed = _int("seed", rest.pop(0))
    if rest:
        raise RingBuilderError("usage: rebalance [--seed N]")
    b = RingBuilder.load(path)
    changed = b.devs_changed
    moved, balance = b.rebalance(seed=seed)
    ring = ring_path(path)
    if not moved and not changed and os.path.exists(ring):
        b.save(path)
        print(f"No partitions could be reassigned (balance {balance:.2f}%; "
              f"min_part_hours wait {b.min_part_seconds_left() // 60} min)")
        return EXIT_WARNING
    b.validate()
    write_ring(ring, b.get_ring_data())
    b.save(path)  # after the ring, so a crash in between just repeats the rebalance
    total = b.parts * b.replicas
    disp = b.dispersion_report()
    print(f"Reassigned {moved} ({100.0 * moved / total:.2f}%) partition-replicas. "
          f"Balance is now {balance:.2f}%. Dispersion is now {disp['percent']:.2f}%. "
          f"Wrote {ring}")
    if not moved:
        print("No partitions could be reassigned; wrote the new device list only")
        return EXIT_WARNING
    if not b.is_balanced():
        print("NOTE: balance not reached yet (min_part_hours or dispersion); "
              "rebalance again later")
        return EXIT_WARNING
    return EXIT_OK


def cmd_validate(path: str, args: list[str]) -> int:
    _need(args, 0, "validate")
    b = RingBuilder.load(path)
    b.validate()
    print(f"{path} is valid")
    return EXIT_OK


def cmd_dispersion(path: str, args: list[str]) -> int:
    _need(args, 0, "dispersion")
    b = RingBuilder.load(path)
    rep = b.dispersion_report()
    print(f"Dispersion is {rep['percent']:.2f}%: {rep['undispersed']} of {rep['parts']} "
          "partitions have replicas closer together than the topology requires")
    for level, n in rep["by_level"].items():
        print(f"  {level:<8} {n}")
    return EXIT_WARNING if rep["undispersed"] else EXIT_OK


def cmd_write_ring(path: str, args: list[str]) -> int:
    _need(args, 0, "write_ring")
    b = RingBuilder.load(path)
    b.validate()
    write_ring(ring_path(path), b.get_ring_data())
    print(f"Wrote {ring_path(path)}")
    return EXIT_OK


def cmd_pretend(path: str, args: list[str]) -> int:
    _need(args, 0, "pretend_min_part_hours_passed")
    b = RingBuilder.load(path)
    b.pretend_min_part_hours_passed()
    b.save(path)
    print("Partitions may move again now")
    return EXIT_OK


def cmd_set_min_part_hours(path: str, args: list[str]) -> int:
    _need(args, 1, "set_min_part_hours <hours>")
    b = RingBuilder.load(path)
    hours = _int("min_part_hours", args[0])
    if hours < 0:
        raise RingBuilderError(f"invalid min_part_hours {hours}: must be >= 0")
    b.min_part_hours = hours
    b.save(path)
    print(f"min_part_hours set to {hours}")
    return EXIT_OK


def cmd_show(path: str, args: list[str]) -> int:
    b = RingBuilder.load(path)
    live = b._live_devs()
    regions = {d["region"] for d in live}
    zones = {(d["region"], d["zone"]) for d in live}
    disp = b.dispersion_report()
    print(f"{path}, build version {b.version}")
    print(f"{b.parts} partitions, {b.replicas} replicas, {len(regions)} regions, "
          f"{len(zones)} zones, {len(live)} devices, {b.get_balance():.2f} balance, "
          f"{disp['percent']:.2f} dispersion")
    left = b.min_part_seconds_left()
    print(f"The minimum number of hours before a partition can be reassigned is "
          f"{b.min_part_hours} ({left // 3600}:{left // 60 % 60:02d} remaining)")
    if b.devs_changed:
        print("Devices changed since the last rebalance")
    counts = b.part_counts()
    bal = b.dev_balances()
    print("Devices:   id region zone ip address:port device weight partitions balance meta")
    for d in sorted(live, key=lambda d: d["id"]):
        print(f"{d['id']:>14} {d['region']:>6} {d['zone']:>4} "
              f"{d['ip'] + ':' + str(d['port']):>21} {d['device']:>6} {d['weight']:>6.2f} "
              f"{counts.get(d['id'], 0):>10} {bal.get(d['id'], 0.0):>7.2f} {d.get('meta', '')}")
    return EXIT_OK


COMMANDS: dict[str | None, Callable[[str, list[str]], int]] = {
    None: cmd_show,
    "create": cmd_create,
    "add": cmd_add,
    "remove": cmd_remove,
    "set_weight": cmd_set_weight,
    "search": cmd_search,
    "rebalance": cmd_rebalance,
    "validate": cmd_validate,
    "dispersion": cmd_dispersion,
    "write_ring": cmd_write_ring,
    "pretend_min_part_hours_passed": cmd_pretend,
    "set_min_part_hours": cmd_set_min_part_hours,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return EXIT_OK if argv else EXIT_ERROR
    path, cmd, args = argv[0], (argv[1] if len(argv) > 1 else None), argv[2:]
    handler = COMMANDS.get(cmd)
    if handler is None:
        print(f"error: unknown command {cmd!r} (try --help)", file=sys.stderr)
        return EXIT_ERROR
    try:
        return handler(path, args)
    except RingBuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except MemoryError:
        print(f"error: out of memory (part power too large for this machine?): {path}",
              file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"error: {exc.strerror or exc}: {exc.filename or path}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
