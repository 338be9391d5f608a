package stream

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Extra keys of a bound service-account token's user info (Kubernetes
// ServiceAccount token authenticator).
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// maxReviewCache bounds the cache of positive token reviews.
const maxReviewCache = 10000

// agent is who an authenticated stream belongs to.
type agent struct {
	node   string
	pod    string
	podUID types.UID
}

// reviewCache keeps positive TokenReviews for a while, keyed by the
// token's hash, so reconnect storms after a failover cost one review per
// agent at most.
type reviewCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedReview
}

type cachedReview struct {
	user    authnv1.UserInfo
	expires time.Time
}

func (c *reviewCache) get(key [sha256.Size]byte, now time.Time) (authnv1.UserInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		return authnv1.UserInfo{}, false
	}
	return e.user, true
}

func (c *reviewCache) put(key [sha256.Size]byte, user authnv1.UserInfo, expires, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[sha256.Size]byte]cachedReview{}
	}
	if len(c.entries) >= maxReviewCache {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxReviewCache {
			clear(c.entries)
		}
	}
	c.entries[key] = cachedReview{user: user, expires: expires}
}

// bearerToken returns the token of the stream's authorization metadata.
func bearerToken(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// review returns the user of a token, from the cache or a TokenReview with
// the leader's audience (docs/design.md section 6).
func (s *Server) review(ctx context.Context, token string) (authnv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	now := s.cfg.Now()
	if user, ok := s.reviews.get(key, now); ok {
		return user, nil
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	tr, err := s.cfg.Clientset.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{s.cfg.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		s.log.Warn("token review failed", "err", err)
		return authnv1.UserInfo{}, s.refuse(codes.Unavailable, "token_review_failed", "token review: %v", err)
	}
	if !tr.Status.Authenticated || tr.Status.Error != "" {
		return authnv1.UserInfo{}, s.refuse(codes.Unauthenticated, "unauthenticated", "token not authenticated")
	}
	if !slices.Contains(tr.Status.Audiences, s.cfg.Audience) {
		return authnv1.UserInfo{}, s.refuse(codes.Unauthenticated, "unauthenticated", "token is not for audience %q", s.cfg.Audience)
	}
	s.reviews.put(key, tr.Status.User, now.Add(s.cfg.ReviewTTL), now)
	return tr.Status.User, nil
}

// authenticate checks the stream's token and returns the agent with the
// node of its pod: the token's user must be the agent's service account
// and the token must be bound to a pod, whose node the leader looks up in
// its own cache (docs/design.md section 6: the node claim is not verified
// by the apiserver).
func (s *Server) authenticate(ctx context.Context) (agent, error) {
	token, ok := bearerToken(ctx)
	if !ok {
		return agent{}, s.refuse(codes.Unauthenticated, "unauthenticated", "missing authorization: Bearer <token> metadata")
	}
	user, err := s.review(ctx, token)
	if err != nil {
		return agent{}, err
	}
	want := "system:serviceaccount:" + s.cfg.ServiceAccountNamespace + ":" + s.cfg.ServiceAccountName
	if user.Username != want {
		return agent{}, s.refuse(codes.PermissionDenied, "wrong_service_account", "user %q is not the agent's service account %q", user.Username, want)
	}
	names, uids := user.Extra[extraPodName], user.Extra[extraPodUID]
	if len(names) != 1 || len(uids) != 1 {
		return agent{}, s.refuse(codes.PermissionDenied, "token_not_pod_bound", "token is not bound to a pod")
	}
	a := agent{pod: names[0], podUID: types.UID(uids[0])}
	pod, ok := s.cfg.Pods.PodByUID(a.podUID)
	if !ok {
		// The cache may lag a new agent pod; ask the apiserver once.
		getCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		defer cancel()
		p, err := s.cfg.Clientset.CoreV1().Pods(s.cfg.ServiceAccountNamespace).Get(getCtx, a.pod, metav1.GetOptions{})
		if err != nil {
			return agent{}, s.refuse(codes.PermissionDenied, "agent_pod_unknown", "agent pod %s/%s: %v", s.cfg.ServiceAccountNamespace, a.pod, err)
		}
		pod = p
	}
	if pod.UID != a.podUID || pod.Name != a.pod || pod.Namespace != s.cfg.ServiceAccountNamespace {
		return agent{}, s.refuse(codes.PermissionDenied, "agent_pod_unknown", "agent pod %s/%s (uid %s) not found", s.cfg.ServiceAccountNamespace, a.pod, a.podUID)
	}
	if pod.Spec.NodeName == "" {
		return agent{}, s.refuse(codes.PermissionDenied, "agent_pod_unscheduled", "agent pod %s/%s has no node", pod.Namespace, pod.Name)
	}
	a.node = pod.Spec.NodeName
	return a, nil
}

// refuse counts a closed or refused stream and returns its status error.
func (s *Server) refuse(code codes.Code, reason, format string, args ...any) error {
	s.metrics.errors.WithLabelValues(reason).Inc()
	return status.Error(code, fmt.Sprintf(format, args...))
}
