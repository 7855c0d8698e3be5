"""Observability: Prometheus metrics (`metrics`, which pulls the thread pool's and the
devices' state rather than being imported by them), `/recon` (`recon`), the request log
(`logs`) and the headline figures (`metrics_summary`). Above the primitives and the clients'
floor, below the server runtime."""
