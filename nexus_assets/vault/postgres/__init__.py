"""The vault on PostgreSQL (DESIGN §11): a pooled psycopg connection that takes the stores' SQL,
and the schema, versioned on its own."""
