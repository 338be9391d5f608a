package dashboard

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	webui "github.com/kerf-dev/kerf/web"
)

// maxListed bounds the recommendations one page reads, 500 a request, as
// kubectl kerf's other commands do.
const maxListed = 10000

// errTooMany is a list beyond maxListed.
var errTooMany = errors.New("too many RightsizingRecommendations")

// scopedReader lists the RightsizingRecommendations of Activity's
// namespace filter for cluster/audit's Handler, which lists every
// namespace: the user may be allowed one and not all. A refusal wraps
// web.ErrForbidden.
type scopedReader struct {
	client.Reader
	// Namespace is the page's namespace filter; empty lists every
	// namespace.
	Namespace string
}

// List implements client.Reader for RightsizingRecommendationList; other
// lists pass through.
func (r scopedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	out, ok := list.(*v1alpha1.RightsizingRecommendationList)
	if !ok {
		return r.Reader.List(ctx, list, opts...)
	}
	err := r.listIn(ctx, out, r.Namespace)
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%w: %w", webui.ErrForbidden, err)
	}
	return err
}

// listIn lists the recommendations of ns ("" for every namespace), page
// by page, at most maxListed.
func (r scopedReader) listIn(ctx context.Context, out *v1alpha1.RightsizingRecommendationList, ns string) error {
	out.Items = nil
	cont := ""
	for {
		var page v1alpha1.RightsizingRecommendationList
		opts := []client.ListOption{client.Limit(500), client.Continue(cont)}
		if ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := r.Reader.List(ctx, &page, opts...); err != nil {
			return err
		}
		out.Items = append(out.Items, page.Items...)
		if len(out.Items) > maxListed {
			return fmt.Errorf("%w: more than %d; filter a namespace (namespace=)", errTooMany, maxListed)
		}
		if cont = page.Continue; cont == "" {
			return nil
		}
	}
}
