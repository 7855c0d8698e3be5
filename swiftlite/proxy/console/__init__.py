"""The web console under `/console/`: static files (no build step, no third-party requests),
an S3-key sign-in that trades a key pair for the user's own token, and the operator's view of
the cluster for reseller admins. Everything else it does goes through the public API with the
signed-in user's own rights."""
