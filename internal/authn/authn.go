// Package authn lets a Kerf HTTP endpoint know who asks and whether they
// may: the caller's Kubernetes bearer token is checked with a TokenReview
// and what it asks for with a SubjectAccessReview, the way kube-rbac-proxy
// and controller-runtime's metrics filters
// (sigs.k8s.io/controller-runtime/pkg/metrics/filters) do. Answers are kept
// in bounded caches for a short time, failed ones shorter, so that a flood
// of requests costs the apiserver little.
//
// It talks to the apiserver with a REST client of the two review APIs
// alone: controller-runtime's filter brings k8s.io/apiserver, cel-go and
// client-go's typed clients (about 550 packages) into the agent, whose
// budget (docs/agent.md) keeps client-go's clientset out, and its token
// cache has no size bound.
package authn

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// Defaults of Config.
const (
	// DefaultAllowTTL is how long a valid token, or an allowed access, is
	// believed without asking again: a revoked token or a removed binding
	// is honoured at most this late. controller-runtime's filter keeps
	// tokens for 1 minute too.
	DefaultAllowTTL = time.Minute
	// DefaultDenyTTL is how long a bad token, or a denied access, is
	// remembered: a flood of the same bad token makes one TokenReview per
	// DefaultDenyTTL, and a binding just granted works this late.
	DefaultDenyTTL = 10 * time.Second
	// DefaultMaxEntries bounds each of the four caches (valid tokens, bad
	// tokens, allowed and denied accesses).
	DefaultMaxEntries = 4096
	// DefaultReviewTimeout bounds one review's request to the apiserver.
	DefaultReviewTimeout = 10 * time.Second
	// DefaultKnownTTL is how long a token stays known after a review found
	// it valid and its user was allowed an access: its next reviews take
	// the known tokens' lane, which a flood of new tokens cannot fill. A
	// projected service-account token is replaced after at most 48
	// minutes.
	DefaultKnownTTL = time.Hour
	// DefaultMaxNewReviews bounds the TokenReviews of tokens not known
	// that run at once; one more is refused at once (ErrBusy).
	DefaultMaxNewReviews = 8
	// MaxTokenBytes is the longest bearer token looked at; a longer one is
	// refused without a review (service-account tokens are about 1 KiB).
	MaxTokenBytes = 16 << 10
	// Audience is Kerf's own token audience. A token minted for it
	// (`kubectl create token --audience kerf`, a projected token with
	// `audience: kerf`) is good for Kerf's endpoints and nothing else: one
	// read off a Kerf server cannot be replayed against the apiserver.
	Audience = "kerf"
)

// ErrUnauthenticated is returned for a missing, malformed or invalid token.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrBusy is returned when DefaultMaxNewReviews (Config.MaxNewReviews)
// reviews of new tokens are under way: the caller is answered 503 and
// tries again.
var ErrBusy = errors.New("too many new tokens under review")

// Config configures an Authenticator.
type Config struct {
	// REST reaches the apiserver as the server's own identity, which must
	// be allowed to create tokenreviews and subjectaccessreviews
	// (manifests/rbac-*.yaml).
	REST *rest.Config
	// Audiences are the audiences a token must carry; empty means the
	// apiserver's own (a token made for the apiserver, such as
	// `kubectl create token`'s or a pod's default one). The agents'
	// stream tokens carry the leader's audience and so are refused here.
	Audiences []string
	// OwnAudience, when set, is accepted too: a token whose (unverified)
	// aud claim names it is reviewed for OwnAudience alone, any other for
	// Audiences. kerf-agent and kerf-leader set Audience.
	OwnAudience string
	// AllowTTL, DenyTTL, KnownTTL, MaxEntries, MaxNewReviews and
	// ReviewTimeout default to the constants above.
	AllowTTL, DenyTTL, KnownTTL time.Duration
	MaxEntries, MaxNewReviews   int
	ReviewTimeout               time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// User is the identity a TokenReview found.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Resource is a resource request's attributes (a SubjectAccessReview's
// resourceAttributes). Namespace "" asks about every namespace.
type Resource struct {
	Verb, Group, Resource, Namespace string
}

// Authenticator reviews tokens and accesses, and caches the answers.
//
// Reviews run in two lanes, each with its own client and rate limit: one
// for tokens found valid within KnownTTL and for access reviews of
// authenticated users, one for tokens never seen valid, of which at most
// MaxNewReviews run at once. A flood of new bad tokens fills only the
// second: a known caller whose cached answer expired is reviewed again
// without waiting behind it.
type Authenticator struct {
	client    rest.Interface // the known lane
	newClient rest.Interface // tokens not known
	newSlots  chan struct{}
	audiences []string
	own       string
	timeout   time.Duration
	now       func() time.Time

	validTokens *ttlCache[*User]
	// knownTokens holds each valid token's user; allowedUsers the
	// users allowed an access. Known wants both.
	knownTokens  *ttlCache[knownUser]
	allowedUsers *ttlCache[struct{}]
	badTokens    *ttlCache[struct{}]
	allowed      *ttlCache[struct{}]
	denied       *ttlCache[struct{}]
	tokenCalls   flight[*User]
	accessCalls  flight[bool]
}

var reviewScheme = runtime.NewScheme()

func init() {
	if err := authnv1.AddToScheme(reviewScheme); err != nil {
		panic(err)
	}
	if err := authzv1.AddToScheme(reviewScheme); err != nil {
		panic(err)
	}
}

// New returns an Authenticator that asks the apiserver cfg.REST reaches.
func New(cfg Config) (*Authenticator, error) {
	if cfg.REST == nil {
		return nil, errors.New("authn: no apiserver configuration (Config.REST)")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.AllowTTL, DefaultAllowTTL)
	def(&cfg.DenyTTL, DefaultDenyTTL)
	def(&cfg.ReviewTimeout, DefaultReviewTimeout)
	def(&cfg.KnownTTL, DefaultKnownTTL)
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxNewReviews <= 0 {
		cfg.MaxNewReviews = DefaultMaxNewReviews
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rc := rest.CopyConfig(cfg.REST)
	// Both review APIs are under /apis; the group is in each request's path.
	rc.APIPath = "/apis"
	rc.GroupVersion = &schema.GroupVersion{}
	rc.NegotiatedSerializer = serializer.NewCodecFactory(reviewScheme).WithoutConversion()
	rc.ContentType = runtime.ContentTypeJSON
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	// Each lane's client makes its own rate limiter from QPS and Burst.
	rc.RateLimiter = nil
	client, err := rest.UnversionedRESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("authn: apiserver client: %w", err)
	}
	newClient, err := rest.UnversionedRESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("authn: apiserver client: %w", err)
	}
	return &Authenticator{
		client: client, newClient: newClient, newSlots: make(chan struct{}, cfg.MaxNewReviews),
		audiences: slices.Clone(cfg.Audiences), own: cfg.OwnAudience, timeout: cfg.ReviewTimeout, now: cfg.Now,
		validTokens:  newTTLCache[*User](cfg.AllowTTL, cfg.MaxEntries),
		knownTokens:  newTTLCache[knownUser](cfg.KnownTTL, cfg.MaxEntries),
		allowedUsers: newTTLCache[struct{}](cfg.KnownTTL, cfg.MaxEntries),
		badTokens:    newTTLCache[struct{}](cfg.DenyTTL, cfg.MaxEntries),
		allowed:      newTTLCache[struct{}](cfg.AllowTTL, cfg.MaxEntries),
		denied:       newTTLCache[struct{}](cfg.DenyTTL, cfg.MaxEntries),
	}, nil
}

// Authenticate returns the user token belongs to, or ErrUnauthenticated
// (wrapped with the reason) when the apiserver does not know it. Other
// errors are failures to ask.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (*User, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	if len(token) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: the bearer token is over %d bytes", ErrUnauthenticated, MaxTokenBytes)
	}
	key := tokenKey(token)
	now := a.now()
	if u, ok := a.validTokens.get(key, now); ok {
		return u, nil
	}
	if _, ok := a.badTokens.get(key, now); ok {
		return nil, fmt.Errorf("%w: the token was refused (cached)", ErrUnauthenticated)
	}
	_, known := a.knownTokens.get(key, now)
	return a.tokenCalls.do(key, func() (*User, error) {
		client := a.client
		if !known {
			select {
			case a.newSlots <- struct{}{}:
				defer func() { <-a.newSlots }()
			default:
				return nil, ErrBusy
			}
			client = a.newClient
		}
		u, err := a.reviewToken(ctx, client, token)
		switch {
		case errors.Is(err, ErrUnauthenticated):
			a.badTokens.put(key, struct{}{}, a.now())
		case err == nil:
			a.validTokens.put(key, u, a.now())
			a.knownTokens.put(key, knownUser{key: userKey(u), name: u.Name}, a.now())
		}
		return u, err
	})
}

// knownUser is what a valid token is known as: its user's cache key and
// name.
type knownUser struct{ key, name string }

// Known returns the user name of token when it was found valid within
// KnownTTL and its user allowed an access (Allowed, AllowedPath) within
// KnownTTL, from the caches alone: a server gives such callers their own
// budget, which callers with new or bad tokens cannot fill, and shares it
// out by name. A valid token of a caller allowed nothing is not known: it
// would fill that budget with requests waiting on access reviews.
func (a *Authenticator) Known(token string) (string, bool) {
	if token == "" || len(token) > MaxTokenBytes {
		return "", false
	}
	now := a.now()
	user, ok := a.knownTokens.get(tokenKey(token), now)
	if !ok {
		return "", false
	}
	if _, ok = a.allowedUsers.get(user.key, now); !ok {
		return "", false
	}
	return user.name, true
}

// claimedAudiences returns the aud claim of token when it reads as a JWT,
// unverified: it only chooses which audience the TokenReview asks about,
// and the apiserver verifies the token for it.
func claimedAudiences(token string) []string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(payload, &claims) != nil || len(claims.Aud) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(claims.Aud, &many)
	return many
}

// tokenKey is the caches' key of token: its SHA-256, so that no cache
// holds a token.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func (a *Authenticator) reviewToken(ctx context.Context, client rest.Interface, token string) (*User, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	audiences := a.audiences
	if a.own != "" && slices.Contains(claimedAudiences(token), a.own) {
		audiences = []string{a.own}
	}
	review := &authnv1.TokenReview{
		TypeMeta: typeMeta(authnv1.SchemeGroupVersion.String(), "TokenReview"),
		Spec:     authnv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}
	var out authnv1.TokenReview
	if err := client.Post().AbsPath("/apis/authentication.k8s.io/v1/tokenreviews").Body(review).Do(ctx).Into(&out); err != nil {
		return nil, fmt.Errorf("create TokenReview: %w", err)
	}
	if !out.Status.Authenticated {
		reason := out.Status.Error
		if reason == "" {
			reason = "the apiserver does not know the token"
		}
		return nil, fmt.Errorf("%w: %s", ErrUnauthenticated, reason)
	}
	if len(audiences) > 0 && !slices.ContainsFunc(out.Status.Audiences, func(s string) bool { return slices.Contains(audiences, s) }) {
		return nil, fmt.Errorf("%w: the token is for %v, not %v", ErrUnauthenticated, out.Status.Audiences, audiences)
	}
	u := &User{Name: out.Status.User.Username, UID: out.Status.User.UID, Groups: out.Status.User.Groups}
	if len(out.Status.User.Extra) > 0 {
		u.Extra = make(map[string][]string, len(out.Status.User.Extra))
		for k, v := range out.Status.User.Extra {
			u.Extra[k] = v
		}
	}
	return u, nil
}

// AllowedPath reports whether u may verb the non-resource URL path (get
// /metrics), as kube-rbac-proxy asks it.
func (a *Authenticator) AllowedPath(ctx context.Context, u *User, verb, path string) (bool, error) {
	return a.allowedBy(ctx, u, "path\x00"+verb+"\x00"+path, func(spec *authzv1.SubjectAccessReviewSpec) {
		spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Verb: verb, Path: path}
	})
}

// Allowed reports whether u may do what r describes (list
// rightsizingrecommendations.kerf.dev in a namespace, or in all of them).
func (a *Authenticator) Allowed(ctx context.Context, u *User, r Resource) (bool, error) {
	return a.allowedBy(ctx, u, "resource\x00"+r.Verb+"\x00"+r.Group+"\x00"+r.Resource+"\x00"+r.Namespace, func(spec *authzv1.SubjectAccessReviewSpec) {
		spec.ResourceAttributes = &authzv1.ResourceAttributes{Verb: r.Verb, Group: r.Group, Resource: r.Resource, Namespace: r.Namespace}
	})
}

func (a *Authenticator) allowedBy(ctx context.Context, u *User, what string, set func(*authzv1.SubjectAccessReviewSpec)) (bool, error) {
	user := userKey(u)
	key := user + "\x01" + what
	now := a.now()
	if _, ok := a.allowed.get(key, now); ok {
		return true, nil
	}
	if _, ok := a.denied.get(key, now); ok {
		return false, nil
	}
	return a.accessCalls.do(key, func() (bool, error) {
		ok, err := a.reviewAccess(ctx, u, set)
		if err != nil {
			return false, err
		}
		if ok {
			a.allowed.put(key, struct{}{}, a.now())
			a.allowedUsers.put(user, struct{}{}, a.now())
		} else {
			a.denied.put(key, struct{}{}, a.now())
		}
		return ok, nil
	})
}

func (a *Authenticator) reviewAccess(ctx context.Context, u *User, set func(*authzv1.SubjectAccessReviewSpec)) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	review := &authzv1.SubjectAccessReview{
		TypeMeta: typeMeta(authzv1.SchemeGroupVersion.String(), "SubjectAccessReview"),
		Spec:     authzv1.SubjectAccessReviewSpec{User: u.Name, UID: u.UID, Groups: u.Groups},
	}
	if len(u.Extra) > 0 {
		review.Spec.Extra = make(map[string]authzv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			review.Spec.Extra[k] = v
		}
	}
	set(&review.Spec)
	var out authzv1.SubjectAccessReview
	if err := a.client.Post().AbsPath("/apis/authorization.k8s.io/v1/subjectaccessreviews").Body(review).Do(ctx).Into(&out); err != nil {
		return false, fmt.Errorf("create SubjectAccessReview: %w", err)
	}
	return out.Status.Allowed && !out.Status.Denied, nil
}

// userKey identifies u in the access caches: everything a
// SubjectAccessReview is asked about, hashed.
func userKey(u *User) string {
	h := sha256.New()
	write := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	write(u.Name)
	write(u.UID)
	for _, g := range u.Groups {
		write("g:" + g)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		write("x:" + k + "=" + strings.Join(u.Extra[k], "\x02"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}
