package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/internal/httpjson"
)

// authenticate reads the bearer token and looks it up. It writes the 401
// (or 500) itself and returns ok false when the caller is not known.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (store.Token, bool) {
	h := r.Header.Get("Authorization")
	token, found := strings.CutPrefix(h, "Bearer ")
	if !found || token == "" {
		unauthorized(w, "missing bearer token: send Authorization: Bearer <token> (kerf-hub clusters add, kerf-hub tokens add-reader)")
		return store.Token{}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	t, err := s.Store.Authenticate(ctx, strings.TrimSpace(token))
	if errors.Is(err, store.ErrBadToken) {
		unauthorized(w, "invalid bearer token")
		return store.Token{}, false
	}
	if err != nil {
		s.failed(w, r, err)
		return store.Token{}, false
	}
	return t, true
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="kerf-hub"`)
	httpjson.Write(w, http.StatusUnauthorized, auditv1.Error{Error: msg})
}

// writer lets through a cluster token writing its own cluster's routes.
func (s *Server) writer(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		cluster := r.PathValue("cluster")
		switch {
		case t.Kind != store.ClusterToken:
			httpjson.Write(w, http.StatusForbidden, auditv1.Error{Error: "a read token cannot write; use the cluster's token"})
		case t.Cluster != cluster:
			httpjson.Write(w, http.StatusForbidden, auditv1.Error{Error: fmt.Sprintf("the token is cluster %q's: it writes only /v1/clusters/%s/actions and /v1/clusters/%s/savings", t.Cluster, t.Cluster, t.Cluster), Parameter: "cluster"})
		default:
			next(w, r)
		}
	})
}

// reader lets through a read token.
func (s *Server) reader(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		if t.Kind != store.ReaderToken {
			httpjson.Write(w, http.StatusForbidden, auditv1.Error{Error: "a cluster token only writes; reading needs a read token (kerf-hub tokens add-reader)"})
			return
		}
		next(w, r)
	})
}
