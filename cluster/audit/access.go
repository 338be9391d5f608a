package audit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/internal/authn"
	"github.com/kerf-dev/kerf/internal/httpjson"
)

// ReadVerb, ReadGroup and ReadResource are what a caller must be allowed
// to do in a namespace to see its actions. That is to list
// RightsizingRecommendations, which the kerf-audit-reader ClusterRole
// allows (manifests/rbac-readers.yaml).
const (
	ReadVerb     = "list"
	ReadGroup    = "kerf.dev"
	ReadResource = "rightsizingrecommendations"
)

// Authorizer answers SubjectAccessReviews about a user; *authn.Authenticator
// is the leader's.
type Authorizer interface {
	Allowed(ctx context.Context, u *authn.User, r authn.Resource) (bool, error)
}

// forbiddenError is a request for a namespace the caller may not read.
type forbiddenError struct {
	user, namespace string
}

func (e *forbiddenError) Error() string {
	return fmt.Sprintf("%s may not %s %s.%s in namespace %s", e.user, ReadVerb, ReadResource, ReadGroup, e.namespace)
}

// errNoUser is a request that reached an authorizing handler without the
// user authn.Authenticated puts in its context: a wiring mistake, refused.
var errNoUser = errors.New("no authenticated user in the request (the handler must be served behind authn's Authenticated)")

// scope is the namespaces one caller may read, asked once each per
// request (and cached across requests by the Authorizer).
type scope struct {
	all  bool // every namespace: no filter
	user *authn.User
	az   Authorizer
	seen map[string]bool
}

// scopeOf returns the caller's scope: all namespaces, or per namespace.
// It is all when the handler has no Authorizer, or when one cluster-wide
// review allows the caller to list recommendations in every namespace.
func (h *Handler) scopeOf(ctx context.Context) (*scope, error) {
	if h.Authorizer == nil {
		return &scope{all: true}, nil
	}
	u, ok := authn.UserFrom(ctx)
	if !ok {
		return nil, errNoUser
	}
	all, err := h.Authorizer.Allowed(ctx, u, authn.Resource{Verb: ReadVerb, Group: ReadGroup, Resource: ReadResource})
	if err != nil {
		return nil, &authorizeError{fmt.Errorf("authorize %s across namespaces: %w", u.Name, err)}
	}
	return &scope{all: all, user: u, az: h.Authorizer, seen: map[string]bool{}}, nil
}

// MaxNamespaceReviews bounds the per-namespace reviews of one request of
// a caller without cluster-wide access. Without it, an authenticated
// caller with no rights made the leader run one SubjectAccessReview per
// namespace with recommendations, per request (issue 30, item 6). Past
// the bound the request is refused, asking for a namespace.
const MaxNamespaceReviews = 32

// tooManyNamespacesError is a request across more namespaces than a
// caller without cluster-wide access may have reviewed at once.
type tooManyNamespacesError struct{ user string }

func (e *tooManyNamespacesError) Error() string {
	return fmt.Sprintf("%s may not %s %s.%s in every namespace, and the actions span more than %d namespaces: name one (namespace=)",
		e.user, ReadVerb, ReadResource, ReadGroup, MaxNamespaceReviews)
}

// may reports whether the caller may read namespace ns.
func (s *scope) may(ctx context.Context, ns string) (bool, error) {
	if s.all {
		return true, nil
	}
	if ok, seen := s.seen[ns]; seen {
		return ok, nil
	}
	if len(s.seen) >= MaxNamespaceReviews {
		return false, &tooManyNamespacesError{user: s.user.Name}
	}
	ok, err := s.az.Allowed(ctx, s.user, authn.Resource{Verb: ReadVerb, Group: ReadGroup, Resource: ReadResource, Namespace: ns})
	if err != nil {
		return false, &authorizeError{fmt.Errorf("authorize %s in namespace %s: %w", s.user.Name, ns, err)}
	}
	s.seen[ns] = ok
	return ok, nil
}

// require returns a forbiddenError unless the caller may read ns.
func (s *scope) require(ctx context.Context, ns string) error {
	ok, err := s.may(ctx, ns)
	if err != nil {
		return err
	}
	if !ok {
		return &forbiddenError{user: s.user.Name, namespace: ns}
	}
	return nil
}

// AuthorizeNamespace serves next only to callers who may read the
// namespace namespace(r) names ("" names none: next then filters, as
// Audit does): 403 otherwise. The leader puts its web pages behind it,
// whose errors are pages, not the API's JSON.
func (h *Handler) AuthorizeNamespace(next http.Handler, namespace func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ns := namespace(r); ns != "" {
			s, err := h.scopeOf(r.Context())
			if err == nil {
				err = s.require(r.Context(), ns)
			}
			if err != nil {
				status, msg := accessStatus(err)
				http.Error(w, msg, status)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// accessStatus is the HTTP status of an authorization failure.
func accessStatus(err error) (int, string) {
	if _, ok := errors.AsType[*forbiddenError](err); ok {
		return http.StatusForbidden, "Forbidden: " + err.Error()
	}
	if _, ok := errors.AsType[*tooManyNamespacesError](err); ok {
		return http.StatusForbidden, "Forbidden: " + err.Error()
	}
	if errors.Is(err, errNoUser) {
		return http.StatusUnauthorized, err.Error()
	}
	return http.StatusServiceUnavailable, err.Error()
}

// writeAccessError writes an authorization failure as the API's JSON.
func writeAccessError(w http.ResponseWriter, err error) bool {
	_, forbidden := errors.AsType[*forbiddenError](err)
	_, tooMany := errors.AsType[*tooManyNamespacesError](err)
	if !forbidden && !tooMany && !errors.Is(err, errNoUser) && !isAuthorizeError(err) {
		return false
	}
	status, _ := accessStatus(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	writeError(w, status, err)
	return true
}

// authorizeError marks a failed SubjectAccessReview (the apiserver did
// not answer).
type authorizeError struct{ err error }

func (e *authorizeError) Error() string { return e.err.Error() }
func (e *authorizeError) Unwrap() error { return e.err }

func isAuthorizeError(err error) bool {
	_, ok := errors.AsType[*authorizeError](err)
	return ok
}

// WriteRefusal writes authn's refusals of an API request as the API's JSON
// errors. It is the authn.ErrorWriter the leader serves the API with. The
// refusals are 401 without a valid token, 503 when the apiserver cannot
// review it.
func WriteRefusal(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	httpjson.Write(w, status, auditv1.Error{Error: msg})
}
