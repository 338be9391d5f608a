package v1alpha1_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestCRDNamesAndScopes checks what discovery tells kubectl: the kinds,
// their scope, the short name rsr and the category kerf
// (`kubectl get kerf` lists them all).
func TestCRDNamesAndScopes(t *testing.T) {
	list, err := controlplane.Get(t).Clientset.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	require.NoError(t, err)
	byName := map[string]metav1.APIResource{}
	for _, r := range list.APIResources {
		byName[r.Name] = r
	}
	for _, tc := range []struct {
		resource   string
		kind       string
		namespaced bool
		shortNames []string
	}{
		{"rightsizingrecommendations", "RightsizingRecommendation", true, []string{"rsr"}},
		{"rightsizingpolicies", "RightsizingPolicy", true, nil},
		{"clusterrightsizingpolicies", "ClusterRightsizingPolicy", false, nil},
		{"rollbackpolicies", "RollbackPolicy", true, nil},
		{"clusterrollbackpolicies", "ClusterRollbackPolicy", false, nil},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			r, ok := byName[tc.resource]
			require.True(t, ok, "discovery lists %s", tc.resource)
			assert.Equal(t, tc.kind, r.Kind)
			assert.Equal(t, tc.namespaced, r.Namespaced)
			assert.Equal(t, tc.shortNames, r.ShortNames)
			assert.Equal(t, []string{"kerf"}, r.Categories)
			_, ok = byName[tc.resource+"/status"]
			assert.True(t, ok, "%s has a status subresource", tc.resource)
		})
	}
}

// getTable lists a resource as `kubectl get` does: as a server-side Table.
func getTable(t *testing.T, path string) metav1.Table {
	t.Helper()
	raw, err := controlplane.Get(t).Clientset.Discovery().RESTClient().Get().AbsPath(path).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		Do(context.Background()).Raw()
	require.NoError(t, err)
	var table metav1.Table
	require.NoError(t, json.Unmarshal(raw, &table))
	return table
}

func columnNames(table metav1.Table) []string {
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	return names
}

// TestPrinterColumns checks the columns of `kubectl get rsr` (Workload,
// Strategy, Phase, HealthWatch, Age) and that they show a recommendation's
// values, the HealthWatch condition's reason included.
func TestPrinterColumns(t *testing.T) {
	ctx := context.Background()
	c := controlplane.Get(t).Client
	created := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "printer-columns-"}}
	require.NoError(t, c.Create(ctx, created))
	ns := created.Name

	rsr := fullRecommendation("web")
	rsr.Namespace = ns
	status := rsr.Status
	require.NoError(t, c.Create(ctx, rsr))
	rsr.Status = status
	rsr.Status.Phase = v1alpha1.PhaseWatching
	rsr.Status.Conditions[1].Status = metav1.ConditionUnknown
	rsr.Status.Conditions[1].Reason = v1alpha1.HealthWatchWatching
	require.NoError(t, c.Status().Update(ctx, rsr))

	table := getTable(t, "/apis/kerf.dev/v1alpha1/namespaces/"+ns+"/rightsizingrecommendations")
	assert.Equal(t, []string{"Name", "Workload", "Strategy", "Phase", "HealthWatch", "Age"}, columnNames(table))
	require.Len(t, table.Rows, 1)
	assert.Equal(t, []any{"web", "web", "InPlace", "Watching", "Watching"}, table.Rows[0].Cells[:5])

	for _, path := range []string{
		"/apis/kerf.dev/v1alpha1/namespaces/" + ns + "/rightsizingpolicies",
		"/apis/kerf.dev/v1alpha1/clusterrightsizingpolicies",
	} {
		assert.Equal(t, []string{"Name", "Weight", "Paused", "Age"}, columnNames(getTable(t, path)), path)
	}
	for _, path := range []string{
		"/apis/kerf.dev/v1alpha1/namespaces/" + ns + "/rollbackpolicies",
		"/apis/kerf.dev/v1alpha1/clusterrollbackpolicies",
	} {
		assert.Equal(t, []string{"Name", "Weight", "Monitoring", "Target", "Attempts", "Age"}, columnNames(getTable(t, path)), path)
	}
}
