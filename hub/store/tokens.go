package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// TokenKind is what a token may do.
type TokenKind string

// The kinds of token.
const (
	// ClusterToken writes its own cluster's actions and nothing else.
	ClusterToken TokenKind = "cluster"
	// ReaderToken reads every cluster's actions, workloads and metrics.
	ReaderToken TokenKind = "reader"
)

// tokenPrefix starts every token, so that a leaked one is recognisable.
const tokenPrefix = "kerf_"

// Token is a registered credential, without its secret (which the hub
// never keeps).
type Token struct {
	// ID is the token's public part, the id in kerf_<id>_<secret>.
	ID string
	// Kind is cluster or reader.
	Kind TokenKind
	// Cluster is the cluster a cluster token writes; empty for readers.
	Cluster string
	// Name is the token's label: the cluster's name, or the reader's.
	Name string
	// CreatedAt is when it was made.
	CreatedAt time.Time
}

// newToken returns a fresh token and the hash of its secret: 8 random
// bytes of id and 32 of secret, from crypto/rand.
func newToken() (token, id, hash string) {
	id = hex.EncodeToString(randomBytes(8))
	secret := base64.RawURLEncoding.EncodeToString(randomBytes(32))
	return tokenPrefix + id + "_" + secret, id, hashSecret(secret)
}

// randomBytes returns n bytes from crypto/rand, which does not fail.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// splitToken reads kerf_<id>_<secret>; the secret may hold '_'.
func splitToken(token string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	return id, secret, ok && len(id) == 16 && secret != ""
}

// AddCluster registers a cluster and returns its token, which is shown
// only now: the store keeps its hash. A taken name is ErrExists; the name
// of a cluster removed with its actions kept is ErrRemoved.
func (s *Store) AddCluster(ctx context.Context, name string) (string, error) {
	token, id, hash := newToken()
	now := s.now().UnixNano()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q("INSERT INTO clusters (name, registered_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"), name, now)
		if err != nil {
			return fmt.Errorf("insert cluster: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("insert cluster: %w", err)
		} else if n == 0 {
			if err := s.refuseRemoved(ctx, tx, name); err != nil {
				return err
			}
			return fmt.Errorf("cluster %q: %w", name, ErrExists)
		}
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO tokens (id, kind, cluster, name, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)"),
			id, string(ClusterToken), name, name, hash, now); err != nil {
			return fmt.Errorf("insert cluster token: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("register cluster %q: %w", name, err)
	}
	return token, nil
}

// AddClusterToken makes another token for a registered cluster (to rotate:
// add one, deploy it, revoke the old). An unknown cluster is ErrNotFound, a
// removed one ErrRemoved.
func (s *Store) AddClusterToken(ctx context.Context, cluster string) (string, error) {
	token, id, hash := newToken()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q("SELECT COUNT(*) FROM clusters WHERE name = ?"), cluster).Scan(&n); err != nil {
			return fmt.Errorf("look up cluster: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("cluster %q: %w", cluster, ErrNotFound)
		}
		if err := s.refuseRemoved(ctx, tx, cluster); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q("INSERT INTO tokens (id, kind, cluster, name, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)"),
			id, string(ClusterToken), cluster, cluster, hash, s.now().UnixNano())
		if err != nil {
			return fmt.Errorf("insert cluster token: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("add token of cluster %q: %w", cluster, err)
	}
	return token, nil
}

// AddReader makes a read token labelled name and returns it; like a
// cluster's, it is shown only now.
func (s *Store) AddReader(ctx context.Context, name string) (string, error) {
	token, id, hash := newToken()
	_, err := s.db.ExecContext(ctx, s.q("INSERT INTO tokens (id, kind, cluster, name, hash, created_at) VALUES (?, ?, NULL, ?, ?, ?)"),
		id, string(ReaderToken), name, hash, s.now().UnixNano())
	if err != nil {
		return "", fmt.Errorf("add read token %q: %w", name, err)
	}
	return token, nil
}

// Tokens lists the registered tokens by kind, name and creation.
func (s *Store) Tokens(ctx context.Context) ([]Token, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT id, kind, COALESCE(cluster, ''), name, created_at FROM tokens ORDER BY kind, name, created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		var t Token
		var created int64
		if err := rows.Scan(&t.ID, &t.Kind, &t.Cluster, &t.Name, &created); err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		t.CreatedAt = time.Unix(0, created).UTC()
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken deletes the token with the id; it stops working at once on
// every replica. An unknown id is ErrNotFound.
func (s *Store) RevokeToken(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, s.q("DELETE FROM tokens WHERE id = ?"), id)
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("revoke token %s: %w", id, ErrNotFound)
	}
	return nil
}

// Authenticate returns the registered token that token is. It looks the
// token up by its public id and compares the secret's hash in constant
// time; every failure is ErrBadToken.
func (s *Store) Authenticate(ctx context.Context, token string) (Token, error) {
	id, secret, ok := splitToken(token)
	if !ok {
		return Token{}, ErrBadToken
	}
	var t Token
	var hash string
	var created int64
	err := s.db.QueryRowContext(ctx, s.q("SELECT id, kind, COALESCE(cluster, ''), name, hash, created_at FROM tokens WHERE id = ?"), id).
		Scan(&t.ID, &t.Kind, &t.Cluster, &t.Name, &hash, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, ErrBadToken
	}
	if err != nil {
		return Token{}, fmt.Errorf("look up token %s: %w", id, err)
	}
	if subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(hash)) != 1 {
		return Token{}, ErrBadToken
	}
	t.CreatedAt = time.Unix(0, created).UTC()
	return t, nil
}

// inTx runs fn in a transaction and commits it if fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
