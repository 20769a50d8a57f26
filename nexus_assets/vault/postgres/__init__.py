"""The vault on PostgreSQL (docs/deployment.md): a pooled psycopg connection that takes the stores' SQL,
and the schema, versioned on its own."""
