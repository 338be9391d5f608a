package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

// clock is the time the in-process plugin counts ages from: the newest
// fixture's, so that ages print exactly.
var clock = time.Now

// kerf runs the plugin in-process against the control plane and returns
// its exit code, stdout and stderr.
func kerf(t *testing.T, cp *controlplane.ControlPlane, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(context.Background(), append([]string{"--kubeconfig", cp.Kubeconfig}, args...),
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, clock)
	return code, out.String(), errOut.String()
}

// fixtureNow is the fixtures' fixed clock, so that the golden files hold
// their times and ages exactly.
var fixtureNow = time.Date(2026, 12, 1, 12, 42, 53, 0, time.UTC)

// fixture is a namespace with Deployment web (500m/256Mi, no memory
// limit), its
// recommendation web (250m/128Mi) rolled back for OOM kills with a
// cooldown and a backoff, and recommendation api (no Deployment) whose
// recommender held memory back.
type fixture struct {
	ns  string
	now time.Time
}

func newFixture(t *testing.T, cp *controlplane.ControlPlane) fixture {
	t.Helper()
	return newFixtureIn(t, cp, controlplane.UniqueName("kubectl"))
}

// newFixtureIn makes the fixture in namespace ns.
func newFixtureIn(t *testing.T, cp *controlplane.ControlPlane, ns string) fixture {
	t.Helper()
	ctx := context.Background()
	c := cp.Client
	f := fixture{ns: ns, now: fixtureNow}
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	labels := map[string]string{"app": "web"}
	require.NoError(t, c.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "kerf.local/workload:1",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: *q("500m"), corev1.ResourceMemory: *q("256Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: *q("1")},
					}}}},
			},
		},
	}))

	web := recommendationFor(f.ns, "web", "web", "250m", "128Mi")
	require.NoError(t, c.Create(ctx, web))
	at := func(ago time.Duration) metav1.Time { return metav1.Time{Time: f.now.Add(-ago)} }
	in := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: f.now.Add(d)} }
	change := v1alpha1.ContainerValueChange{Name: "app",
		Old: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("500m"), Memory: q("256Mi")}},
		New: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("250m"), Memory: q("128Mi")}}}
	back := v1alpha1.ContainerValueChange{Name: "app",
		Old: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("128Mi")}},
		New: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("256Mi")}}}
	web.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase: v1alpha1.PhaseRolledBack, Reason: v1alpha1.HealthWatchOOMKills, Message: "rolled back: 2 OOM kills",
		Policy: &v1alpha1.PolicyReference{Kind: v1alpha1.PolicyKindNamespaced, Name: "guard"},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionHealthWatch, Status: metav1.ConditionFalse,
			Reason: v1alpha1.HealthWatchOOMKills, Message: "container app was OOM-killed 2 times", LastTransitionTime: at(5 * time.Minute)}},
		Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills, At: at(5 * time.Minute),
			Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Figures: []string{"oomKills 2 ≥ 1"}, Restored: true},
		Cooldowns: []v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: *in(23 * time.Hour)}},
		Rollback: &v1alpha1.RollbackState{State: v1alpha1.BackoffBackingOff, Turn: 1, Expiry: in(10 * time.Minute),
			Fingerprint: "v1-abc", Reason: v1alpha1.HealthWatchOOMKills},
		History: []v1alpha1.Action{
			{Seq: 1, Time: at(10 * time.Minute), Type: v1alpha1.ActionApplied, Reason: "Rollout", Message: "applied",
				Resources: []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}, Containers: []v1alpha1.ContainerValueChange{change}},
			{Seq: 2, Time: at(5 * time.Minute), Type: v1alpha1.ActionRolledBack, Reason: v1alpha1.HealthWatchOOMKills,
				Message: "memory rolled back after 2 OOM kills", Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory},
				Containers: []v1alpha1.ContainerValueChange{back}, Figures: []string{"oomKills 2 ≥ 1"}},
		},
	}
	require.NoError(t, c.Status().Update(ctx, web))

	api := recommendationFor(f.ns, "api", "api", "100m", "64Mi")
	api.Annotations = map[string]string{v1alpha1.RecommendationBasisAnnotation: `{"madeAt":"` + f.now.Add(-time.Minute).Format(time.RFC3339) +
		`","policy":"RightsizingPolicy/guard","containers":[{"name":"app","samples":900,"history":"24h0m0s","confidence":1,` +
		`"refusals":[{"resource":"memory","field":"request","reason":"OOMKill","asked":50331648,"held":67108864,"observed":67108864,"threshold":0,` +
		`"message":"memory request held at 64Mi instead of 48Mi: OOMKill"}]}]}`}
	require.NoError(t, c.Create(ctx, api))
	api.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase: v1alpha1.PhaseHealthy,
		History: []v1alpha1.Action{{Seq: 1, Time: at(2 * time.Minute), Type: v1alpha1.ActionRefused, Reason: "OOMKill",
			Message: "the recommender held memory back",
			Refusals: []v1alpha1.Refusal{{Container: "app", Resource: v1alpha1.ResourceMemory, Field: "request", Reason: "OOMKill",
				Asked: 50331648, Held: 67108864, Observed: "67108864"}}}},
	}
	require.NoError(t, c.Status().Update(ctx, api))
	clock = func() time.Time { return f.now }
	return f
}

func recommendationFor(ns, name, target, cpu, mem string) *v1alpha1.RightsizingRecommendation {
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: target},
			Strategy:  v1alpha1.StrategyRollout,
			Containers: []v1alpha1.ContainerResources{{Name: "app",
				Requests: &v1alpha1.ResourceValues{CPU: q(cpu), Memory: q(mem)},
				Limits:   &v1alpha1.ResourceValues{CPU: q(cpu), Memory: q(mem)}}},
		},
	}
}

func TestStatusTablePrintsEachWorkloadWithItsValuesAndLastAction(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	code, out, errOut := kerf(t, cp, "status", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 3, out)
	assert.Regexp(t, `^WORKLOAD\s+PHASE\s+REASON\s+REQUESTS \(MANIFEST→RECOMMENDED\)\s+LAST ACTION\s+SINCE$`, lines[0])
	// Sorted by workload: api before web. Old→new: the manifest's values
	// (unknown without a Deployment) against the recommended.
	assert.Regexp(t, `^Deployment/api\s+Healthy\s+<none>\s+app: cpu unknown→100m memory unknown→64Mi\s+refused/OOMKill\s+2m$`, lines[1])
	assert.Regexp(t, `^Deployment/web\s+RolledBack\s+OOMKills\s+app: cpu 500m→250m memory 256Mi→128Mi\s+rolled_back/OOMKills\s+5m$`, lines[2])
	assert.NotContains(t, out, "NAMESPACE", "no namespace column with -n")

	code, out, errOut = kerf(t, cp, "status", "-n", f.ns, "-o", "wide")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^WORKLOAD\s+PHASE\s+REASON\s+REQUESTS \(MANIFEST→RECOMMENDED\)\s+LIMITS \(MANIFEST→RECOMMENDED\)\s+LAST ACTION\s+SINCE\s+RECOMMENDATION\s+STRATEGY\s+POLICY\s+HEALTHWATCH\n`, out)
	assert.Regexp(t, `Deployment/web\s+RolledBack\s+OOMKills\s+app: cpu 500m→250m memory 256Mi→128Mi\s+app: cpu 1→250m memory unset→128Mi\s+rolled_back/OOMKills\s+5m\s+web\s+Rollout\s+RightsizingPolicy/guard\s+OOMKills`, out)
}

func TestStatusAllNamespacesAddsTheNamespaceColumn(t *testing.T) {
	cp := controlplane.Get(t)
	a, b := newFixture(t, cp), newFixture(t, cp)

	code, out, errOut := kerf(t, cp, "status", "-n", a.ns)
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, out, b.ns)

	code, out, errOut = kerf(t, cp, "status", "-A")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(out, "NAMESPACE "), out)
	for _, ns := range []string{a.ns, b.ns} {
		assert.Regexp(t, `(?m)^`+ns+`\s+Deployment/web\s+RolledBack`, out)
		assert.Regexp(t, `(?m)^`+ns+`\s+Deployment/api\s+Healthy`, out)
	}

	code, _, errOut = kerf(t, cp, "status", "-n", "kubectl-none")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, `No RightsizingRecommendations found in namespace "kubectl-none".`)
}

func TestStatusYAMLAndJSONRoundTripIntoTheAPITypes(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	for _, output := range []string{"json", "yaml"} {
		code, out, errOut := kerf(t, cp, "status", "-n", f.ns, "-o", output)
		require.Equal(t, 0, code, errOut)
		var list v1alpha1.RightsizingRecommendationList
		if output == "json" {
			require.NoError(t, json.Unmarshal([]byte(out), &list), out)
		} else {
			require.NoError(t, yaml.UnmarshalStrict([]byte(out), &list), out)
		}
		assert.Equal(t, "RightsizingRecommendationList", list.Kind, output)
		require.Len(t, list.Items, 2, output)
		web := list.Items[1]
		assert.Equal(t, "web", web.Name, output)
		assert.Equal(t, v1alpha1.PhaseRolledBack, web.Status.Phase, output)
		require.Len(t, web.Status.History, 2, output)
		assert.Equal(t, []string{"oomKills 2 ≥ 1"}, web.Status.History[1].Figures, output)
		assert.Equal(t, "250m", web.Spec.Containers[0].Requests.CPU.String(), output)
	}

	code, _, errOut := kerf(t, cp, "status", "-n", f.ns, "-o", "xml")
	assert.Equal(t, 1, code)
	assert.Equal(t, "error: --output \"xml\": must be one of wide, yaml, json (or omitted for a table)\n", errOut)
}

func TestHistoryPrintsTheActionsNewestFirst(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	for _, arg := range []string{"web", "deployment/web", "Deployment/web", "deploy/web"} {
		code, out, errOut := kerf(t, cp, "history", arg, "-n", f.ns)
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		require.Len(t, lines, 3, out)
		assert.Regexp(t, `^TIME\s+AGE\s+TYPE\s+REASON\s+RESOURCES\s+OLD→NEW\s+FIGURES$`, lines[0])
		assert.Regexp(t, `^`+f.now.Add(-5*time.Minute).Format(time.RFC3339)+`\s+5m\s+rolled_back\s+OOMKills\s+memory\s+app: memory 128Mi→256Mi\s+oomKills 2 ≥ 1$`, lines[1])
		assert.Regexp(t, `^\S+\s+10m\s+applied\s+Rollout\s+cpu,memory\s+app: cpu 500m→250m memory 256Mi→128Mi\s+<none>$`, lines[2])
	}

	code, out, errOut := kerf(t, cp, "history", "web", "-n", f.ns, "-o", "wide")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `SEQ\s+MESSAGE\n`, out)
	assert.Regexp(t, `oomKills 2 ≥ 1\s+2\s+memory rolled back after 2 OOM kills\n`, out)

	require.NoError(t, cp.Client.Create(context.Background(), recommendationFor(f.ns, "fresh", "fresh", "1", "1Gi")))
	code, out, errOut = kerf(t, cp, "history", "deployment/fresh", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, out)
	assert.Equal(t, "No actions recorded for Deployment/fresh (RightsizingRecommendation "+f.ns+"/fresh).\n", errOut)

	code, out, errOut = kerf(t, cp, "history", "api", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "app: memory request held 64Mi (asked 48Mi, OOMKill)")

	for _, output := range []string{"json", "yaml"} {
		code, out, errOut := kerf(t, cp, "history", "web", "-n", f.ns, "-o", output)
		require.Equal(t, 0, code, errOut)
		var actions []v1alpha1.Action
		require.NoError(t, yaml.UnmarshalStrict([]byte(out), &actions), out) // JSON is YAML
		require.Len(t, actions, 2, output)
		assert.Equal(t, v1alpha1.ActionRolledBack, actions[0].Type, output)
		assert.Equal(t, int64(2), actions[0].Seq, output)
		assert.Equal(t, v1alpha1.ActionApplied, actions[1].Type, output)
		assert.Equal(t, "256Mi", actions[0].Containers[0].New.Requests.Memory.String(), output)
	}
}

func TestExplainSaysWhyAndWhatHappensNext(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	code, out, errOut := kerf(t, cp, "explain", "deployment/web", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{
		"Deployment/web (RightsizingRecommendation " + f.ns + "/web): phase RolledBack, reason OOMKills\n",
		"Rolled back 5m ago (" + f.now.Add(-5*time.Minute).Format(time.RFC3339) + "): OOMKills\n",
		"): OOMKills\n  memory rolled back after 2 OOM kills\n  figures: oomKills 2 ≥ 1\n  resources: memory\n  app: requests memory 128Mi→256Mi; limits <none> (old→new)\n",
		"HealthWatch: OOMKills (False): container app was OOM-killed 2 times\n",
		"Breach: OOMKills at " + f.now.Add(-5*time.Minute).Format(time.RFC3339) + ", resources memory, restored\n  figures: oomKills 2 ≥ 1\n",
		"Next:\n  memory decreases are blocked until " + f.now.Add(23*time.Hour).Format(time.RFC3339) + " (in 23h)\n",
		"backoff: backingOff, turn 1, last turn failed with OOMKills; the same values may be tried again after " + f.now.Add(10*time.Minute).Format(time.RFC3339) + " (in 10m) if turns remain\n",
	} {
		assert.Contains(t, out, want)
	}

	code, out, errOut = kerf(t, cp, "explain", "api", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Held back by the recommender 2m ago ("+f.now.Add(-2*time.Minute).Format(time.RFC3339)+"): the recommender held memory back\n")
	assert.Contains(t, out, "  app memory request: OOMKill, held 64Mi instead of 48Mi (observed 64Mi)\n")
	assert.Contains(t, out, "Recommender's refusals (kerf.dev/recommendation-basis, made 60s ago by RightsizingPolicy/guard):\n"+
		"  app memory request: OOMKill, held 64Mi instead of 48Mi (observed 64Mi, threshold 0)\n"+
		"    memory request held at 64Mi instead of 48Mi: OOMKill\n")
	assert.NotContains(t, out, "Rolled back")
}

func TestUnknownWorkloadIsAClearErrorAndExitCode1(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"history", "nope"}, `error: no RightsizingRecommendation named "nope" in namespace "` + f.ns + `" (give the recommendation's name, or the workload's kind/name such as deployment/nope)` + "\n"},
		{[]string{"explain", "statefulset/web"}, `error: no RightsizingRecommendation targets StatefulSet/web in namespace "` + f.ns + `"` + "\n"},
		{[]string{"history", "job/web"}, `error: WORKLOAD "job/web": kind "job" is not one Kerf manages (Deployment, StatefulSet, DaemonSet)` + "\n"},
		{[]string{"pause", "--workload", "deployment/nope"}, `error: no RightsizingRecommendation targets Deployment/nope in namespace "` + f.ns + `"` + "\n"},
		{[]string{"pause", "nope"}, `error: no RightsizingPolicy named "nope" in namespace "` + f.ns + `" and no ClusterRightsizingPolicy named "nope"` + "\n"},
		{[]string{"pause", "nope", "--workload", "web"}, "error: give a POLICY or --workload, not both\n"},
		{[]string{"pause", "rollbackpolicy/web"}, `error: POLICY "rollbackpolicy/web": a rollbackpolicy has no pause; pause its workloads with --workload, or let a paused RightsizingPolicy of higher weight govern them` + "\n"},
	} {
		code, out, errOut := kerf(t, cp, append(tc.args, "-n", f.ns)...)
		assert.Equal(t, 1, code, tc.args)
		assert.Empty(t, out, tc.args)
		assert.Equal(t, tc.want, errOut, tc.args)
	}
}

func TestPauseAndResumeAPolicy(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	f := newFixture(t, cp)
	p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "guard"}}
	require.NoError(t, cp.Client.Create(ctx, p))
	cluster := &v1alpha1.ClusterRightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Name: controlplane.UniqueName("kubectl-cluster")}}
	require.NoError(t, cp.Client.Create(ctx, cluster))
	paused := func(obj client.Object) bool {
		t.Helper()
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		switch o := obj.(type) {
		case *v1alpha1.RightsizingPolicy:
			return o.Spec.Guardrails.Paused
		case *v1alpha1.ClusterRightsizingPolicy:
			return o.Spec.Guardrails.Paused
		}
		panic("not a policy")
	}

	code, out, errOut := kerf(t, cp, "pause", "guard", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "RightsizingPolicy "+f.ns+"/guard paused (spec.guardrails.paused set to true): the workloads it governs get no new applies; rollbacks still run\n", out)
	assert.True(t, paused(p))
	code, out, _ = kerf(t, cp, "pause", "rightsizingpolicy/guard", "-n", f.ns)
	require.Equal(t, 0, code)
	assert.Equal(t, "RightsizingPolicy "+f.ns+"/guard already paused (spec.guardrails.paused is true): nothing changed\n", out)
	code, out, errOut = kerf(t, cp, "resume", "guard", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "RightsizingPolicy "+f.ns+"/guard resumed (spec.guardrails.paused cleared): the workloads it governs get applies again\n", out)
	assert.False(t, paused(p))

	// A name no RightsizingPolicy of the namespace has is the
	// ClusterRightsizingPolicy's.
	code, out, errOut = kerf(t, cp, "pause", cluster.Name, "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "ClusterRightsizingPolicy "+cluster.Name+" paused (spec.guardrails.paused set to true): the workloads it governs get no new applies; rollbacks still run\n", out)
	assert.True(t, paused(cluster))
	code, _, errOut = kerf(t, cp, "resume", "clusterrightsizingpolicy/"+cluster.Name)
	require.Equal(t, 0, code, errOut)
	assert.False(t, paused(cluster))
}

func TestPauseAndResumeOneWorkload(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	f := newFixture(t, cp)
	get := func(name string) *v1alpha1.RightsizingRecommendation {
		var r v1alpha1.RightsizingRecommendation
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &r))
		return &r
	}
	code, out, errOut := kerf(t, cp, "pause", "--workload", "deployment/web", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "Deployment/web (RightsizingRecommendation "+f.ns+"/web) paused (annotation kerf.dev/paused=true set): no new applies; rollbacks still run\n", out)
	assert.Equal(t, "true", get("web").Annotations[v1alpha1.PausedAnnotation])
	assert.NotContains(t, get("api").Annotations, v1alpha1.PausedAnnotation, "only the workload named")

	code, out, _ = kerf(t, cp, "explain", "web", "-n", f.ns)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "  Paused: annotation kerf.dev/paused=true holds its applies back (kubectl kerf resume --workload web).\n")

	code, out, errOut = kerf(t, cp, "resume", "--workload", "web", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "Deployment/web (RightsizingRecommendation "+f.ns+"/web) resumed (annotation kerf.dev/paused removed): applies again as its policy allows\n", out)
	assert.NotContains(t, get("web").Annotations, v1alpha1.PausedAnnotation)
	code, out, _ = kerf(t, cp, "resume", "--workload", "web", "-n", f.ns)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "already not paused: nothing changed")
}

// TestResumeLiftsADegradedWorkload: `resume --workload` of a Degraded
// workload writes the resume time the leader reads
// (kerf.dev/resumed-at) and removes a pause with it.
func TestResumeLiftsADegradedWorkload(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	f := newFixture(t, cp)
	var r v1alpha1.RightsizingRecommendation
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, &r))
	since := metav1.NewTime(f.now.Add(-time.Hour))
	r.Status.Phase, r.Status.Reason = v1alpha1.PhaseDegraded, v1alpha1.ReasonDegraded
	r.Status.Degraded = &v1alpha1.DegradedState{Since: &since, RolledBack: 3, Of: 5, PolicyFingerprint: "0123456789abcdef"}
	require.NoError(t, cp.Client.Status().Update(ctx, &r))
	code, _, errOut := kerf(t, cp, "pause", "--workload", "web", "-n", f.ns)
	require.Equal(t, 0, code, errOut)

	code, out, errOut := kerf(t, cp, "resume", "--workload", "web", "-n", f.ns)
	require.Equal(t, 0, code, errOut)
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, &r))
	at, err := time.Parse(time.RFC3339, r.Annotations[v1alpha1.ResumeAnnotation])
	require.NoError(t, err, "the resume time is RFC 3339")
	assert.True(t, at.Equal(f.now), "the resume time is the plugin's now: %s", at)
	assert.NotContains(t, r.Annotations, v1alpha1.PausedAnnotation, "the pause is lifted too")
	assert.Equal(t, "Deployment/web (RightsizingRecommendation "+f.ns+"/web) resumed (annotation kerf.dev/resumed-at="+
		r.Annotations[v1alpha1.ResumeAnnotation]+" set): Degraded since "+since.UTC().Format(time.RFC3339)+
		", 3 of its last 5 changes rolled back; only the changes from now on count\n", out)
}

// TestTheBinaryAsKubectlRunsIt builds kubectl-kerf and runs it with a
// kubeconfig: real flags, real exit codes, and kubectl's plugin
// completion hook.
func TestTheBinaryAsKubectlRunsIt(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	bin := filepath.Join(t.TempDir(), "kubectl-kerf")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	exe := func(env []string, args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String(), errOut.String()
		}
		require.NoError(t, err)
		return 0, out.String(), errOut.String()
	}
	kc := "KUBECONFIG=" + cp.Kubeconfig

	code, out, errOut := exe([]string{kc}, "status", "--namespace", f.ns, "-o", "wide")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `Deployment/web\s+RolledBack\s+OOMKills`, out)

	code, _, errOut = exe([]string{kc}, "history", "nope", "-n", f.ns)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `error: no RightsizingRecommendation named "nope"`)

	code, _, errOut = exe(nil, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "status")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "error: ")

	code, _, errOut = exe([]string{kc}, "status", "--bogus")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "unknown flag: --bogus")

	code, out, errOut = exe(nil, "completion", "bash")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "__start_kubectl-kerf")
	code, out, _ = exe(nil, "completion", "zsh")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "#compdef kubectl-kerf")

	// kubectl's plugin completion (kubectl_complete-kerf) runs
	// `kubectl kerf __complete ARGS`.
	code, out, errOut = exe([]string{kc}, "__complete", "history", "-n", f.ns, "")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"web\n", "deployment/web\n", "api\n", "deployment/api\n"} {
		assert.Contains(t, out, want)
	}
	code, out, _ = exe([]string{kc}, "__complete", "")
	require.Equal(t, 0, code)
	for _, want := range []string{"status\t", "history\t", "explain\t", "pause\t", "resume\t", "completion\t"} {
		assert.Contains(t, out, want)
	}
}

// TestStatusNamesTheNodesWhoseAgentIsNotReady: two kerf-agent pods, one
// ready, one not (an agent that cannot read its node's containers says so
// on /readyz): status names the node of the second after its table, on
// the error stream, and not the first's; -o yaml stays a document.
// Before, nothing in kubectl kerf said a node was unseen.
func TestStatusNamesTheNodesWhoseAgentIsNotReady(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	ctx := context.Background()
	kerfNS := controlplane.UniqueName("kerf")
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kerfNS}}))
	for _, a := range []struct {
		name, node string
		ready      corev1.ConditionStatus
	}{{"kerf-agent-a", "node-a", corev1.ConditionTrue}, {"kerf-agent-b", "node-b", corev1.ConditionFalse}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: kerfNS, Name: a.name,
			Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "agent"}},
			Spec: corev1.PodSpec{NodeName: a.node, Containers: []corev1.Container{{Name: "agent", Image: "kerf.local/kerf-agent:dev"}}}}
		require.NoError(t, cp.Client.Create(ctx, pod))
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: a.ready}}}
		require.NoError(t, cp.Client.Status().Update(ctx, pod))
	}

	code, out, errOut := kerf(t, cp, "status", "-n", f.ns, "--kerf-namespace", kerfNS)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Deployment/web")
	assert.Equal(t, "kerf-agent is not ready on node node-b (pod "+kerfNS+"/kerf-agent-b, Running): Kerf does not see that node's containers; its log says why.\n", errOut)

	code, out, errOut = kerf(t, cp, "status", "-n", f.ns, "--kerf-namespace", kerfNS, "-o", "yaml")
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut, "a document alone")
	assert.NotContains(t, out, "kerf-agent")
}

// TestStatusReadsTheManifestKerfRecordedNotThePatchedTemplate: a Rollout
// patched web's pod template to Kerf's 250m and 128Mi; status's old side
// is the manifest's 500m and 256Mi Kerf recorded before its change, not
// the template's. The limits Kerf never moved are the template's.
func TestStatusReadsTheManifestKerfRecordedNotThePatchedTemplate(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	c := cp.Client
	ns := controlplane.UniqueName("kubectl")
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	labels := map[string]string{"app": "web"}
	require.NoError(t, c.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "kerf.local/workload:1",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: *q("250m"), corev1.ResourceMemory: *q("128Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: *q("1"), corev1.ResourceMemory: *q("1Gi")},
					}}}},
			},
		},
	}))
	rsr := recommendationFor(ns, "web", "web", "250m", "128Mi")
	rsr.Spec.Containers[0].Limits = nil
	require.NoError(t, c.Create(ctx, rsr))
	rsr.Status = v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseHealthy, History: []v1alpha1.Action{{
		Seq: 1, Time: metav1.Time{Time: fixtureNow.Add(-time.Hour)}, Type: v1alpha1.ActionApplied, Reason: "Rollout",
		Containers: []v1alpha1.ContainerValueChange{{Name: "app",
			Old: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("500m"), Memory: q("256Mi")}},
			New: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("250m"), Memory: q("128Mi")}}}}}}}
	require.NoError(t, c.Status().Update(ctx, rsr))
	clock = func() time.Time { return fixtureNow }

	code, out, errOut := kerf(t, cp, "status", "-n", ns, "-o", "wide")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `Deployment/web\s+Healthy\s+<none>\s+app: cpu 500m→250m memory 256Mi→128Mi\s+<none>\s+applied/Rollout\s+60m`, out,
		"requests old→new from the recorded manifest; no limits recommended")
}
