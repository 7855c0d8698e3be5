from swiftlite.ring.ring import Ring, RingData, write_ring

__all__ = ["Ring", "RingData", "write_ring"]
