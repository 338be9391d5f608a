package stream

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	user authnv1.UserInfo
	// failure is why the token was refused, in the cache of failures.
	failure string
	expires time.Time
}

func (c *reviewCache) get(key [sha256.Size]byte, now time.Time) (authnv1.UserInfo, bool) {
	e, ok := c.entry(key, now)
	return e.user, ok
}

func (c *reviewCache) entry(key [sha256.Size]byte, now time.Time) (cachedReview, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		return cachedReview{}, false
	}
	return e, true
}

// forget drops a token's entry.
func (c *reviewCache) forget(key [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

func (c *reviewCache) put(key [sha256.Size]byte, user authnv1.UserInfo, expires, now time.Time) {
	c.add(key, cachedReview{user: user, expires: expires}, now)
}

func (c *reviewCache) putFailure(key [sha256.Size]byte, failure string, expires, now time.Time) {
	c.add(key, cachedReview{failure: failure, expires: expires}, now)
}

func (c *reviewCache) add(key [sha256.Size]byte, e cachedReview, now time.Time) {
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
	c.entries[key] = e
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

// refusal is a token the apiserver reviewed and did not authenticate
// for the leader: a definitive answer, unlike an apiserver that failed.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

// tokenKey is the caches' key of a token.
func tokenKey(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// tokenReview runs a TokenReview with the leader's audience
// (docs/design.md section 6). It returns a *refusal when the token does
// not authenticate for it, another error when the apiserver did not
// answer.
func (s *Server) tokenReview(ctx context.Context, token string) (authnv1.UserInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	tr, err := s.cfg.Clientset.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{s.cfg.Audience}},
	}, metav1.CreateOptions{})
	s.metrics.reviews.Inc()
	if err != nil {
		return authnv1.UserInfo{}, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated || tr.Status.Error != "" {
		return authnv1.UserInfo{}, &refusal{"token not authenticated"}
	}
	if !slices.Contains(tr.Status.Audiences, s.cfg.Audience) {
		return authnv1.UserInfo{}, &refusal{fmt.Sprintf("token is not for audience %q", s.cfg.Audience)}
	}
	return tr.Status.User, nil
}

// review returns the user of a token, from the caches or a TokenReview;
// fresh says a TokenReview was made.
//   - A token refused lately is refused again without a review
//     (FailedReviewTTL).
//   - A review that refuses the token charges b one failure: the agent
//     pod the token claims, or its source IP. A spent budget has its cache
//     misses refused without a review until it refills (failingSources).
//   - A review that passes charges nothing. So agents whose tokens are
//     good are never slowed, however many share an address.
func (s *Server) review(ctx context.Context, token string, b *budget) (user authnv1.UserInfo, fresh bool, err error) {
	key := tokenKey(token)
	now := s.cfg.Now()
	if user, ok := s.reviews.get(key, now); ok {
		return user, false, nil
	}
	if e, ok := s.failed.entry(key, now); ok {
		return authnv1.UserInfo{}, false, s.refuse(codes.Unauthenticated, "unauthenticated", "%s", e.failure)
	}
	src := b.key()
	if err := s.allowSource(src, now); err != nil {
		return authnv1.UserInfo{}, false, err
	}
	user, err = s.tokenReview(ctx, token)
	var refused *refusal
	if errors.As(err, &refused) {
		s.failed.putFailure(key, refused.msg, now.Add(s.cfg.FailedReviewTTL), now)
		s.failSource(src, now)
		return authnv1.UserInfo{}, true, s.refuse(codes.Unauthenticated, "unauthenticated", "%s", refused.msg)
	}
	if err != nil {
		s.log.Warn("token review failed", "err", err)
		return authnv1.UserInfo{}, true, s.refuse(codes.Unavailable, "token_review_failed", "%v", err)
	}
	s.reviews.put(key, user, now.Add(s.cfg.ReviewTTL), now)
	return user, true, nil
}

// budget is the failure budget a stream's authentication is charged to
// (Server.budgetOf), found on the first cache miss.
type budget struct {
	s     *Server
	ctx   context.Context
	token string
	found string
}

func (b *budget) key() string {
	if b.found == "" {
		b.found = b.s.budgetOf(b.ctx, b.token)
	}
	return b.found
}

// allowSource refuses an apiserver call charged to budget key while that
// budget is spent.
func (s *Server) allowSource(key string, now time.Time) error {
	if s.sources.penalized(key, now) {
		return s.refuse(codes.ResourceExhausted, "rate_limited", "too many failed authentications from %s; retry later", key)
	}
	return nil
}

// failSource charges budget key one failed authentication.
func (s *Server) failSource(key string, now time.Time) {
	s.sources.fail(key, now, s.cfg.ReviewsPerSecond, s.cfg.ReviewBurst)
	s.metrics.failingSources.Set(float64(s.sources.len()))
}

// authenticate checks the stream's token and returns the agent with the
// node of its pod. The token's user must be the agent's service account,
// and the token must be bound to a pod. The leader looks the pod's node up
// in its own cache, as the apiserver does not verify the node claim
// (docs/design.md section 6).
func (s *Server) authenticate(ctx context.Context) (agent, string, error) {
	token, ok := bearerToken(ctx)
	if !ok {
		return agent{}, "", s.refuse(codes.Unauthenticated, "unauthenticated", "missing authorization: Bearer <token> metadata")
	}
	if len(token) > MaxTokenBytes {
		// Never sent to the apiserver (it answers 413, which would read as
		// the apiserver failing and spend no budget): a failure charged to
		// the budget a refused review would be charged to.
		src, now := s.budgetOf(ctx, token), s.cfg.Now()
		if err := s.allowSource(src, now); err != nil {
			return agent{}, "", err
		}
		s.failSource(src, now)
		return agent{}, "", s.refuse(codes.Unauthenticated, "token_too_long", "the bearer token is %d bytes, more than %d", len(token), MaxTokenBytes)
	}
	a, err := s.agentOf(ctx, token)
	return a, token, err
}

// MaxTokenBytes bounds the bearer token a stream may present: a bound
// service-account token is 1-2 KiB.
const MaxTokenBytes = 8 << 10

// agentOf returns the agent a token belongs to (see authenticate). A
// token that a fresh review passed but that is not an agent's is a
// failure of its source too, and is remembered with the failed ones. Such
// a token is another service account's, or bound to no pod or to no agent
// pod.
func (s *Server) agentOf(ctx context.Context, token string) (agent, error) {
	b := &budget{s: s, ctx: ctx, token: token}
	user, fresh, err := s.review(ctx, token, b)
	if err != nil {
		return agent{}, err
	}
	a, asked, err := s.agentPod(ctx, user, b)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.PermissionDenied {
			now := s.cfg.Now()
			key := tokenKey(token)
			s.reviews.forget(key)
			s.failed.putFailure(key, st.Message(), now.Add(s.cfg.FailedReviewTTL), now)
			if fresh || asked {
				s.failSource(b.key(), now)
			}
		}
		return agent{}, err
	}
	return a, nil
}

// agentPod checks that user is the agents' service account, its token
// bound to one of its pods, and returns the agent with its pod's node.
// asked says the apiserver was asked for the pod, as the cache did not
// hold it.
func (s *Server) agentPod(ctx context.Context, user authnv1.UserInfo, b *budget) (agent, bool, error) {
	want := "system:serviceaccount:" + s.cfg.ServiceAccountNamespace + ":" + s.cfg.ServiceAccountName
	if user.Username != want {
		return agent{}, false, s.refuse(codes.PermissionDenied, "wrong_service_account", "user %q is not the agent's service account %q", user.Username, want)
	}
	names, uids := user.Extra[extraPodName], user.Extra[extraPodUID]
	if len(names) != 1 || len(uids) != 1 {
		return agent{}, false, s.refuse(codes.PermissionDenied, "token_not_pod_bound", "token is not bound to a pod")
	}
	a := agent{pod: names[0], podUID: types.UID(uids[0])}
	pod, ok := s.cfg.Pods.PodByUID(a.podUID)
	asked := false
	if !ok {
		// The cache may lag a new agent pod; ask the apiserver once.
		if err := s.allowSource(b.key(), s.cfg.Now()); err != nil {
			return agent{}, false, err
		}
		asked = true
		getCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		defer cancel()
		p, err := s.cfg.Clientset.CoreV1().Pods(s.cfg.ServiceAccountNamespace).Get(getCtx, a.pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return agent{}, asked, s.refuse(codes.PermissionDenied, "agent_pod_unknown", "agent pod %s/%s: %v", s.cfg.ServiceAccountNamespace, a.pod, err)
		}
		if err != nil {
			// Not the caller's failure: neither remembered nor charged.
			s.log.Warn("agent pod lookup failed", "agentPod", a.pod, "err", err)
			return agent{}, asked, s.refuse(codes.Unavailable, "agent_pod_lookup_failed", "agent pod %s/%s: %v", s.cfg.ServiceAccountNamespace, a.pod, err)
		}
		pod = p
	}
	if pod.UID != a.podUID || pod.Name != a.pod || pod.Namespace != s.cfg.ServiceAccountNamespace {
		return agent{}, asked, s.refuse(codes.PermissionDenied, "agent_pod_unknown", "agent pod %s/%s (uid %s) not found", s.cfg.ServiceAccountNamespace, a.pod, a.podUID)
	}
	if pod.Spec.NodeName == "" {
		return agent{}, asked, s.refuse(codes.PermissionDenied, "agent_pod_unscheduled", "agent pod %s/%s has no node", pod.Namespace, pod.Name)
	}
	a.node = pod.Spec.NodeName
	return a, asked, nil
}

// refuse counts a closed or refused stream and returns its status error.
func (s *Server) refuse(code codes.Code, reason, format string, args ...any) error {
	s.metrics.errors.WithLabelValues(reason).Inc()
	return status.Error(code, fmt.Sprintf(format, args...))
}
