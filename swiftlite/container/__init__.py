"""Container server: one SQLite DB per container, object listings, account roll-ups."""
