-- The vault's schema on PostgreSQL: the DuckDB schema of migration 22 (nexus_assets/vault/migrations.py),
-- table for table and column for column, so rows copy across unchanged (`nexus vault copy`).
-- Every text column collates bytewise ("C"), as DuckDB compares: anything that sorts does so in the
-- same defined order whatever the server's default collation (ICU en-US on a typical server).
-- `rowid` on the two history tables is DuckDB's insertion order, a tiebreak for equal times.
CREATE TABLE audit (
    audit_id text COLLATE "C" NOT NULL,
    recorded_at timestamptz NOT NULL,
    user_name text COLLATE "C" NOT NULL,
    agent text COLLATE "C" NOT NULL,
    question_sha256 text COLLATE "C" NOT NULL,
    topic_ids text COLLATE "C" NOT NULL,
    brick_ids text COLLATE "C" NOT NULL,
    model text COLLATE "C" NOT NULL,
    prompt_tokens integer NOT NULL,
    completion_tokens integer NOT NULL,
    cost_usd double precision,
    ccc double precision,
    revisions integer NOT NULL,
    outcome text COLLATE "C" NOT NULL,
    reason text COLLATE "C",
    answer_sha256 text COLLATE "C",
    PRIMARY KEY(audit_id)
);
CREATE TABLE brick_relations (
    topic_id text COLLATE "C" NOT NULL,
    model text COLLATE "C" NOT NULL,
    brick_id text COLLATE "C" NOT NULL,
    related_id text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    similarity double precision NOT NULL,
    conflict text COLLATE "C",
    computed_at timestamptz NOT NULL
);
CREATE TABLE brick_sources (
    brick_id text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    json_path text COLLATE "C" NOT NULL,
    start_offset integer NOT NULL,
    end_offset integer NOT NULL,
    node_checksum text COLLATE "C" NOT NULL,
    node_type text COLLATE "C",
    branch text COLLATE "C" DEFAULT 'current',
    PRIMARY KEY(brick_id, run_id, json_path, start_offset, end_offset, node_checksum)
);
CREATE TABLE bricks (
    brick_id text COLLATE "C" NOT NULL,
    topic_id text COLLATE "C" NOT NULL,
    content text COLLATE "C" NOT NULL,
    fingerprint text COLLATE "C" NOT NULL,
    state text COLLATE "C" NOT NULL,
    order_index integer,
    superseded_by text COLLATE "C",
    stale boolean NOT NULL,
    first_seen timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    first_key bytea,
    rank_key bytea,
    PRIMARY KEY(brick_id)
);
CREATE TABLE clean_syncs (
    scope text COLLATE "C" NOT NULL,
    fingerprint text COLLATE "C" NOT NULL,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY(scope)
);
CREATE TABLE dropped_topics (
    topic_id text COLLATE "C" NOT NULL,
    definition_json text COLLATE "C" NOT NULL,
    source_file text COLLATE "C",
    actor text COLLATE "C" NOT NULL,
    dropped_at timestamptz NOT NULL
);
CREATE TABLE embeddings (
    model text COLLATE "C" NOT NULL,
    fingerprint text COLLATE "C" NOT NULL,
    vector real[] NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY(model, fingerprint)
);
CREATE TABLE extractions (
    extraction_key text COLLATE "C" NOT NULL,
    topic_id text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    version_id text COLLATE "C" NOT NULL,
    extractor text COLLATE "C" NOT NULL,
    pointers_json text COLLATE "C" NOT NULL,
    validated boolean NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY(extraction_key)
);
CREATE TABLE file_stats (
    path text COLLATE "C" NOT NULL,
    size bigint NOT NULL,
    mtime_ns bigint NOT NULL,
    ctime_ns bigint NOT NULL,
    inode bigint NOT NULL,
    file_sha256 text COLLATE "C" NOT NULL,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY(path)
);
CREATE TABLE forgotten_files (
    file_sha256 text COLLATE "C" NOT NULL,
    tombstone_id text COLLATE "C" NOT NULL,
    PRIMARY KEY(file_sha256)
);
CREATE TABLE forgotten_runs (
    run_id text COLLATE "C" NOT NULL,
    tombstone_id text COLLATE "C" NOT NULL,
    PRIMARY KEY(run_id)
);
CREATE TABLE ingestion_errors (
    file text COLLATE "C" NOT NULL,
    file_sha256 text COLLATE "C",
    conversation text COLLATE "C",
    problem text COLLATE "C" NOT NULL,
    recorded_at timestamptz NOT NULL
);
CREATE TABLE llm_batches (
    batch_id text COLLATE "C" NOT NULL,
    model text COLLATE "C" NOT NULL,
    input_file_id text COLLATE "C" NOT NULL,
    request_keys_json text COLLATE "C" NOT NULL,
    status text COLLATE "C" NOT NULL,
    created_at timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY(batch_id)
);
CREATE TABLE llm_calls (
    call_key text COLLATE "C" NOT NULL,
    topic_id text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    model text COLLATE "C" NOT NULL,
    prompt_version text COLLATE "C" NOT NULL,
    prompt_hash text COLLATE "C" NOT NULL,
    request_json text COLLATE "C" NOT NULL,
    raw_response text COLLATE "C",
    pointers_json text COLLATE "C" NOT NULL,
    prompt_tokens integer,
    completion_tokens integer,
    latency_ms integer,
    status text COLLATE "C" NOT NULL,
    error text COLLATE "C",
    attempts integer NOT NULL,
    chunk_index integer NOT NULL,
    chunk_count integer NOT NULL,
    response_format text COLLATE "C",
    recorded_at timestamptz NOT NULL,
    request_key text COLLATE "C",
    response_bytes bigint,
    response_sha256 text COLLATE "C"
);
CREATE TABLE llm_requests (
    request_key text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    topic_ids_json text COLLATE "C" NOT NULL,
    model text COLLATE "C" NOT NULL,
    prompt_version text COLLATE "C" NOT NULL,
    prompt_hash text COLLATE "C" NOT NULL,
    request_json text COLLATE "C" NOT NULL,
    raw_response text COLLATE "C",
    response_bytes bigint,
    response_sha256 text COLLATE "C",
    prompt_tokens integer,
    completion_tokens integer,
    latency_ms integer,
    status text COLLATE "C" NOT NULL,
    error text COLLATE "C",
    attempts integer NOT NULL,
    chunk_index integer NOT NULL,
    chunk_count integer NOT NULL,
    response_format text COLLATE "C",
    batch_id text COLLATE "C",
    recorded_at timestamptz NOT NULL
);
CREATE TABLE manifests (
    topic_id text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    manifest_hash text COLLATE "C" NOT NULL,
    previous_hash text COLLATE "C",
    bricks_json text COLLATE "C" NOT NULL,
    sealed boolean NOT NULL,
    dagster_run_id text COLLATE "C",
    created_at timestamptz NOT NULL,
    tombstone_json text COLLATE "C",
    entries_sha256 text COLLATE "C",
    entry_count integer,
    PRIMARY KEY(topic_id, seq)
);
CREATE TABLE nodes (
    run_id text COLLATE "C" NOT NULL,
    version_id text COLLATE "C" NOT NULL,
    json_path text COLLATE "C" NOT NULL,
    node_type text COLLATE "C" NOT NULL,
    timestamp text COLLATE "C",
    position integer NOT NULL,
    text text COLLATE "C" NOT NULL,
    checksum text COLLATE "C" NOT NULL,
    branch text COLLATE "C" DEFAULT 'current' NOT NULL,
    hidden boolean DEFAULT false NOT NULL,
    PRIMARY KEY(run_id, version_id, json_path)
);
CREATE TABLE occurrences (
    topic_id text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    version_id text COLLATE "C" NOT NULL,
    json_path text COLLATE "C" NOT NULL,
    start_offset integer NOT NULL,
    end_offset integer NOT NULL,
    node_checksum text COLLATE "C" NOT NULL,
    content text COLLATE "C" NOT NULL,
    fingerprint text COLLATE "C" NOT NULL,
    ts text COLLATE "C",
    position integer NOT NULL,
    extraction_key text COLLATE "C" NOT NULL,
    node_type text COLLATE "C",
    branch text COLLATE "C" DEFAULT 'current',
    PRIMARY KEY(topic_id, run_id, json_path, start_offset, end_offset, node_checksum)
);
CREATE TABLE rejections (
    extraction_key text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    topic_id text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    version_id text COLLATE "C" NOT NULL,
    json_path text COLLATE "C",
    verbatim_quote text COLLATE "C",
    reason text COLLATE "C" NOT NULL,
    detail text COLLATE "C" NOT NULL,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY(extraction_key, seq)
);
CREATE TABLE relation_builds (
    topic_id text COLLATE "C" NOT NULL,
    model text COLLATE "C" NOT NULL,
    brick_id text COLLATE "C" NOT NULL,
    threshold double precision NOT NULL,
    computed_at timestamptz NOT NULL
);
CREATE TABLE resolution_inputs (
    topic_id text COLLATE "C" NOT NULL,
    run_id text COLLATE "C",
    line text COLLATE "C" NOT NULL
);
CREATE TABLE run_closures (
    run_id text COLLATE "C" NOT NULL,
    actor text COLLATE "C" NOT NULL,
    closed_at timestamptz NOT NULL,
    PRIMARY KEY(run_id)
);
CREATE TABLE run_files (
    file_sha256 text COLLATE "C" NOT NULL,
    path text COLLATE "C" NOT NULL,
    runs integer NOT NULL,
    errors integer NOT NULL,
    first_seen timestamptz NOT NULL,
    reader_version integer,
    PRIMARY KEY(file_sha256, path)
);
CREATE TABLE runs (
    run_id text COLLATE "C" NOT NULL,
    version_id text COLLATE "C" NOT NULL,
    format text COLLATE "C" NOT NULL,
    status text COLLATE "C" NOT NULL,
    started_at text COLLATE "C",
    source_file text COLLATE "C" NOT NULL,
    file_sha256 text COLLATE "C" NOT NULL,
    raw_json text COLLATE "C" NOT NULL,
    ingest_seq bigint NOT NULL,
    is_latest boolean NOT NULL,
    ingested_at timestamptz NOT NULL,
    PRIMARY KEY(run_id, version_id)
);
CREATE TABLE schema_version (
    version integer NOT NULL,
    description text COLLATE "C" NOT NULL,
    applied_at timestamptz NOT NULL,
    PRIMARY KEY(version)
);
CREATE TABLE sealed_bricks (
    topic_id text COLLATE "C" NOT NULL,
    brick_id text COLLATE "C" NOT NULL,
    order_index integer NOT NULL,
    content text COLLATE "C" NOT NULL,
    fingerprint text COLLATE "C" NOT NULL,
    sources_json text COLLATE "C" NOT NULL,
    manifest_hash text COLLATE "C" NOT NULL,
    sealed_at timestamptz NOT NULL,
    PRIMARY KEY(topic_id, brick_id)
);
CREATE TABLE source_status (
    run_id text COLLATE "C" NOT NULL,
    json_path text COLLATE "C" NOT NULL,
    node_checksum text COLLATE "C" NOT NULL,
    drifted boolean NOT NULL,
    problem text COLLATE "C",
    checked_at timestamptz NOT NULL,
    PRIMARY KEY(run_id, json_path, node_checksum)
);
CREATE TABLE source_status_history (
    run_id text COLLATE "C" NOT NULL,
    json_path text COLLATE "C" NOT NULL,
    node_checksum text COLLATE "C" NOT NULL,
    drifted boolean NOT NULL,
    problem text COLLATE "C",
    observed_by text COLLATE "C" NOT NULL,
    observed_at timestamptz NOT NULL,
    rowid bigserial
);
CREATE TABLE staged_brick_sources (
    topic_id text COLLATE "C" NOT NULL,
    brick_id text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    json_path text COLLATE "C" NOT NULL,
    start_offset integer NOT NULL,
    end_offset integer NOT NULL,
    node_checksum text COLLATE "C" NOT NULL,
    node_type text COLLATE "C",
    branch text COLLATE "C"
);
CREATE TABLE staged_bricks (
    topic_id text COLLATE "C" NOT NULL,
    brick_id text COLLATE "C" NOT NULL,
    content text COLLATE "C" NOT NULL,
    fingerprint text COLLATE "C" NOT NULL,
    state text COLLATE "C" NOT NULL,
    order_index integer,
    superseded_by text COLLATE "C",
    stale boolean NOT NULL,
    first_key bytea,
    rank_key bytea
);
CREATE TABLE staged_resolution_inputs (
    topic_id text COLLATE "C" NOT NULL,
    run_id text COLLATE "C",
    line text COLLATE "C" NOT NULL
);
CREATE TABLE staged_resolutions (
    topic_id text COLLATE "C" NOT NULL,
    inputs_digest text COLLATE "C",
    staged_at timestamptz NOT NULL,
    partial boolean DEFAULT false
);
CREATE TABLE syncs (
    topic_id text COLLATE "C" NOT NULL,
    dagster_run_id text COLLATE "C",
    status text COLLATE "C" NOT NULL,
    manifest_hash text COLLATE "C",
    detail text COLLATE "C",
    finished_at timestamptz NOT NULL,
    inputs_digest text COLLATE "C"
);
CREATE TABLE tombstones (
    tombstone_id text COLLATE "C" NOT NULL,
    run_ids_json text COLLATE "C" NOT NULL,
    file_sha256s_json text COLLATE "C" NOT NULL,
    brick_ids_json text COLLATE "C" NOT NULL,
    topic_ids_json text COLLATE "C" NOT NULL,
    reason text COLLATE "C" NOT NULL,
    actor text COLLATE "C" NOT NULL,
    forgotten_at timestamptz NOT NULL,
    PRIMARY KEY(tombstone_id)
);
CREATE TABLE topic_transitions (
    topic_id text COLLATE "C" NOT NULL,
    from_state text COLLATE "C",
    to_state text COLLATE "C" NOT NULL,
    actor text COLLATE "C" NOT NULL,
    changed_at timestamptz NOT NULL,
    rowid bigserial
);
CREATE TABLE topics (
    topic_id text COLLATE "C" NOT NULL,
    display_name text COLLATE "C" NOT NULL,
    state text COLLATE "C" NOT NULL,
    ordering_rule text COLLATE "C" NOT NULL,
    definition_json text COLLATE "C" NOT NULL,
    source_file text COLLATE "C",
    updated_at timestamptz NOT NULL,
    PRIMARY KEY(topic_id)
);
CREATE TABLE vault_sources (
    kind text COLLATE "C" NOT NULL,
    path text COLLATE "C" NOT NULL,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY(kind)
);
CREATE TABLE vault_marks (
    mark text COLLATE "C" NOT NULL,
    detail text COLLATE "C" NOT NULL,
    marked_at timestamptz NOT NULL,
    PRIMARY KEY(mark)
);
CREATE SEQUENCE ingest_seq;

-- Lookups the phases make by topic or run (DuckDB scans these; PostgreSQL wants an index).
CREATE INDEX bricks_topic ON bricks (topic_id, state);
CREATE INDEX bricks_fingerprint ON bricks (fingerprint);
CREATE INDEX brick_sources_run ON brick_sources (run_id, json_path);
CREATE INDEX occurrences_run ON occurrences (run_id);
CREATE INDEX occurrences_fingerprint ON occurrences (topic_id, fingerprint);
CREATE INDEX runs_latest ON runs (run_id) WHERE is_latest;
CREATE INDEX extractions_run ON extractions (run_id, version_id);
CREATE INDEX rejections_run ON rejections (run_id);

-- DuckDB's arg_max / arg_min for the value and key types the stores use.
CREATE TYPE nexus_arg AS (v text, k text, kt timestamptz, kn bigint);
CREATE FUNCTION nexus_arg_max_t(s nexus_arg, v text, k text) RETURNS nexus_arg LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE WHEN k IS NULL THEN s WHEN s IS NULL OR k > (s).k THEN ROW(v, k, NULL, NULL)::nexus_arg ELSE s END $$;
CREATE FUNCTION nexus_arg_min_t(s nexus_arg, v text, k text) RETURNS nexus_arg LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE WHEN k IS NULL THEN s WHEN s IS NULL OR k < (s).k THEN ROW(v, k, NULL, NULL)::nexus_arg ELSE s END $$;
CREATE FUNCTION nexus_arg_max_ts(s nexus_arg, v text, k timestamptz) RETURNS nexus_arg LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE WHEN k IS NULL THEN s WHEN s IS NULL OR k > (s).kt THEN ROW(v, NULL, k, NULL)::nexus_arg ELSE s END $$;
CREATE FUNCTION nexus_arg_max_n(s nexus_arg, v text, k bigint) RETURNS nexus_arg LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE WHEN k IS NULL THEN s WHEN s IS NULL OR k > (s).kn THEN ROW(v, NULL, NULL, k)::nexus_arg ELSE s END $$;
CREATE FUNCTION nexus_arg_value(s nexus_arg) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT (s).v $$;
CREATE AGGREGATE arg_max(text, text) (SFUNC = nexus_arg_max_t, STYPE = nexus_arg, FINALFUNC = nexus_arg_value);
CREATE AGGREGATE arg_min(text, text) (SFUNC = nexus_arg_min_t, STYPE = nexus_arg, FINALFUNC = nexus_arg_value);
CREATE AGGREGATE arg_max(text, timestamptz) (SFUNC = nexus_arg_max_ts, STYPE = nexus_arg, FINALFUNC = nexus_arg_value);
CREATE AGGREGATE arg_max(text, bigint) (SFUNC = nexus_arg_max_n, STYPE = nexus_arg, FINALFUNC = nexus_arg_value);

-- min/max of place keys (bytea), which DuckDB has for BLOB and PostgreSQL lacks.
CREATE FUNCTION nexus_bytea_min(a bytea, b bytea) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT AS
  $$ SELECT CASE WHEN a <= b THEN a ELSE b END $$;
CREATE FUNCTION nexus_bytea_max(a bytea, b bytea) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT AS
  $$ SELECT CASE WHEN a >= b THEN a ELSE b END $$;
CREATE AGGREGATE min(bytea) (SFUNC = nexus_bytea_min, STYPE = bytea);
CREATE AGGREGATE max(bytea) (SFUNC = nexus_bytea_max, STYPE = bytea);
