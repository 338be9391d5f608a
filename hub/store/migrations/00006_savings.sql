-- The leaders' savings reports (docs/hub.md, "Savings reports"): each
-- cluster's latest per-namespace requests, manifest, in force and
-- recommended. A report replaces the cluster's rows whole; the report's
-- time is on the cluster, so an older report (a deposed leader's) is
-- refused, and a report of no namespace still says when it was made.

-- +goose Up
ALTER TABLE clusters ADD COLUMN savings_reported_at BIGINT;
CREATE TABLE savings (
	cluster            TEXT NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
	namespace          TEXT NOT NULL,
	workloads          BIGINT NOT NULL,
	manifest_cpu       BIGINT NOT NULL,
	manifest_memory    BIGINT NOT NULL,
	in_force_cpu       BIGINT NOT NULL,
	in_force_memory    BIGINT NOT NULL,
	recommended_cpu    BIGINT NOT NULL,
	recommended_memory BIGINT NOT NULL,
	unrecorded         BIGINT NOT NULL,
	PRIMARY KEY (cluster, namespace)
);

-- +goose Down
DROP TABLE savings;
ALTER TABLE clusters DROP COLUMN savings_reported_at;
