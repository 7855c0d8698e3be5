"""swiftlite-migrate: bulk upload of a file tree into a container, in ring (partition) order."""
