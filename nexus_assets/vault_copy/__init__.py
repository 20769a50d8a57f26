"""`nexus vault copy SRC DST`: a vault moved between backends (DuckDB ↔ PostgreSQL), every
manifest hash checked on arrival (DESIGN §11)."""
