package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// historyLimit is how many actions status.history keeps (design section 2).
const historyLimit = 100

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
	// events are emitted after the write.
	events []kubeEvent
	// rollbackChanged says the transition moved the backoff state machine
	// (status.rollback): after the write its Events (backoff, the reasons
	// it returned) are emitted and its state is mirrored on the workload.
	rollbackChanged bool
	backoff         []string
	// mirrorLater leaves the mirror to the caller (mirrorPending): a
	// breach's, written after the restore, whose template patch it would
	// otherwise precede and make conflict (the patch carries the
	// resourceVersion the cache read).
	mirrorLater bool
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

// record writes the outcome: phase, reason and message, the other status
// fields, the conditions and the history entry, then the status update
// (conditional on resourceVersion), and only once that succeeded the
// Events, the backoff state's mirror and kerf_actions_total; last the
// outcome's test hook.
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
	if o.action != nil {
		a := *o.action
		a.Time = metav1.NewTime(c.now)
		addHistory(rsr, a)
	}
	if err := c.writer().Status().Update(ctx, rsr); err != nil {
		return fmt.Errorf("%s %s/%s: %w", o.doing, rsr.Namespace, rsr.Name, err)
	}

	for _, e := range o.events {
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
		if !o.mirrorLater {
			c.mirror(ctx)
		}
	}
	if o.action != nil {
		c.r.Metrics.count(o.action)
	}
	if o.hook != nil {
		o.hook(ctx, rsr)
		return ctx.Err()
	}
	return nil
}

// addHistory numbers an action (Seq, one after the newest entry's) and
// appends it, keeping the newest historyLimit. Entries recorded before Seq
// existed are numbered first, from 1 by position, as the hub forwarder
// numbers them (forward.SeqOf).
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
	if len(h) > historyLimit {
		h = slices.Clone(h[len(h)-historyLimit:])
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
	val, err := policy.AnnotationValue(c.rsr.Status.Rollback)
	if err != nil {
		return err
	}
	var v any = val
	if val == "" {
		v = nil // removes it
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.RollbackStateAnnotation: v}}})
	if err != nil {
		return err
	}
	return c.writer().Patch(ctx, w, client.RawPatch(types.MergePatchType, patch))
}

// recordRefusals records the values the recommender held back, as its
// basis annotation says, once per distinct set: a refused action with the
// figures, and a Normal Refused Event on the recommendation and its
// workload. status.recordedRefusals keeps the set's key, so a pass that
// finds the same set records nothing, and one that finds none clears it,
// so the same refusals coming back later are recorded again. Only the
// recommender's own recommendations carry a basis.
func (c *reconcileContext) recordRefusals(ctx context.Context) error {
	rsr := c.rsr
	if rsr.Labels[v1alpha1.RecommendedByLabel] != v1alpha1.RecommendedByKerf {
		return nil
	}
	refusals, messages, key := basisRefusals(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation])
	if key == rsr.Status.RecordedRefusals {
		return nil
	}
	keep := func(st *v1alpha1.RightsizingRecommendationStatus) { st.RecordedRefusals = key }
	if key == "" {
		return c.record(ctx, outcome{doing: "record the end of the refusals of", status: keep})
	}
	var resources []v1alpha1.ResourceName
	for _, f := range refusals {
		if !slices.Contains(resources, f.Resource) {
			resources = append(resources, f.Resource)
		}
	}
	held := make([]string, len(refusals))
	for i, f := range refusals {
		held[i] = fmt.Sprintf("%s %s of %s (%s)", f.Resource, f.Field, f.Container, f.Reason)
	}
	// The action says what was held back; its figures, one per value,
	// how much and why. The Event, whose note the apiserver bounds to
	// 1 kB, says both.
	msg := truncate("the recommender held back "+strings.Join(held, ", "), 4096)
	figures := make([]string, len(messages))
	for i, m := range messages {
		figures[i] = truncate(m, 256)
	}
	note := truncate(msg+": "+strings.Join(messages, "; "), 1024)
	return c.record(ctx, outcome{
		doing:  "record the refusals of",
		status: keep,
		action: &v1alpha1.Action{Type: v1alpha1.ActionRefused, Reason: refusals[0].Reason, Message: msg,
			Resources: resources, Figures: figures, Refusals: refusals},
		events: []kubeEvent{
			{typ: corev1.EventTypeNormal, reason: v1alpha1.EventRefused, action: v1alpha1.EventActionRecommend, note: note},
			{typ: corev1.EventTypeNormal, reason: v1alpha1.EventRefused, action: v1alpha1.EventActionRecommend, note: note, onWorkload: true},
		},
	})
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
