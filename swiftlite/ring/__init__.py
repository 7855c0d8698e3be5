from swiftlite.ring.ring import Ring, RingData, quorum_size, write_ring

__all__ = ["Ring", "RingData", "quorum_size", "write_ring"]
