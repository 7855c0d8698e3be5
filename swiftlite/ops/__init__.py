"""Operator tools: cluster-wide checks run by an operator, not by the servers."""
