"""What containers and accounts share: the SQLite broker, group commit, listings."""
