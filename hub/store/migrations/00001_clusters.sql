-- The registered clusters, their credentials and the action counters.
-- Times are Unix nanoseconds (BIGINT) on both SQLite and PostgreSQL.

-- +goose Up
CREATE TABLE clusters (
	name             TEXT PRIMARY KEY,
	registered_at    BIGINT NOT NULL,
	last_contact     BIGINT,
	leader_identity  TEXT NOT NULL DEFAULT '',
	agents_connected BIGINT NOT NULL DEFAULT 0,
	undelivered      BIGINT NOT NULL DEFAULT 0,
	lag_seconds      DOUBLE PRECISION NOT NULL DEFAULT 0
);

-- A token is kerf_<id>_<secret>; only the SHA-256 of the secret is kept.
-- kind 'cluster' writes its cluster's actions; kind 'reader' reads.
CREATE TABLE tokens (
	id         TEXT PRIMARY KEY,
	kind       TEXT NOT NULL CHECK (kind IN ('cluster', 'reader')),
	cluster    TEXT REFERENCES clusters (name) ON DELETE CASCADE,
	name       TEXT NOT NULL,
	hash       TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	CHECK ((kind = 'cluster') = (cluster IS NOT NULL))
);

-- kerf_actions_total{cluster,type,reason,resource}: incremented in the
-- transaction that first stores an action, never by a replay, never
-- decreased by retention; every hub replica reads the same rows.
CREATE TABLE action_counts (
	cluster  TEXT NOT NULL,
	type     TEXT NOT NULL,
	reason   TEXT NOT NULL,
	resource TEXT NOT NULL,
	count    BIGINT NOT NULL,
	PRIMARY KEY (cluster, type, reason, resource)
);

-- Each workload's newest action and phase.
CREATE TABLE workloads (
	id          TEXT PRIMARY KEY,
	cluster     TEXT NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
	namespace   TEXT NOT NULL,
	kind        TEXT NOT NULL,
	name        TEXT NOT NULL,
	phase       TEXT NOT NULL,
	last_action BIGINT NOT NULL,
	last_time   BIGINT NOT NULL,
	last_seq    BIGINT NOT NULL,
	UNIQUE (cluster, namespace, kind, name)
);

-- +goose Down
DROP TABLE workloads;
DROP TABLE action_counts;
DROP TABLE tokens;
DROP TABLE clusters;
