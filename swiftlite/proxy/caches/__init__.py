"""The proxy's caches, in one place and below everything else in it: account and container
info with the stamp table that keeps workers and hosts coherent (`info`, `write_log`), the
link cache (`link_cache`) and the hot-object cache (`object_cache`). They import nothing else
of the proxy."""
