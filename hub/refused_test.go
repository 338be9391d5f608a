package hub_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// refusedAction is the recommender's refused action of an OOM-killed
// container, as the leader forwards it.
func refusedAction(seq int64, min int) hubv1.Action {
	a := action("shop", "web", seq, v1alpha1.ActionRefused, "OOMKill", min, v1alpha1.ResourceMemory)
	at := metav1.NewTime(time.Date(2030, 3, 1, 11, 0, 0, 0, time.UTC))
	a.Refusals = []v1alpha1.Refusal{{Container: "app", Resource: v1alpha1.ResourceMemory, Field: "request", Reason: "OOMKill",
		Asked: 262144000, Held: 373293056, Observed: "268435456", Threshold: "373293056", At: &at}}
	return a
}

func TestARefusedActionIsStoredCountedAndListedByType(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		res := e.write(t, "east",
			action("shop", "web", 1, v1alpha1.ActionApplied, "InPlace", 0, v1alpha1.ResourceMemory),
			refusedAction(2, 1))
		require.Equal(t, 2, res.Stored)
		// Delivered again (at least once): stored once, not a key conflict.
		res = e.write(t, "east", refusedAction(2, 1))
		assert.Equal(t, 1, res.Duplicates)

		var page hubv1.AuditPage
		e.get(t, "/v1/audit?type=refused", &page)
		require.Len(t, page.Items, 1)
		got := page.Items[0]
		assert.Equal(t, v1alpha1.ActionRefused, got.Type)
		assert.Equal(t, "OOMKill", got.Reason)
		assert.JSONEq(t, string(mustJSON(t, refusedAction(2, 1).Refusals)), string(mustJSON(t, got.Refusals)), "the figures, as the leader sent them")

		// The other actions' JSON has no refusals key: the same as before
		// refused actions existed.
		status, body := e.do(t, "GET", "/v1/audit?type=applied", "reader", nil)
		require.Equal(t, http.StatusOK, status, string(body))
		var raw struct {
			Items []map[string]json.RawMessage `json:"items"`
		}
		require.NoError(t, json.Unmarshal(body, &raw))
		require.Len(t, raw.Items, 1)
		assert.NotContains(t, raw.Items[0], "refusals")

		assert.Contains(t, metrics(t, e), `kerf_actions_total{cluster="east",reason="OOMKill",resource="memory",type="refused"} 1`)
	})
}

func TestABadRefusalGetsA400NamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(*v1alpha1.Refusal)
		field string
		msg   string
	}{
		{"a bad container", func(f *v1alpha1.Refusal) { f.Container = "App_1" }, "actions[0].refusals[0].container", "container name"},
		{"a bad resource", func(f *v1alpha1.Refusal) { f.Resource = "gpu" }, "actions[0].refusals[0].resource", "cpu, memory"},
		{"a bad field", func(f *v1alpha1.Refusal) { f.Field = "both" }, "actions[0].refusals[0].field", "request, limit"},
		{"no reason", func(f *v1alpha1.Refusal) { f.Reason = "" }, "actions[0].refusals[0].reason", "1 to 64 bytes"},
		{"a negative held", func(f *v1alpha1.Refusal) { f.Held = -1 }, "actions[0].refusals[0].held", "must not be negative"},
		{"a long observed", func(f *v1alpha1.Refusal) { f.Observed = "123456789012345678901234567890123" }, "actions[0].refusals[0].observed", "at most 32 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				a := refusedAction(1, 0)
				tc.set(&a.Refusals[0])
				status, body := e.do(t, "POST", "/v1/clusters/east/actions", "east", mustJSON(t, batch("east", a)))
				require.Equal(t, http.StatusBadRequest, status, string(body))
				var er auditv1.Error
				require.NoError(t, json.Unmarshal(body, &er), string(body))
				assert.Equal(t, tc.field, er.Field)
				assert.Contains(t, er.Error, tc.msg)
				var page hubv1.AuditPage
				e.get(t, "/v1/audit", &page)
				assert.Empty(t, page.Items, "nothing of the batch is stored")
			})
		})
	}
	t.Run("too many", func(t *testing.T) {
		each(t, func(t *testing.T, e *env) {
			a := refusedAction(1, 0)
			for len(a.Refusals) <= 16 {
				a.Refusals = append(a.Refusals, a.Refusals[0])
			}
			status, body := e.do(t, "POST", "/v1/clusters/east/actions", "east", mustJSON(t, batch("east", a)))
			require.Equal(t, http.StatusBadRequest, status, string(body))
			assert.Contains(t, string(body), "actions[0].refusals")
		})
	})
}

// An action on pod-level resources names the entry (pod), as the
// recommendation does; another name that is no container's is refused.
func TestAPodLevelActionIsStored(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		a := action("shop", "web", 1, v1alpha1.ActionApplied, "InPlace", 0, v1alpha1.ResourceMemory)
		a.Containers = []v1alpha1.ContainerValueChange{{Name: v1alpha1.PodLevel}}
		e.write(t, "east", a)
		var page hubv1.AuditPage
		e.get(t, "/v1/audit", &page)
		require.Len(t, page.Items, 1)
		assert.Equal(t, v1alpha1.PodLevel, page.Items[0].Containers[0].Name)

		a.Key, a.Seq, a.Containers[0].Name = "shop/web/2", 2, "(pods)"
		status, body := e.do(t, "POST", "/v1/clusters/east/actions", "east", mustJSON(t, batch("east", a)))
		require.Equal(t, http.StatusBadRequest, status, string(body))
		assert.Contains(t, string(body), "actions[0].containers[0].name")
	})
}
