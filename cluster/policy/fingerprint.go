package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Fingerprint identifies a policy spec, for status.policy.fingerprint and
// status.change.policyFingerprint (docs/design.md section 2). It is the
// first 16 hex digits of the SHA-256 of the spec's canonical JSON after
// SetDefaults. A spec that did not change keeps its fingerprint, however
// it is written: its defaults spelled out or not, its durations as 60m or
// 1h, its sets reordered (kinds, selector expressions and their values).
// Any other change gives a new one.
func Fingerprint(spec v1alpha1.PolicySpec) string {
	s := spec.DeepCopy()
	s.SetDefaults()
	// The recommender's settings say what is recommended, not how a
	// change is guarded: changing them reopens no rollback state.
	s.Recommend = nil
	// Degraded spelled out at its defaults is the same as left out, which
	// keeps the fingerprints of the policies written before it existed.
	if d := s.Guardrails.Degraded; d != nil && !d.Disabled &&
		*d.RolledBack == v1alpha1.DefaultDegradedRolledBack && *d.Of == v1alpha1.DefaultDegradedOf {
		s.Guardrails.Degraded = nil
	}
	s.Selector.NamespaceSelector = canonicalSelector(s.Selector.NamespaceSelector)
	s.Selector.WorkloadSelector = canonicalSelector(s.Selector.WorkloadSelector)
	slices.Sort(s.Selector.Kinds)
	return digest(s)
}

// canonicalSelector sorts what Kubernetes treats as sets and folds an empty
// selector, which matches everything, into nil, which does too.
func canonicalSelector(s *metav1.LabelSelector) *metav1.LabelSelector {
	if s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0) {
		return nil
	}
	for i := range s.MatchExpressions {
		slices.Sort(s.MatchExpressions[i].Values)
	}
	slices.SortFunc(s.MatchExpressions, func(a, b metav1.LabelSelectorRequirement) int {
		return cmp.Or(
			cmp.Compare(a.Key, b.Key),
			cmp.Compare(a.Operator, b.Operator),
			cmp.Compare(strings.Join(a.Values, "\x00"), strings.Join(b.Values, "\x00")),
		)
	})
	return s
}

// ValueFingerprint identifies a set of recommended values, for
// status.change.valueFingerprint and status.rolledBackFingerprints. The
// same values are not applied again after a rollback (docs/design.md
// section 4). It does not depend on the order of the containers, nor on
// how a quantity is spelled: "1000m" and "1", "1Gi" and "1073741824" are
// the same. But an absent value differs from a zero one, since absent
// leaves the workload's own value in place.
func ValueFingerprint(containers []v1alpha1.ContainerResources) string {
	type values struct {
		CPU    string `json:"cpu,omitempty"`
		Memory string `json:"memory,omitempty"`
	}
	type container struct {
		Name     string  `json:"name"`
		Requests *values `json:"requests,omitempty"`
		Limits   *values `json:"limits,omitempty"`
	}
	canon := func(v *v1alpha1.ResourceValues) *values {
		if v == nil || (v.CPU == nil && v.Memory == nil) {
			return nil
		}
		return &values{CPU: canonicalQuantity(v.CPU), Memory: canonicalQuantity(v.Memory)}
	}
	out := make([]container, 0, len(containers))
	for _, c := range containers {
		out = append(out, container{Name: c.Name, Requests: canon(c.Requests), Limits: canon(c.Limits)})
	}
	slices.SortStableFunc(out, func(a, b container) int { return cmp.Compare(a.Name, b.Name) })
	return digest(out)
}

// SameValues reports whether a and b have the same ValueFingerprint,
// without making either. The recommender compares what it would write
// with what its recommendation asks for, for every workload due.
// Containers pair by name (duplicates in their order), quantities by
// value, and an absent value differs from a zero one.
func SameValues(a, b []v1alpha1.ContainerResources) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		// a[i] is the k-th container of its name in a: it pairs with the
		// k-th of that name in b, as the stable sort pairs them.
		k := 0
		for j := range i {
			if a[j].Name == a[i].Name {
				k++
			}
		}
		var match *v1alpha1.ContainerResources
		for j := range b {
			if b[j].Name != a[i].Name {
				continue
			}
			if k == 0 {
				match = &b[j]
				break
			}
			k--
		}
		if match == nil || !sameResourceValues(a[i].Requests, match.Requests) || !sameResourceValues(a[i].Limits, match.Limits) {
			return false
		}
	}
	return true
}

// sameResourceValues is ValueFingerprint's equality of two values: none
// (nil, or neither CPU nor memory) equals only none.
func sameResourceValues(x, y *v1alpha1.ResourceValues) bool {
	xNone := x == nil || x.CPU == nil && x.Memory == nil
	yNone := y == nil || y.CPU == nil && y.Memory == nil
	if xNone || yNone {
		return xNone == yNone
	}
	return sameQuantity(x.CPU, y.CPU) && sameQuantity(x.Memory, y.Memory)
}

// sameQuantity compares two quantities by value; absent equals only absent.
func sameQuantity(p, q *resource.Quantity) bool {
	if p == nil || q == nil {
		return p == q
	}
	return p.Cmp(*q) == 0
}

// canonicalQuantity writes q's exact value as a plain decimal without
// trailing zeros ("1", "0.25", "1073741824"); nil, for absent, is "".
func canonicalQuantity(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	c := q.DeepCopy() // AsDec converts in place: work on a copy
	d := c.AsDec()
	unscaled := new(big.Int).Set(d.UnscaledBig())
	scale := int64(d.Scale()) // value = unscaled × 10^-scale
	ten := big.NewInt(10)
	if unscaled.Sign() == 0 {
		return "0"
	}
	for rem := new(big.Int); ; {
		q, r := new(big.Int).QuoRem(unscaled, ten, rem)
		if r.Sign() != 0 {
			break
		}
		unscaled, scale = q, scale-1
	}
	if scale <= 0 {
		return unscaled.Mul(unscaled, new(big.Int).Exp(ten, big.NewInt(-scale), nil)).String()
	}
	neg := unscaled.Sign() < 0
	digits := new(big.Int).Abs(unscaled).String()
	if int64(len(digits)) <= scale {
		digits = strings.Repeat("0", int(scale)-len(digits)+1) + digits
	}
	cut := len(digits) - int(scale)
	s := digits[:cut] + "." + digits[cut:]
	if neg {
		s = "-" + s
	}
	return s
}

// digest is the first 16 hex digits of the SHA-256 of v's JSON.
func digest(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// The values hashed here are plain structs of strings, numbers and
		// quantities, which always marshal.
		panic("policy: fingerprint: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}
