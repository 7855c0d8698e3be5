"""The server runtime: the aiohttp application every server runs (`server`), its worker
processes (`supervisor`), stalled-client and connection limits (`stall`, `max_clients`), the
background daemons' loop (`daemon`), and every adaptation of aiohttp's behaviour
(`aiohttp_seams`: each private attribute read or written, each module global replaced, in one
module; `lenient_parser`: the request parser built on aiohttp's), tested against the aiohttp
versions pyproject.toml allows. The top floor of `common/`: it may use the primitives, the
clients and observability."""
