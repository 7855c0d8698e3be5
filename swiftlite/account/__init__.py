"""Account server: one SQLite DB per account listing its containers and their stats."""
