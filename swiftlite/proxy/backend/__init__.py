"""The proxy's backend floor: talking to storage nodes, below the core.

`nodes`: which nodes (read order, handoffs for writes, the error limiter and the one verdict
on what an answer says about a node); `replicas`: one backend request, hedged reads, the one
fan-out engine for buffered and streamed writes, quorum decisions; `local_reads`: a replica
on this host read from its disk (through the object engine's API) instead of over HTTP.
Imports nothing else of the proxy."""
