package rightsizing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/recommend"
)

// recordRefusals records the values the recommender held back, as its
// basis annotation says, when what is refused or why changed. It records
// a refused action with the figures, and a Normal Refused Event on the
// recommendation and its workload. Only the recommender's own
// recommendations carry a basis.
//
// A set is news only when one of its refusals is in none of the refused
// actions recorded since the last change, applied or rolled back. A
// refusal is its container, resource, field, reason and the value held.
// Refusals that end, or come and go between passes, are not recorded
// again. So status.history, which is bounded, and the hub keep the
// actions that matter. status.recordedRefusals keeps the last set's key,
// so a pass that finds it again reads no history.
//
// What is refused it reads from the refusals annotation, which the
// leader's cache keeps. The figures of news it reads from the basis on
// the apiserver (Reconciler.Live): the cache drops the basis beside that
// annotation. A recommendation written before it has its basis alone.
func (c *reconcileContext) recordRefusals(ctx context.Context) error {
	rsr := c.rsr
	if rsr.Labels[v1alpha1.RecommendedByLabel] != v1alpha1.RecommendedByKerf {
		return nil
	}
	short, summed := rsr.Annotations[v1alpha1.RecommendationRefusalsAnnotation]
	var refusals []v1alpha1.Refusal
	var messages []string
	var key string
	if summed {
		keys, err := v1alpha1.ParseRefusalKeys(short)
		if err != nil {
			return nil
		}
		refusals, key = heldBackKeys(keys)
	} else {
		refusals, messages, key = basisRefusals(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation])
	}
	if key == "" || key == rsr.Status.RecordedRefusals || refusalsRecorded(rsr.Status.History, refusals) {
		return nil
	}
	if summed {
		// News: its figures and messages are in the basis, which the
		// leader's cache does not keep beside the refusals annotation.
		var live v1alpha1.RightsizingRecommendation
		if err := c.r.Live.Get(ctx, client.ObjectKeyFromObject(rsr), &live); err != nil {
			return fmt.Errorf("read the basis of %s/%s: %w", rsr.Namespace, rsr.Name, err)
		}
		if live.Annotations[v1alpha1.RecommendationRefusalsAnnotation] != short {
			return nil // the recommender wrote since; its write brings another pass
		}
		refusals, messages, key = basisRefusals(live.Annotations[v1alpha1.RecommendationBasisAnnotation])
		if key == "" {
			return nil
		}
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

// heldBack reports whether a refusal kept a value from going down, the
// refusals recorded as refused actions: the latches and upscale-only.
// MinChange is a change too small to make, not a value held back, and
// stays in the basis only.
func heldBack(r recommend.Reason) bool { return r != recommend.ReasonMinChange }

// basisRefusals reads the refusals a recommendation's basis annotation
// holds back (heldBack), at most v1alpha1.MaxActionRefusals, with their
// figures and messages, and their key (refusalsKey). The key is empty
// when there are none or the annotation cannot be read.
func basisRefusals(annotation string) (refusals []v1alpha1.Refusal, messages []string, key string) {
	if annotation == "" {
		return nil, nil, ""
	}
	b, err := v1alpha1.ParseRecommendationBasis(annotation)
	if err != nil {
		return nil, nil, ""
	}
	var keys []v1alpha1.RefusalKey
	for _, c := range b.Containers {
		for _, f := range c.Refusals {
			if !heldBack(recommend.Reason(f.Reason)) {
				continue
			}
			keys = append(keys, v1alpha1.RefusalKey{Container: c.Name, Resource: f.Resource, Field: f.Field, Reason: f.Reason, Held: f.Held})
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
	return refusals, messages, refusalsKey(keys)
}

// heldBackKeys is basisRefusals from the refusals annotation's keys: the
// refusals without their figures, and their key.
func heldBackKeys(all []v1alpha1.RefusalKey) (refusals []v1alpha1.Refusal, key string) {
	var keys []v1alpha1.RefusalKey
	for _, k := range all {
		if !heldBack(recommend.Reason(k.Reason)) {
			continue
		}
		keys = append(keys, k)
		if len(refusals) < v1alpha1.MaxActionRefusals {
			refusals = append(refusals, v1alpha1.Refusal{Container: k.Container, Resource: k.Resource, Field: k.Field, Reason: k.Reason, Held: k.Held})
		}
	}
	return refusals, refusalsKey(keys)
}

// refusalsKey identifies a set of refusals held back: a hash of each
// one's container, resource, field, reason and the value held. It is
// empty for none. status.recordedRefusals keeps it.
func refusalsKey(keys []v1alpha1.RefusalKey) string {
	if len(keys) == 0 {
		return ""
	}
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s\n", k)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// decimal writes a refusal's figure as a decimal string. Bytes and
// millicores are whole. A ratio, which the state keeps as a float32,
// gets float32's shortest digits. Zero is no figure: the empty string.
func decimal(v float64) string {
	switch {
	case v == 0:
		return ""
	case v == math.Trunc(v) && math.Abs(v) < 1<<53:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', -1, 32)
}
