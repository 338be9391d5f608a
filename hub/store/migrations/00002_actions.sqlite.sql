-- The actions, one row per idempotency key and cluster. Only the id column
-- differs between SQLite and PostgreSQL (00002_actions.{sqlite,postgres}.sql).

-- +goose Up
CREATE TABLE actions (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	cluster        TEXT NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
	key            TEXT NOT NULL,
	digest         TEXT NOT NULL,
	workload_id    TEXT NOT NULL,
	seq            BIGINT NOT NULL,
	time           BIGINT NOT NULL,
	type           TEXT NOT NULL,
	reason         TEXT NOT NULL,
	namespace      TEXT NOT NULL,
	recommendation TEXT NOT NULL,
	kind           TEXT NOT NULL,
	name           TEXT NOT NULL,
	phase          TEXT NOT NULL,
	body           TEXT NOT NULL,
	received_at    BIGINT NOT NULL,
	UNIQUE (cluster, key)
);

-- +goose Down
DROP TABLE actions;
