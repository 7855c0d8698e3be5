"""Object storage: the object server, its on-disk files and the incremental suffix digests."""
