"""Proxy pipeline features, one module each (see swiftlite/proxy/pipeline.py)."""
