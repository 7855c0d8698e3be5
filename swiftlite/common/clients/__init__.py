"""Clients of other servers: the backend HTTP client (`fastclient`, signed requests with
connection pools), aiohttp sessions for daemons (`client`), memcached (`memcache`) and the
recon client (`recon_client`). They use the primitives (`swiftlite.common`) only."""
