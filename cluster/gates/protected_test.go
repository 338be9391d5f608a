package gates_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestProtectedNamespaceBlocksEveryChangeThere: a workload of a protected
// namespace is never changed, whatever the change; others pass, and no
// namespace is protected by an empty list.
func TestProtectedNamespaceBlocksEveryChangeThere(t *testing.T) {
	ctx := context.Background()
	g := gates.ProtectedNamespace{Namespaces: []string{"kube-system", "shop"}}
	ch := changeOf(t, kubetest.Deployment("shop", "web", "500m", "256Mi"), v1alpha1.StrategyInPlace, values{reqCPU: "100m"})
	b, err := g.Check(ctx, ch)
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Equal(t, v1alpha1.ReasonProtectedNamespace, b.Reason)
	assert.Contains(t, b.Message, "namespace shop is protected")
	assert.Contains(t, b.Message, "Deployment shop/web")

	b, err = g.Check(ctx, changeOf(t, kubetest.Deployment("team", "web", "500m", "256Mi"), v1alpha1.StrategyInPlace, values{reqCPU: "100m"}))
	require.NoError(t, err)
	assert.Nil(t, b, "another namespace")
	b, err = gates.ProtectedNamespace{}.Check(ctx, ch)
	require.NoError(t, err)
	assert.Nil(t, b, "none protected")
}
