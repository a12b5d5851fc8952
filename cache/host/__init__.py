"""The host tier of partial caches: one cache shared by the Python workers of a host."""
