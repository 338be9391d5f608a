package healthwatch

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/watchtest"
)

// TestStuckPodsQuoteABoundedMessage: pods Pending Unschedulable whose
// scheduler message is 10 kB each are quoted with at most maxPodMessage
// bytes of it, cut on a rune boundary and saying how much was left out,
// so the verdict's message (the HealthWatch condition's and the rollback
// state's, limited to 4096 bytes) stays small. It failed before: the
// figure and the message quoted three pods' 10 kB each.
func TestStuckPodsQuoteABoundedMessage(t *testing.T) {
	msg := strings.Repeat("0/5000 nodes are available: Insufficient memory — ", 200)
	var pods []corev1.Pod
	for i := range 40 {
		pods = append(pods, watchtest.NewPod(fmt.Sprintf("web-new-%02d", i), watchtest.BothDown, func(p *corev1.Pod) {
			p.CreationTimestamp = metav1.NewTime(watchtest.T0.Add(time.Second))
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
				Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg,
				LastTransitionTime: metav1.NewTime(watchtest.T0)}}}
		}))
	}
	v := Evaluate(watchtest.After(2*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyRollout, watchtest.BothDown), Pods: pods})
	require.Equal(t, v1alpha1.HealthWatchUnschedulable, v.Reason, v.Message)
	require.Len(t, v.Figures, 1)
	assert.Contains(t, v.Figures[0], "unschedulable pods 40, for unschedulableGrace 1m0s or longer (pod web-new-00 Unschedulable for ")
	assert.Contains(t, v.Figures[0], " and 37 more)")
	assert.Contains(t, v.Figures[0], " more bytes)")
	assert.Less(t, len(v.Figures[0]), 4*maxPodMessage)
	assert.Less(t, len(v.Message), 4096)
	assert.True(t, utf8.ValidString(v.Message))
	assert.Equal(t, cutMessage("short", 5), "short")
	cut := cutMessage(strings.Repeat("—", 200), 100)
	assert.LessOrEqual(t, len(cut), 100)
	assert.True(t, utf8.ValidString(cut))
}
