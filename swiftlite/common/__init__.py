"""What every role shares, in floors (each imports only those below it; tested by
tests/unit/test_import_cycles.py):

- the primitives, this package's own modules: config, names and limits (`constraints`),
  timestamps, hashing and HMACs, request signing, HTTP helpers, byte ranges and conditions
  (`ranges`), storage policies and erasure-code arithmetic (`ec/`), devices, the bounded
  thread pool, file helpers;
- `clients/`: talking to other servers (backend HTTP, memcached, recon);
- `observe/`: metrics, recon, the request log;
- `runtime/`: the server runtime (aiohttp application, workers, limits, daemons) and every
  adaptation of aiohttp.
"""
