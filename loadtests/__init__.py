"""Load generators for swiftlite (or any Swift v1 endpoint): bench.py and locustfile.py."""
