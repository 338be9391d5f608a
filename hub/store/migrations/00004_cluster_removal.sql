-- kerf-hub clusters remove NAME: the cluster's tokens go at once; without
-- --purge its actions stay (the audit trail outlives the cluster) and its
-- row stays, marked removed, so that the name is not registered again over
-- the kept actions.

-- +goose Up
ALTER TABLE clusters ADD COLUMN removed_at BIGINT;

-- +goose Down
ALTER TABLE clusters DROP COLUMN removed_at;
