"""The read-only trace viewer (`nexus serve`): every brick and the exact source it came from.

Kept import-light: `links` is used by the Dagster assets, which should not pull in the web server.
"""
