-- The web pages' sign-in sessions (hub/ui.go, docs/hub.md "The pages"): a
-- browser that posted a read token once holds a random session id in a
-- cookie; only its SHA-256 is kept. A session dies with its token.

-- +goose Up
CREATE TABLE sessions (
	id         TEXT PRIMARY KEY,
	token_id   TEXT NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_by_token ON sessions (token_id, created_at);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

-- +goose Down
DROP TABLE sessions;
