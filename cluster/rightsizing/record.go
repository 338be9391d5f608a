package rightsizing

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// outcome is one transition of a recommendation: what one status write
// records, and what is said about it once that write succeeded. record
// writes it whole, so status, history, Events and kerf_actions_total never
// disagree.
type outcome struct {
	// doing names the write in its error, such as "record apply of".
	doing string
	// phase, when set, replaces status.phase.
	phase v1alpha1.Phase
	// setReason makes reason and message replace status.reason and
	// status.message (empty ones clear them); without it they stay.
	setReason       bool
	reason, message string
	// observe marks the outcome as acting on this generation:
	// status.observedGeneration becomes it and status.policy the governing
	// policy (none without one).
	observe bool
	// status sets the other status fields the transition changes.
	status func(st *v1alpha1.RightsizingRecommendationStatus)
	// conditions are set with the recommendation's generation and the
	// pass's clock; removeConditions are the types removed.
	conditions       []metav1.Condition
	removeConditions []string
	// action, when set, is added to status.history at the pass's clock and
	// counted in kerf_actions_total by its type, reason and resources.
	action *v1alpha1.Action
	// then, when set, is a second action recorded and counted after
	// action: the Degraded verdict after the rollback that made it.
	then *v1alpha1.Action
	// events are emitted after the write.
	events []kubeEvent
	// rollbackChanged says the transition moved the backoff state machine
	// (status.rollback): after the write its Events (backoff, the reasons
	// it returned) are emitted and its state is mirrored on the workload.
	rollbackChanged bool
	backoff         []string
	// mirrorLater leaves the mirror to the caller (mirrorPending). A
	// breach's mirror is written after the restore. Written before, it
	// would make the restore's template patch conflict, since the patch
	// carries the resourceVersion the cache read.
	mirrorLater bool
	// mirrored says the state's mirror is on the workload already,
	// written with the restore's template patch (apply.Result.Annotated).
	mirrored bool
	// hook, when set, is a test's hook (AfterRecord, AfterBreach) run once
	// the outcome is written; when it stops the leader, record returns the
	// context's error and the pass does nothing more.
	hook func(context.Context, *v1alpha1.RightsizingRecommendation)
}

// kubeEvent is a Kubernetes Event an outcome emits.
type kubeEvent struct {
	typ, reason, action, note string
	// onWorkload emits it about the workload, related to the
	// recommendation, instead of about the recommendation; it is left out
	// when the workload cannot be read.
	onWorkload bool
}

// newCondition builds a condition of an outcome.
func newCondition(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// record writes the outcome: its status update, then, once that
// succeeded, what follows from it. In order:
//   - phase, reason and message, the other status fields, the conditions
//     and the history entry;
//   - the status update, conditional on resourceVersion;
//   - only once that succeeded, the Events, the backoff state's mirror
//     and kerf_actions_total;
//   - last, the outcome's test hook.
func (c *reconcileContext) record(ctx context.Context, o outcome) error {
	rsr, st := c.rsr, &c.rsr.Status
	if o.phase != "" {
		st.Phase = o.phase
	}
	if o.setReason {
		st.Reason, st.Message = o.reason, o.message
	}
	if o.observe {
		st.ObservedGeneration = rsr.Generation
		st.Policy = nil
		if c.resolved != nil {
			st.Policy = &c.resolved.Ref
		}
	}
	if o.status != nil {
		o.status(st)
	}
	for _, cond := range o.conditions {
		cond.ObservedGeneration, cond.LastTransitionTime = rsr.Generation, metav1.NewTime(c.now)
		meta.SetStatusCondition(&st.Conditions, cond)
	}
	for _, typ := range o.removeConditions {
		meta.RemoveStatusCondition(&st.Conditions, typ)
	}
	for _, action := range []*v1alpha1.Action{o.action, o.then} {
		if action != nil {
			a := *action
			a.Time = metav1.NewTime(c.now)
			addHistory(rsr, a)
		}
	}
	if cut := fitStatus(st); len(cut) > 0 {
		c.r.Log.Warn("status cut to the CRD's limits", "recommendation", rsr.Namespace+"/"+rsr.Name, "doing", o.doing, "cut", strings.Join(cut, ", "))
	}
	if err := c.writer().Status().Update(ctx, rsr); err != nil {
		if !apierrors.IsInvalid(err) {
			return fmt.Errorf("%s %s/%s: %w", o.doing, rsr.Namespace, rsr.Name, err)
		}
		// fitStatus should make this impossible. If the apiserver still
		// refuses the status, the transition (phase, change, breach) is
		// written without the outcome's free text, not retried forever.
		// So the change is still watched or rolled back.
		c.r.Log.Error("the apiserver refused a status write as invalid; writing it again with the outcome's messages left out",
			"recommendation", rsr.Namespace+"/"+rsr.Name, "doing", o.doing, "err", err)
		minimalStatus(st, o, err)
		if err2 := c.writer().Status().Update(ctx, rsr); err2 != nil {
			c.r.Metrics.InvalidStatus.WithLabelValues(invalidRefused).Inc()
			return fmt.Errorf("%s %s/%s: %w (and again with the messages left out: %w)", o.doing, rsr.Namespace, rsr.Name, err, err2)
		}
		c.r.Metrics.InvalidStatus.WithLabelValues(invalidFallback).Inc()
	}

	for _, e := range o.events {
		e.note = fit(e.note, maxEventNote)
		if !e.onWorkload {
			c.r.Recorder.Eventf(rsr, nil, e.typ, e.reason, e.action, "%s", e.note)
			continue
		}
		if w, err := c.workload(ctx); err == nil {
			c.r.Recorder.Eventf(w, rsr, e.typ, e.reason, e.action, "%s", e.note)
		}
	}
	if o.rollbackChanged {
		for _, reason := range o.backoff {
			typ, msg := policy.Describe(reason, st.Rollback)
			c.r.Recorder.Eventf(rsr, nil, typ, reason, v1alpha1.EventActionBackoff, "%s", msg)
		}
		c.mirrorPending = o.mirrorLater
		if !o.mirrorLater && !o.mirrored {
			c.mirror(ctx)
		}
	}
	for _, action := range []*v1alpha1.Action{o.action, o.then} {
		if action != nil {
			c.r.Metrics.count(action)
		}
	}
	if o.hook != nil {
		o.hook(ctx, rsr)
		return ctx.Err()
	}
	return nil
}

// addHistory numbers an action (Seq, one after the newest entry's) and
// appends it, keeping the newest v1alpha1.MaxHistory. Entries recorded
// before Seq existed are numbered first, from 1 by position, as the hub
// forwarder numbers them (forward.SeqOf).
func addHistory(rsr *v1alpha1.RightsizingRecommendation, a v1alpha1.Action) {
	h := rsr.Status.History
	if n := len(h); n > 0 && h[n-1].Seq == 0 {
		for i := range h {
			h[i].Seq = int64(i + 1)
		}
	}
	a.Seq = 1
	if n := len(h); n > 0 {
		a.Seq = h[n-1].Seq + 1
	}
	h = append(h, a)
	if len(h) > v1alpha1.MaxHistory {
		h = slices.Clone(h[len(h)-v1alpha1.MaxHistory:])
	}
	rsr.Status.History = h
}

// mirror writes status.rollback to the workload (annotate), logging a
// failure.
func (c *reconcileContext) mirror(ctx context.Context) {
	if err := c.annotate(ctx); err != nil {
		c.r.Log.Error("mirror rollback state on the workload", "recommendation", c.rsr.Namespace+"/"+c.rsr.Name, "err", err)
	}
}

// annotate writes status.rollback to the workload's
// kerf.dev/rollback-state annotation.
func (c *reconcileContext) annotate(ctx context.Context) error {
	w, err := c.workload(ctx)
	if err != nil {
		return err
	}
	annotations, err := mirrorAnnotation(c.rsr.Status.Rollback)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	return c.writer().Patch(ctx, w, client.RawPatch(types.MergePatchType, patch))
}

// mirrorAnnotation is the workload's kerf.dev/rollback-state annotation
// for st, as a patch writes it: nil (removing it) when there is no state.
func mirrorAnnotation(st *v1alpha1.RollbackState) (map[string]*string, error) {
	val, err := policy.AnnotationValue(st)
	if err != nil {
		return nil, err
	}
	if val == "" {
		return map[string]*string{v1alpha1.RollbackStateAnnotation: nil}, nil
	}
	return map[string]*string{v1alpha1.RollbackStateAnnotation: &val}, nil
}
