package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"time"
)

// MaxSessionsPerToken bounds the sign-in sessions one token holds: a new
// one beyond it ends the oldest.
const MaxSessionsPerToken = 100

// NewSession starts a web sign-in session for the token with the id, valid
// for ttl, and returns its secret (32 random bytes, base64url) for the
// browser's cookie. The store keeps only the secret's SHA-256; expired
// sessions are deleted here, so the table stays bounded.
func (s *Store) NewSession(ctx context.Context, tokenID string, ttl time.Duration) (string, error) {
	if ttl <= 0 {
		return "", fmt.Errorf("new session: ttl %s must be positive", ttl)
	}
	secret := base64.RawURLEncoding.EncodeToString(randomBytes(32))
	now := s.now()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q("DELETE FROM sessions WHERE expires_at <= ?"), now.UnixNano()); err != nil {
			return fmt.Errorf("delete expired sessions: %w", err)
		}
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO sessions (id, token_id, created_at, expires_at) VALUES (?, ?, ?, ?)"),
			hashSecret(secret), tokenID, now.UnixNano(), now.Add(ttl).UnixNano()); err != nil {
			return fmt.Errorf("insert session: %w", err)
		}
		// Keep the newest MaxSessionsPerToken of the token's sessions.
		if _, err := tx.ExecContext(ctx, s.q("DELETE FROM sessions WHERE token_id = ? AND id NOT IN (SELECT id FROM sessions WHERE token_id = ? ORDER BY created_at DESC, id LIMIT ?)"),
			tokenID, tokenID, MaxSessionsPerToken); err != nil {
			return fmt.Errorf("bound the token's sessions: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("start a session of token %s: %w", tokenID, err)
	}
	return secret, nil
}

// SessionToken returns the token whose live session secret is; an
// unknown or expired session is ErrBadToken.
func (s *Store) SessionToken(ctx context.Context, secret string) (Token, error) {
	if secret == "" || len(secret) > 64 {
		return Token{}, ErrBadToken
	}
	var t Token
	var created int64
	err := s.db.QueryRowContext(ctx, s.q("SELECT t.id, t.kind, COALESCE(t.cluster, ''), t.name, t.created_at FROM sessions s JOIN tokens t ON t.id = s.token_id WHERE s.id = ? AND s.expires_at > ?"),
		hashSecret(secret), s.now().UnixNano()).Scan(&t.ID, &t.Kind, &t.Cluster, &t.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, ErrBadToken
	}
	if err != nil {
		return Token{}, fmt.Errorf("look up session: %w", err)
	}
	t.CreatedAt = time.Unix(0, created).UTC()
	return t, nil
}

// EndSession deletes the session whose secret is; an unknown one is not an
// error (signing out twice is signing out).
func (s *Store) EndSession(ctx context.Context, secret string) error {
	if _, err := s.db.ExecContext(ctx, s.q("DELETE FROM sessions WHERE id = ?"), hashSecret(secret)); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}
