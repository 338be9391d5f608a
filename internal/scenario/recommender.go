package scenario

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// RecommendWorkload is the recommender scenario's workload: it asks for
// 500m and 1Gi, and idles.
var RecommendWorkload = Workload{Name: "recommend-demo", CPURequest: "500m", CPULimit: "1", MemoryRequest: "1Gi", MemoryLimit: "1Gi"}

// RecommendPolicy is the policy that turns the recommender on for the
// recommender scenario's workload only: the scenarios' guardrails, with a
// history of 30 seconds instead of a day so the demo does not wait. Its
// limits scale with the requests (keepLimitProportion, off by default):
// the scenario shows an OOM kill under a lowered memory limit rolled back.
func RecommendPolicy(ns string, watchFor time.Duration) *v1alpha1.RightsizingPolicy {
	p := Policy(ns, watchFor)
	p.Name = "recommend"
	p.Spec.Weight = 200
	p.Spec.Selector = v1alpha1.PolicySelector{WorkloadSelector: &metav1.LabelSelector{MatchLabels: RecommendWorkload.Selector()}}
	p.Spec.Recommend = &v1alpha1.RecommendSpec{
		Enabled:    true,
		Strategy:   v1alpha1.StrategyInPlace,
		Interval:   &metav1.Duration{Duration: 15 * time.Second},
		MinHistory: &metav1.Duration{Duration: 30 * time.Second},

		KeepLimitProportion: ptr.To(true),
	}
	return p
}

// Refusal is one value the recommender held back, as its recommendation's
// basis annotation (kerf.dev/recommendation-basis) records it.
type Refusal struct {
	Container string
	Resource  string
	Field     string
	Reason    string
	Asked     int64
	Held      int64
	Message   string
}

// Refusals reads the refusals of the recommender's basis annotation.
func Refusals(rsr *v1alpha1.RightsizingRecommendation) ([]Refusal, error) {
	raw, ok := rsr.Annotations[v1alpha1.RecommendationBasisAnnotation]
	if !ok {
		return nil, nil
	}
	basis, err := v1alpha1.ParseRecommendationBasis(raw)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	var out []Refusal
	for _, c := range basis.Containers {
		for _, f := range c.Refusals {
			out = append(out, Refusal{Container: c.Name, Resource: string(f.Resource), Field: f.Field, Reason: f.Reason,
				Asked: f.Asked, Held: f.Held, Message: f.Message})
		}
	}
	return out, nil
}

// Recommender runs the recommender end to end: a workload that asks for
// 500m and 1Gi and uses almost nothing is recommended less by Kerf's own
// recommender, which Kerf applies in place; the workload then allocates
// more than its new memory limit, is OOM-killed and rolled back, and from
// then on the recommender refuses to lower its memory, saying so in the
// recommendation.
func (e *Env) Recommender(ctx context.Context, opts Options) (*Result, error) {
	w := RecommendWorkload
	r, err := e.newResult(ctx, w)
	if err != nil {
		return r, err
	}
	if err := e.EnsurePolicy(ctx, WatchDuration); err != nil {
		return r, err
	}
	if err := e.Client.Create(ctx, RecommendPolicy(e.Namespace, WatchDuration)); err != nil && !apierrors.IsAlreadyExists(err) {
		return r, fmt.Errorf("create the recommender's policy: %w", err)
	}
	pod, err := e.Deploy(ctx, w)
	if err != nil {
		return r, err
	}
	if r.Before, err = e.KernelLimits(ctx, pod, Container); err != nil {
		return r, err
	}
	r.mark("kernel", "%s %d MiB, %d millicores", r.Before.MemoryFile(), r.Before.MemoryBytes/Mi, r.Before.CPUMillis())
	e.Say("the recommender's policy asks for 30 s of history; the agent reads the container's usage every 10 s")

	// The recommender writes the recommendation once it has the history.
	var rsr *v1alpha1.RightsizingRecommendation
	err = Poll(ctx, r.wait(3*time.Minute), 250*time.Millisecond, "the recommender's recommendation", func(ctx context.Context) (bool, error) {
		got, err := e.RSR(ctx, w.Name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		rsr = got
		return got.Labels[v1alpha1.RecommendedByLabel] == v1alpha1.RecommendedByKerf, nil
	})
	if err != nil {
		return r, err
	}
	r.Changed = rsr.CreationTimestamp.Time
	want := recommendedMemory(rsr)
	if want <= 0 || want >= r.Before.MemoryBytes {
		return r, fmt.Errorf("the recommender did not lower the memory limit: %+v", rsr.Spec.Containers)
	}
	r.mark("recommender", "RightsizingRecommendation %s: %s", w.Name, valuesOf(rsr))
	e.Say("the recommender recommends %s", valuesOf(rsr))
	if err := e.applied(ctx, r, w, want, 0, "pod resized in place, no restart"); err != nil {
		return r, err
	}

	if opts.MidWatch != nil {
		if err := opts.MidWatch(ctx); err != nil {
			return r, err
		}
	}

	// The squeeze: more than the new limit.
	alloc := want/Mi + 64
	e.Say("asking the workload to allocate %d MiB: over its new %d MiB limit", alloc, want/Mi)
	r.mark("scenario", "POST /alloc?mib=%d", alloc)
	pods, err := e.RunningPods(ctx, w.Selector())
	if err != nil || len(pods) == 0 {
		return r, fmt.Errorf("the workload's pod is gone before the squeeze: %v", err)
	}
	r.Pod = pods[0].Name
	if err := e.Control(ctx, &pods[0], "alloc", fmt.Sprintf("mib=%d", alloc)); err != nil {
		return r, err
	}
	if err := e.restored(ctx, r, w, v1alpha1.HealthWatchOOMKills, r.Before.MemoryBytes, 0); err != nil {
		return r, err
	}

	// From now on the memory is held: the next recommendation says so.
	e.Say("the recommender's next pass: it must not lower the memory of a container the kernel OOM-killed")
	var held []Refusal
	err = Poll(ctx, r.wait(2*time.Minute), 250*time.Millisecond, "the recommender's refusal to lower the memory", func(ctx context.Context) (bool, error) {
		got, err := e.RSR(ctx, w.Name)
		if err != nil {
			return false, err
		}
		fs, err := Refusals(got)
		if err != nil {
			return false, err
		}
		held = held[:0]
		watched := false
		for _, f := range fs {
			switch {
			case f.Reason == "WatchRunning":
				watched = true
			case f.Resource == string(corev1.ResourceMemory) && f.Reason == "OOMKill":
				held = append(held, f)
			}
		}
		r.RSR = got
		// A recommendation made between the breach and its restore keeps
		// the watched values, saying so with WatchRunning refusals beside
		// the kill's. The recommender's answer is the one after.
		return len(held) > 0 && !watched, nil
	})
	if err != nil {
		return r, err
	}
	for _, f := range held {
		r.mark("recommender", "refused: %s", f.Message)
		e.Say("refused: %s", f.Message)
	}
	if m := recommendedMemory(r.RSR); m != 0 && m < r.Before.MemoryBytes {
		return r, fmt.Errorf("after the OOM kill the recommender lowered the memory limit to %d MiB (the workload had %d MiB)", m/Mi, r.Before.MemoryBytes/Mi)
	}
	return r, nil
}

// recommendedMemory is the memory limit the recommendation asks for, in
// bytes (0 when it leaves it).
func recommendedMemory(rsr *v1alpha1.RightsizingRecommendation) int64 {
	for _, c := range rsr.Spec.Containers {
		if c.Name == Container && c.Limits != nil && c.Limits.Memory != nil {
			return c.Limits.Memory.Value()
		}
	}
	return 0
}

// valuesOf is the recommendation's values for the narration.
func valuesOf(rsr *v1alpha1.RightsizingRecommendation) string {
	s := ""
	for _, c := range rsr.Spec.Containers {
		q := func(v *v1alpha1.ResourceValues) string {
			if v == nil {
				return "-"
			}
			cpu, mem := "-", "-"
			if v.CPU != nil {
				cpu = v.CPU.String()
			}
			if v.Memory != nil {
				mem = v.Memory.String()
			}
			return "cpu " + cpu + " memory " + mem
		}
		s += fmt.Sprintf("%s: requests %s, limits %s", c.Name, q(c.Requests), q(c.Limits))
	}
	return s
}
