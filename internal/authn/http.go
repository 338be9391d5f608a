package authn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

// ErrorWriter writes a refusal: status is 401, 403 or 503, msg says why in
// a sentence. Nil means http.Error's plain text.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, status int, msg string)

type userKeyType struct{}

// WithUser returns ctx carrying u, for the handlers behind Authenticated.
func WithUser(ctx context.Context, u *User) context.Context {
	return context.WithValue(ctx, userKeyType{}, u)
}

// UserFrom returns the user Authenticated put in ctx.
func UserFrom(ctx context.Context) (*User, bool) {
	u, ok := ctx.Value(userKeyType{}).(*User)
	return u, ok && u != nil
}

// BearerToken returns the token of the request's `Authorization: Bearer`
// header, "" when it has none.
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// Authenticated serves h only to requests with a valid bearer token, the
// user in their context (UserFrom). A request without one, or with a bad
// one, gets 401 and a WWW-Authenticate header; a review the apiserver did
// not answer gets 503 with Retry-After.
func (a *Authenticator) Authenticated(h http.Handler, ew ErrorWriter) http.Handler {
	ew = orPlain(ew)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := a.Authenticate(r.Context(), BearerToken(r))
		if err != nil {
			refuse(w, r, ew, err)
			return
		}
		h.ServeHTTP(w, r.WithContext(WithUser(r.Context(), u)))
	})
}

// AuthorizedPath serves h only to authenticated callers allowed to use
// the request's path as a non-resource URL with the verb of its method
// (get for GET and HEAD): `get /metrics`, the rule of the
// kerf-metrics-reader ClusterRole. A caller not allowed gets 403.
func (a *Authenticator) AuthorizedPath(h http.Handler, ew ErrorWriter) http.Handler {
	ew = orPlain(ew)
	return a.Authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := UserFrom(r.Context())
		verb := verbOf(r.Method)
		ok, err := a.AllowedPath(r.Context(), u, verb, r.URL.Path)
		if err != nil {
			refuse(w, r, ew, err)
			return
		}
		if !ok {
			ew(w, r, http.StatusForbidden, fmt.Sprintf("%s may not %s %s", u.Name, verb, r.URL.Path))
			return
		}
		h.ServeHTTP(w, r)
	}), ew)
}

// refuse answers err from Authenticate or a review: 401 for a bad token,
// 503 when the apiserver could not be asked or too many new tokens are
// under review.
func refuse(w http.ResponseWriter, r *http.Request, ew ErrorWriter, err error) {
	if errors.Is(err, ErrUnauthenticated) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kerf"`)
		ew(w, r, http.StatusUnauthorized, "Unauthorized: send a Kubernetes bearer token (Authorization: Bearer …)")
		return
	}
	if errors.Is(err, ErrBusy) {
		// A flood of new tokens: the refusal is the answer, not news
		// for the log.
		w.Header().Set("Retry-After", "1")
		ew(w, r, http.StatusServiceUnavailable, "too many new tokens under review; try again shortly")
		return
	}
	slog.Default().Warn("cannot review a request with the apiserver", "path", r.URL.Path, "err", err)
	w.Header().Set("Retry-After", "5")
	ew(w, r, http.StatusServiceUnavailable, "the apiserver cannot review the request now; try again shortly")
}

func orPlain(ew ErrorWriter) ErrorWriter {
	if ew != nil {
		return ew
	}
	return func(w http.ResponseWriter, _ *http.Request, status int, msg string) { http.Error(w, msg, status) }
}

// verbOf is the authorization verb of an HTTP method, as the apiserver
// maps them for non-resource URLs.
func verbOf(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "post"
	case http.MethodPut:
		return "put"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(method)
}
