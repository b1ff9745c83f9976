"""Test harness: the local control plane, redis-server processes, kubectl/helm helpers."""
