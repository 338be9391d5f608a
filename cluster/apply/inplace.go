package apply

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// podContainer returns the named container of the pod, nil when absent
// and for the pod-level entry.
func podContainer(p *corev1.Pod, name string) *corev1.Container {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == name {
			return &p.Spec.Containers[i]
		}
	}
	return nil
}

// resizePods resizes every running pod of the workload to the targets
// through the pods/resize subresource, up to resizeConcurrency pods at
// once. It then reports each pod in name order: carrying the values
// (Touched), still resizing (Pending) or failed (Failed).
//
// watched says the call is an apply, whose health watch follows. Then a
// resize the kubelet marks Infeasible goes to Infeasible rather than
// Failed: the watch rolls the change back if it stays so past the grace
// (docs/health.md).
//
// An error on one pod, or ctx ending, stops new resizes from starting.
// Those in flight finish and are reported like the others. The error of
// the first pod by name, else ctx's, is returned.
//
// only, when not nil, names the pods to resize: a canary's. The others
// are neither resized nor reported.
func (a *Applier) resizePods(ctx context.Context, w *workload.Workload, targets []target, since time.Time, watched bool, only []string, res *Result) error {
	pods, err := workload.RunningPods(ctx, a.Client, w)
	if err != nil {
		return err
	}
	if only != nil {
		keep := make(map[string]bool, len(only))
		for _, name := range only {
			keep[name] = true
		}
		pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return !keep[p.Name] })
	}
	outs := make([]podResize, len(pods))
	stopped := a.resizeAll(ctx, pods, targets, outs)
	var first error
	for i := range outs {
		o := &outs[i]
		switch {
		case o.skipped:
			res.Notes = append(res.Notes, fmt.Sprintf("pod %s runs none of the containers to resize; left as is", pods[i].Name))
			continue
		case !o.done:
			continue // not started: ctx ended or another pod's resize failed
		case o.err != nil:
			if first == nil {
				first = o.err
			}
			continue
		case o.failure != nil:
			res.Failed = append(res.Failed, *o.failure)
			continue
		}
		res.Notes = append(res.Notes, o.notes...)
		p := o.pod
		if p == nil { // deleted or stopped meanwhile
			continue
		}
		res.Touched = append(res.Touched, v1alpha1.TouchedObject{Kind: "Pod", Name: p.Name, ResourceVersion: p.ResourceVersion})
		res.Notes = append(res.Notes, restartNotes(p, targets)...)
		pending, failure := a.resizeState(p, targets, since)
		switch {
		case failure != nil && watched && failure.Reason == v1alpha1.ResizeInfeasible:
			res.Infeasible = append(res.Infeasible, *failure)
		case failure != nil:
			res.Failed = append(res.Failed, *failure)
		case pending:
			res.Pending = append(res.Pending, p.Name)
		}
	}
	if first != nil {
		return first
	}
	if stopped != nil {
		return fmt.Errorf("resize pods of %s: %w", w, stopped)
	}
	return nil
}

// podResize is what resizing one pod gave.
type podResize struct {
	skipped bool // the pod runs none of the targets' containers
	done    bool // resizePod ran
	pod     *corev1.Pod
	failure *Failure
	notes   []string
	err     error
}

// resizeAll runs resizePod on every pod that runs one of the targets'
// containers, up to resizeConcurrency at once, writing outs[i] for
// pods[i]. It starts no resize once ctx has ended or a resize returned an
// error, waits for those in flight, and returns ctx's error if ctx ended
// before every resize started.
func (a *Applier) resizeAll(ctx context.Context, pods []corev1.Pod, targets []target, outs []podResize) error {
	var (
		wg     sync.WaitGroup
		failed atomic.Bool
		slots  = make(chan struct{}, a.resizeConcurrency())
	)
	defer wg.Wait()
	for i := range pods {
		if !slices.ContainsFunc(targets, func(t target) bool {
			_, ok := resources.Requirements(&pods[i].Spec, t.name)
			return ok
		}) {
			outs[i].skipped = true
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			<-slots
			return err
		}
		if failed.Load() {
			<-slots
			return nil // the failed resize's error is returned
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			o := &outs[i]
			var notes Result
			o.pod, o.failure, o.err = a.resizePod(ctx, &pods[i], targets, &notes)
			o.notes, o.done = notes.Notes, true
			if o.err != nil {
				failed.Store(true)
			}
		}()
	}
	return nil
}

// resizePod writes the targets to one pod unless its spec already holds
// them. It retries on conflict with a fresh read: a resize touches only
// the resources, so nothing of another writer is lost. It returns the pod
// as it is now, nil when it is gone, going or no longer running, or a
// Failure when the apiserver refuses the resize.
func (a *Applier) resizePod(ctx context.Context, pod *corev1.Pod, targets []target, res *Result) (*corev1.Pod, *Failure, error) {
	pods := a.Clientset.CoreV1().Pods(pod.Namespace)
	cur, out := pod, (*corev1.Pod)(nil)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		desired, changed := resized(cur, targets)
		if !changed {
			out = cur
			return nil
		}
		p, err := pods.UpdateResize(ctx, cur.Name, desired, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			fresh, getErr := pods.Get(ctx, cur.Name, metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			if fresh.DeletionTimestamp != nil || fresh.Status.Phase != corev1.PodRunning {
				out = nil // going away or no longer running: not resized
				return nil
			}
			cur = fresh
			return err
		}
		if err != nil {
			return err
		}
		out = p
		return nil
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil, nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		return nil, &Failure{Pod: pod.Name, Reason: v1alpha1.ResizeRejected, Message: err.Error()}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("resize pod %s/%s: %w", pod.Namespace, pod.Name, err)
	case out == nil:
		return nil, nil, nil
	}
	for _, t := range targets {
		rr, ok := resources.Requirements(&out.Spec, t.name)
		if !ok {
			res.Notes = append(res.Notes, fmt.Sprintf("pod %s has no container %s; left as is", out.Name, t.name))
			continue
		}
		for _, f := range t.fieldsInOrder() {
			if t.values[f] == nil && f.In(&rr) != nil {
				res.Notes = append(res.Notes, fmt.Sprintf("pod %s %s keeps %s %s: a value cannot be removed in place",
					out.Name, resources.Describe(t.name), f, f.In(&rr).String()))
			}
		}
	}
	return out, nil, nil
}

// resized returns a copy of the pod with the targets written into its
// containers' resources, or its pod-level ones, and whether anything
// changed. A nil target value (remove) is skipped: the apiserver forbids
// removing a value in place.
func resized(pod *corev1.Pod, targets []target) (*corev1.Pod, bool) {
	out := pod.DeepCopy()
	changed := false
	for _, t := range targets {
		if _, ok := resources.Requirements(&out.Spec, t.name); !ok {
			continue
		}
		for f, want := range t.values {
			rr, _ := resources.Requirements(&out.Spec, t.name)
			if want == nil || resources.SameQuantity(f.In(&rr), want) {
				continue
			}
			f.SetIn(resources.RequirementsToSet(&out.Spec, t.name), want)
			changed = true
		}
	}
	return out, changed
}

// restartNotes notes the containers the kubelet restarts to resize them:
// those whose resizePolicy for a resource the targets set is
// RestartContainer. The resize goes ahead; the note tells people why the
// container restarts.
func restartNotes(p *corev1.Pod, targets []target) []string {
	var notes []string
	for _, t := range targets {
		c := podContainer(p, t.name)
		if c == nil {
			continue
		}
		for _, res := range t.resources() {
			for _, rp := range c.ResizePolicy {
				if string(rp.ResourceName) == string(res) && rp.RestartPolicy == corev1.RestartContainer {
					notes = append(notes, fmt.Sprintf("pod %s container %s restarts to resize %s (resizePolicy RestartContainer)", p.Name, c.Name, res))
				}
			}
		}
	}
	return notes
}

// resizeState reads how far the kubelet got with the pod's resize, from
// its KEP-1287 conditions:
//   - PodResizePending reason Infeasible fails at once.
//   - PodResizePending reason Deferred and PodResizeInProgress fail once
//     they have lasted the resize timeout, counted from the condition's
//     lastTransitionTime but not before since.
//   - A condition observed for an older generation of the pod is not about
//     this resize.
//   - Without a condition the resize is still pending while the kubelet
//     has not observed the pod's generation or its status reports other
//     values than the spec.
func (a *Applier) resizeState(p *corev1.Pod, targets []target, since time.Time) (pending bool, failure *Failure) {
	now, timeout := a.now(), a.resizeTimeout()
	timedOut := func(c corev1.PodCondition) (time.Duration, bool) {
		start := c.LastTransitionTime.Time
		if start.Before(since) {
			start = since
		}
		d := now.Sub(start)
		return d, d >= timeout
	}
	var pendingCond, inProgressCond *corev1.PodCondition
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue || (c.ObservedGeneration != 0 && c.ObservedGeneration < p.Generation) {
			continue
		}
		switch c.Type {
		case corev1.PodResizePending:
			pendingCond = c
		case corev1.PodResizeInProgress:
			inProgressCond = c
		}
	}
	if c := pendingCond; c != nil {
		if c.Reason == corev1.PodReasonInfeasible {
			return false, &Failure{Pod: p.Name, Reason: v1alpha1.ResizeInfeasible, Message: c.Message}
		}
		if d, ok := timedOut(*c); ok {
			return false, &Failure{Pod: p.Name, Reason: v1alpha1.ResizeDeferred,
				Message: fmt.Sprintf("resize pending (%s) for %s, timeout %s: %s", c.Reason, d.Round(time.Second), timeout, c.Message)}
		}
		pending = true
	}
	if c := inProgressCond; c != nil {
		if d, ok := timedOut(*c); ok {
			msg := fmt.Sprintf("resize in progress for %s, timeout %s", d.Round(time.Second), timeout)
			if c.Reason != "" || c.Message != "" {
				msg += fmt.Sprintf(": %s %s", c.Reason, c.Message)
			}
			return false, &Failure{Pod: p.Name, Reason: v1alpha1.ResizeInProgress, Message: msg}
		}
		pending = true
	}
	if pending {
		return true, nil
	}
	if p.Status.ObservedGeneration != 0 && p.Status.ObservedGeneration < p.Generation {
		return true, nil
	}
	return !statusMatchesSpec(p, targets), nil
}

// statusMatchesSpec reports whether the pod's container statuses, and its
// status.resources for the pod-level target, report the spec's values for
// every field the targets set. A value the status does not report is not
// compared.
func statusMatchesSpec(p *corev1.Pod, targets []target) bool {
	for _, t := range targets {
		spec, ok := resources.Requirements(&p.Spec, t.name)
		running := resources.Running(p, t.name)
		if !ok || running == nil {
			continue
		}
		for f := range t.values {
			got := f.In(running)
			if got != nil && !resources.SameQuantity(got, f.In(&spec)) {
				return false
			}
		}
	}
	return true
}
