package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
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
	if cut := fitStatus(st); len(cut) > 0 {
		c.r.Log.Warn("status cut to the CRD's limits", "recommendation", rsr.Namespace+"/"+rsr.Name, "doing", o.doing, "cut", strings.Join(cut, ", "))
	}
	if err := c.writer().Status().Update(ctx, rsr); err != nil {
		if !apierrors.IsInvalid(err) {
			return fmt.Errorf("%s %s/%s: %w", o.doing, rsr.Namespace, rsr.Name, err)
		}
		// fitStatus should make this impossible; if the apiserver still
		// refuses the status, the transition (phase, change, breach) is
		// written without the outcome's free text rather than retried
		// forever, so the change is still watched or rolled back.
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

// recordRefusals records the values the recommender held back, as its
// basis annotation says, when what is refused or why changed: a refused
// action with the figures, and a Normal Refused Event on the
// recommendation and its workload. A set is news only when one of its
// refusals (container, resource, field, reason and the value held) is in
// none of the refused actions recorded since the last change (applied or
// rolled back): refusals that end, or come and go between passes, are
// not recorded again, so status.history (bounded) and the hub keep the
// actions that matter. status.recordedRefusals keeps the last set's key,
// so a pass that finds it again reads no history. Only the recommender's
// own recommendations carry a basis.
func (c *reconcileContext) recordRefusals(ctx context.Context) error {
	rsr := c.rsr
	if rsr.Labels[v1alpha1.RecommendedByLabel] != v1alpha1.RecommendedByKerf {
		return nil
	}
	refusals, messages, key := basisRefusals(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation])
	if key == "" || key == rsr.Status.RecordedRefusals || refusalsRecorded(rsr.Status.History, refusals) {
		return nil
	}
	keep := func(st *v1alpha1.RightsizingRecommendationStatus) { st.RecordedRefusals = key }
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
	msg := cutTo("the recommender held back "+strings.Join(held, ", "), v1alpha1.MaxActionMessageLength, ellipsis)
	figures := make([]string, len(messages))
	for i, m := range messages {
		figures[i] = cutTo(m, v1alpha1.MaxFigureLength, ellipsis)
	}
	note := cutTo(msg+": "+strings.Join(messages, "; "), maxEventNote, ellipsis)
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

// refusalsRecorded reports whether every refusal is among those of the
// refused actions recorded since the last change (an applied or
// rolled_back action) in history.
func refusalsRecorded(history []v1alpha1.Action, refusals []v1alpha1.Refusal) bool {
	type id struct {
		container, field, reason string
		resource                 v1alpha1.ResourceName
		held                     int64
	}
	seen := map[id]bool{}
	for i := len(history) - 1; i >= 0; i-- {
		a := &history[i]
		if a.Type == v1alpha1.ActionApplied || a.Type == v1alpha1.ActionRolledBack {
			break
		}
		if a.Type != v1alpha1.ActionRefused {
			continue
		}
		for _, f := range a.Refusals {
			seen[id{f.Container, f.Field, f.Reason, f.Resource, f.Held}] = true
		}
	}
	for _, f := range refusals {
		if !seen[id{f.Container, f.Field, f.Reason, f.Resource, f.Held}] {
			return false
		}
	}
	return true
}

// maxEventNote is the apiserver's limit on an Event's note. The status'
// limits are api/v1alpha1's (MaxHistory, MaxReasonLength and the rest),
// beside the CRD markers they mirror.
const maxEventNote = 1024

// statusLimits are the limits fitStatus cuts the action messages to; a
// test loosens them to make the apiserver refuse a write.
var statusLimits = struct{ actionMessage int }{actionMessage: v1alpha1.MaxActionMessageLength}

// The outcome label of kerf_status_writes_invalid_total.
const (
	invalidFallback = "fallback"
	invalidRefused  = "refused"
)

// cutTo cuts s to at most n bytes, on a rune boundary, and ends it with
// mark(k), k being the bytes left out. It is the leader's one string
// cutter; fit and the refusals' ellipsis are its two marks.
func cutTo(s string, n int, mark func(left int) string) string {
	if len(s) <= n {
		return s
	}
	// k is at most len(s), so its mark is at most this long.
	at := max(n-len(mark(len(s))), 0)
	for at > 0 && !utf8.RuneStart(s[at]) {
		at--
	}
	return s[:at] + mark(len(s)-at)
}

// fit cuts s to at most n bytes and says how many bytes were left out:
// "… (and 1234 more bytes)".
func fit(s string, n int) string { return cutTo(s, n, moreBytes) }

func moreBytes(n int) string { return fmt.Sprintf("… (and %d more bytes)", n) }

// ellipsis marks a cut with "…" alone, as the refusals' message, figures
// and Event note do.
func ellipsis(int) string { return "…" }

// joinFit joins items with sep into at most n bytes: as many whole items
// as fit, then "… (and N more <noun>)" for those left out. When not even
// the first item fits, it is cut by fit.
func joinFit(items []string, sep string, n int, noun string) string {
	all := strings.Join(items, sep)
	if len(all) <= n {
		return all
	}
	more := func(k int) string { return fmt.Sprintf("%s… (and %d more %s)", sep, k, noun) }
	size, kept := 0, 0
	for i, it := range items {
		add := len(it)
		if i > 0 {
			add += len(sep)
		}
		if size+add+len(more(len(items)-i-1)) > n {
			break
		}
		size += add
		kept++
	}
	if kept == 0 {
		return fit(all, n)
	}
	return strings.Join(items[:kept], sep) + more(len(items)-kept)
}

// fitFigures keeps at most v1alpha1.MaxFigures figures of at most
// v1alpha1.MaxFigureLength bytes each; the last kept one says how many
// were left out.
func fitFigures(f []string) []string {
	if len(f) > v1alpha1.MaxFigures {
		f = append(slices.Clone(f[:v1alpha1.MaxFigures-1]), fmt.Sprintf("… and %d more figures", len(f)-v1alpha1.MaxFigures+1))
	}
	for i := range f {
		f[i] = fit(f[i], v1alpha1.MaxFigureLength)
	}
	return f
}

// capTouched keeps every touched object that is not a pod (the workload,
// the HPA) and the first pods, up to v1alpha1.MaxTouched in all, in their
// order, and returns how many pods it left out.
func capTouched(touched []v1alpha1.TouchedObject) ([]v1alpha1.TouchedObject, int32) {
	if len(touched) <= v1alpha1.MaxTouched {
		return touched, 0
	}
	others := 0
	for _, o := range touched {
		if o.Kind != "Pod" {
			others++
		}
	}
	room := max(v1alpha1.MaxTouched-others, 0)
	out := make([]v1alpha1.TouchedObject, 0, v1alpha1.MaxTouched)
	for _, o := range touched {
		if o.Kind == "Pod" {
			if room == 0 || len(out) == v1alpha1.MaxTouched {
				continue
			}
			room--
		} else if len(out) == v1alpha1.MaxTouched {
			continue
		}
		out = append(out, o)
	}
	return out, int32(len(touched) - len(out))
}

// fitStatus cuts every field of st the leader fills from what it cannot
// bound (pods' failures joined into messages, the touched pods, per-pod
// baselines, figures) to the CRD's limits, so that the status write is not
// refused (422) and retried forever while the change runs unwatched.
// Messages are cut on a rune boundary and say how much was left out;
// lists keep their newest (history, turns) or first entries, and the
// touched pods count those left out in change.touchedOmitted. It returns
// what it cut, for the log.
func fitStatus(st *v1alpha1.RightsizingRecommendationStatus) []string {
	var cut []string
	str := func(name string, s *string, n int) {
		if len(*s) > n {
			cut = append(cut, fmt.Sprintf("%s (%d bytes, limit %d)", name, len(*s), n))
			*s = fit(*s, n)
		}
	}
	list := func(name string, n, limit int) bool {
		if n > limit {
			cut = append(cut, fmt.Sprintf("%s (%d items, limit %d)", name, n, limit))
			return true
		}
		return false
	}
	str("reason", &st.Reason, v1alpha1.MaxReasonLength)
	str("message", &st.Message, v1alpha1.MaxStatusMessageLength)
	for i := range st.Conditions {
		str("conditions["+st.Conditions[i].Type+"].message", &st.Conditions[i].Message, v1alpha1.MaxConditionMessageLength)
	}
	for i := range st.History {
		a := &st.History[i]
		str(fmt.Sprintf("history[%d].reason", i), &a.Reason, v1alpha1.MaxReasonLength)
		str(fmt.Sprintf("history[%d].message", i), &a.Message, statusLimits.actionMessage)
		if list(fmt.Sprintf("history[%d].figures", i), len(a.Figures), v1alpha1.MaxFigures) || slices.ContainsFunc(a.Figures, func(f string) bool { return len(f) > v1alpha1.MaxFigureLength }) {
			a.Figures = fitFigures(a.Figures)
		}
		if list(fmt.Sprintf("history[%d].containers", i), len(a.Containers), v1alpha1.MaxActionContainers) {
			a.Containers = a.Containers[:v1alpha1.MaxActionContainers]
		}
		if list(fmt.Sprintf("history[%d].refusals", i), len(a.Refusals), v1alpha1.MaxActionRefusals) {
			a.Refusals = a.Refusals[:v1alpha1.MaxActionRefusals]
		}
	}
	if b := st.Breach; b != nil {
		if list("breach.figures", len(b.Figures), v1alpha1.MaxFigures) || slices.ContainsFunc(b.Figures, func(f string) bool { return len(f) > v1alpha1.MaxFigureLength }) {
			b.Figures = fitFigures(b.Figures)
		}
	}
	if r := st.Rollback; r != nil {
		str("rollback.reason", &r.Reason, v1alpha1.MaxReasonLength)
		str("rollback.message", &r.Message, v1alpha1.MaxRollbackMessageLength)
		if list("rollback.turns", len(r.Turns), v1alpha1.MaxTurns) {
			r.Turns = slices.Clone(r.Turns[len(r.Turns)-v1alpha1.MaxTurns:])
		}
		for i := range r.Turns {
			str(fmt.Sprintf("rollback.turns[%d].reason", i), &r.Turns[i].Reason, v1alpha1.MaxReasonLength)
			str(fmt.Sprintf("rollback.turns[%d].outcome", i), &r.Turns[i].Outcome, v1alpha1.MaxOutcomeLength)
		}
	}
	if ch := st.Change; ch != nil {
		if list("change.touched", len(ch.Touched), v1alpha1.MaxTouched) {
			var omitted int32
			ch.Touched, omitted = capTouched(ch.Touched)
			ch.TouchedOmitted += omitted
		}
		// A container without a restart or OOM baseline counts its
		// restarts and kills in full, and one without a throttling
		// baseline starts its window anew: cutting errs towards a
		// rollback, never towards a change left unwatched.
		if list("change.restartBaselines", len(ch.RestartBaselines), v1alpha1.MaxBaselines) {
			ch.RestartBaselines = ch.RestartBaselines[:v1alpha1.MaxBaselines]
		}
		if list("change.oomBaselines", len(ch.OOMBaselines), v1alpha1.MaxBaselines) {
			ch.OOMBaselines = ch.OOMBaselines[:v1alpha1.MaxBaselines]
		}
		if list("change.throttlingBaselines", len(ch.ThrottlingBaselines), v1alpha1.MaxBaselines) {
			ch.ThrottlingBaselines = ch.ThrottlingBaselines[:v1alpha1.MaxBaselines]
		}
	}
	return cut
}

// minimalStatus replaces the free text an outcome wrote (status.message,
// its conditions' messages, its action's message and figures, the
// rollback's message, the breach's figures) with a note that the
// apiserver refused it: what is left is the transition itself.
func minimalStatus(st *v1alpha1.RightsizingRecommendationStatus, o outcome, refused error) {
	note := fit("message left out: the apiserver refused the status write: "+refused.Error(), 512)
	if o.setReason {
		st.Message = note
	}
	for _, cond := range o.conditions {
		if c := meta.FindStatusCondition(st.Conditions, cond.Type); c != nil {
			c.Message = note
		}
	}
	if n := len(st.History); o.action != nil && n > 0 {
		st.History[n-1].Message, st.History[n-1].Figures = note, nil
	}
	if st.Rollback != nil && st.Rollback.Message != "" {
		st.Rollback.Message = note
	}
	if st.Breach != nil {
		st.Breach.Figures = fitFigures(st.Breach.Figures)
	}
	fitStatus(st)
}

// heldBack reports whether a refusal kept a value from going down, the
// refusals recorded as refused actions: the latches and upscale-only.
// MinChange is a change too small to make, not a value held back, and
// stays in the basis only.
func heldBack(r recommend.Reason) bool { return r != recommend.ReasonMinChange }

// basisRefusals reads the refusals a recommendation's basis annotation
// holds back (heldBack), at most v1alpha1.MaxActionRefusals, with their
// messages, and their key: what identifies the set (container, resource,
// field, reason and the value held), empty when there are none or the
// annotation cannot be read.
func basisRefusals(annotation string) (refusals []v1alpha1.Refusal, messages []string, key string) {
	if annotation == "" {
		return nil, nil, ""
	}
	b, err := v1alpha1.ParseRecommendationBasis(annotation)
	if err != nil {
		return nil, nil, ""
	}
	h := sha256.New()
	for _, c := range b.Containers {
		for _, f := range c.Refusals {
			if !heldBack(recommend.Reason(f.Reason)) {
				continue
			}
			fmt.Fprintf(h, "%s/%s/%s/%s/%d\n", c.Name, f.Resource, f.Field, f.Reason, f.Held)
			if len(refusals) == v1alpha1.MaxActionRefusals {
				continue
			}
			refusals = append(refusals, v1alpha1.Refusal{
				Container: c.Name, Resource: f.Resource, Field: f.Field, Reason: f.Reason,
				Asked: f.Asked, Held: f.Held, Observed: decimal(f.Observed), Threshold: decimal(f.Threshold), At: f.At,
			})
			messages = append(messages, c.Name+": "+f.Message)
		}
	}
	if len(refusals) == 0 {
		return nil, nil, ""
	}
	return refusals, messages, hex.EncodeToString(h.Sum(nil)[:16])
}

// decimal writes a refusal's figure as a decimal string: bytes and
// millicores whole, a ratio (kept as a float32 by the state) to float32's
// shortest digits; zero is no figure, the empty string.
func decimal(v float64) string {
	switch {
	case v == 0:
		return ""
	case v == math.Trunc(v) && math.Abs(v) < 1<<53:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', -1, 32)
}
