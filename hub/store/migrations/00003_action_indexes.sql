-- The read API's order is (time, seq, id), newest first; one index per
-- filter that a query leads with.

-- +goose Up
CREATE INDEX actions_by_time ON actions (time, seq, id);
CREATE INDEX actions_by_type ON actions (type, time, seq, id);
CREATE INDEX actions_by_cluster ON actions (cluster, time, seq, id);
-- "one cluster's rollbacks" is the common pair; without this index a
-- cluster with few actions of the type is a scan of all its actions.
CREATE INDEX actions_by_cluster_type ON actions (cluster, type, time, seq, id);
CREATE INDEX actions_by_namespace ON actions (namespace, time, seq, id);
CREATE INDEX actions_by_workload ON actions (workload_id, time, seq, id);

-- +goose Down
DROP INDEX actions_by_workload;
DROP INDEX actions_by_namespace;
DROP INDEX actions_by_cluster_type;
DROP INDEX actions_by_cluster;
DROP INDEX actions_by_type;
DROP INDEX actions_by_time;
