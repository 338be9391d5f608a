package audit

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/authn"
)

// listed is a client.Reader whose List gives items, as the leader's cache
// does with UnsafeDisableDeepCopy (the objects themselves, no copies).
type listed struct {
	client.Reader
	items []v1alpha1.RightsizingRecommendation
}

func (l listed) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*v1alpha1.RightsizingRecommendationList).Items = l.items
	return nil
}

// TestAPageCostsItsSizeNotTheHistorys: a page of the audit API held a ref
// to every matching action of every recommendation and sorted them all,
// so one request over 2,000 recommendations of 100 actions each (200,000
// entries) allocated some 20 MiB, and 64 at once a GiB (issue 30, item
// 10). The page's refs are now the first limit+1 in a heap: one request
// allocates under 1 MiB, and the pages are the same as a full sort's.
func TestAPageCostsItsSizeNotTheHistorys(t *testing.T) {
	base := time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)
	items := make([]v1alpha1.RightsizingRecommendation, 2000)
	for i := range items {
		r := &items[i]
		r.Namespace, r.Name = fmt.Sprintf("ns%02d", i%20), fmt.Sprintf("web-%04d", i)
		r.Spec.TargetRef = v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: r.Name}
		r.Status.History = make([]v1alpha1.Action, 100)
		for j := range r.Status.History {
			// Many share a second: the order's later keys decide.
			r.Status.History[j] = v1alpha1.Action{Seq: int64(j + 1), Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonCooldown,
				Time: metav1.NewTime(base.Add(time.Duration((i*7+j*13)%5000) * time.Second))}
		}
	}
	h := &Handler{Reader: listed{items: items}, Now: func() time.Time { return base.Add(48 * time.Hour) }}
	ctx := context.Background()

	page, err := h.Audit(ctx, url.Values{"limit": {"50"}})
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = h.Audit(ctx, url.Values{"limit": {"50"}})
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a page of 50 over 200,000 actions: %d KiB allocated", allocated>>10)
	assert.Less(t, allocated, uint64(1<<20), "a page costs its size, not the history's")

	// The pages walk the whole history in the API's order, as a sort of
	// every action would (over a tenth of it, to keep the test short).
	items = items[:200]
	h.Reader = listed{items: items}
	var all []ref
	for i := range items {
		all = appendRefs(all, &items[i], nil)
	}
	sortRefs(all)
	var walked int
	for cont := ""; ; {
		q := url.Values{"limit": {"500"}}
		if cont != "" {
			q.Set("continue", cont)
		}
		page, err = h.Audit(ctx, q)
		require.NoError(t, err)
		for _, e := range page.Items {
			want := all[walked].entry()
			require.Equal(t, want.Namespace+"/"+want.Recommendation+"@"+want.Time.String(), e.Namespace+"/"+e.Recommendation+"@"+e.Time.String(), "entry %d", walked)
			walked++
		}
		if page.Continue == "" {
			break
		}
		cont = page.Continue
	}
	assert.Equal(t, len(all), walked)
}

// countingAuthorizer allows namespaces in allowed and counts the reviews.
type countingAuthorizer struct {
	allowed map[string]bool
	reviews int
}

func (a *countingAuthorizer) Allowed(_ context.Context, _ *authn.User, r authn.Resource) (bool, error) {
	a.reviews++
	return a.allowed[r.Namespace], nil
}

// TestACallerWithoutRightsCostsBoundedReviews: an authenticated caller
// with no rights made the leader run one SubjectAccessReview per namespace
// holding recommendations, on every request (issue 30, item 6). Now a
// request reviews at most MaxNamespaceReviews namespaces past the
// cluster-wide review, then is refused, asking for a namespace; naming
// one costs one review.
func TestACallerWithoutRightsCostsBoundedReviews(t *testing.T) {
	base := time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)
	items := make([]v1alpha1.RightsizingRecommendation, 200)
	for i := range items {
		r := &items[i]
		r.Namespace, r.Name = fmt.Sprintf("ns%03d", i), "web"
		r.Status.History = []v1alpha1.Action{{Seq: 1, Type: v1alpha1.ActionApplied, Time: metav1.NewTime(base)}}
	}
	az := &countingAuthorizer{allowed: map[string]bool{"ns007": true}}
	h := &Handler{Reader: listed{items: items}, Now: func() time.Time { return base.Add(time.Hour) }, Authorizer: az}
	ctx := authn.WithUser(context.Background(), &authn.User{Name: "mallory"})

	_, err := h.Audit(ctx, url.Values{})
	var tooMany *tooManyNamespacesError
	require.ErrorAs(t, err, &tooMany)
	assert.Contains(t, err.Error(), "name one (namespace=)")
	assert.Equal(t, 1+MaxNamespaceReviews, az.reviews, "the cluster-wide review and %d namespaces, not 200", MaxNamespaceReviews)

	az.reviews = 0
	page, err := h.Audit(ctx, url.Values{"namespace": {"ns007"}})
	require.NoError(t, err)
	assert.Len(t, page.Items, 1)
	assert.Equal(t, 2, az.reviews, "the cluster-wide review and the namespace named")
}
