package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RecommendationBasis is the JSON of RecommendationBasisAnnotation: what
// Kerf's recommender made a recommendation from, and the values it held
// back, with why (docs/recommender.md).
//
// The recommender writes it; the workload page and `kubectl kerf explain`
// read it. It is no CRD field, so the apiserver does not check it:
// annotations already in clusters parse only while these JSON names and
// types stay as they are.
//
// +kubebuilder:object:generate=false
type RecommendationBasis struct {
	// MadeAt is when the values were computed.
	MadeAt time.Time `json:"madeAt"`
	// Policy is the policy whose spec.recommend the values follow, as
	// Kind/name.
	Policy string `json:"policy"`
	// CPUPercentile, MemoryPercentile and SafetyMargin are the estimators'
	// parameters, as fractions.
	CPUPercentile    float64 `json:"cpuPercentile"`
	MemoryPercentile float64 `json:"memoryPercentile"`
	SafetyMargin     float64 `json:"safetyMargin"`
	// Containers are the figures per container.
	Containers []ContainerBasis `json:"containers"`
	// Source is where the targets came from: Kerf, or VPA with the
	// VerticalPodAutoscaler's name and updateMode.
	Source        RecommendSource `json:"source,omitempty"`
	VPA           string          `json:"vpa,omitempty"`
	VPAUpdateMode string          `json:"vpaUpdateMode,omitempty"`
}

// ContainerBasis is one container's figures in a RecommendationBasis.
//
// +kubebuilder:object:generate=false
type ContainerBasis struct {
	// Name is the container's name.
	Name string `json:"name"`
	// Samples, History and Confidence are the usage history's.
	Samples    uint32  `json:"samples"`
	History    string  `json:"history"`
	Confidence float64 `json:"confidence"`
	// TargetCPUMilli and TargetMemoryBytes are the estimate before the
	// latches and guards.
	TargetCPUMilli    int64 `json:"targetCPUMilli"`
	TargetMemoryBytes int64 `json:"targetMemoryBytes"`
	// Refusals are the values held back, with why.
	Refusals []RefusalBasis `json:"refusals,omitempty"`
	// Lower and Upper are the estimate's (or the VPA's) bounds; nil when
	// unset.
	Lower *BoundBasis `json:"lower,omitempty"`
	Upper *BoundBasis `json:"upper,omitempty"`
}

// RefusalBasis is one value the recommender held back: the figures of
// cluster/recommend's Refusal and its message.
//
// +kubebuilder:object:generate=false
type RefusalBasis struct {
	// Resource is cpu or memory.
	Resource ResourceName `json:"resource"`
	// Field is request or limit.
	Field string `json:"field"`
	// Reason is the latch or guard that held, such as OOMKill.
	Reason string `json:"reason"`
	// Asked is what the estimator asked for and Held what was recommended
	// instead, in millicores or bytes.
	Asked int64 `json:"asked"`
	Held  int64 `json:"held"`
	// Observed is the figure behind the reason; Threshold is what it was
	// held against.
	Observed  float64 `json:"observed"`
	Threshold float64 `json:"threshold"`
	// At is when the OOM kill happened, or when the watched change was
	// applied; nil when there is no such time.
	At *metav1.Time `json:"at,omitempty"`
	// Message says the same for people.
	Message string `json:"message"`
}

// BoundBasis is a bound of an estimate, in millicores and bytes.
//
// +kubebuilder:object:generate=false
type BoundBasis struct {
	CPUMilli    int64 `json:"cpuMilli,omitempty"`
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
}

// RefusalKey is one refusal of a basis in short: its container, resource,
// field and reason, and the value held.
//
// +kubebuilder:object:generate=false
type RefusalKey struct {
	Container string
	Resource  ResourceName
	Field     string
	Reason    string
	Held      int64
}

// String writes k as container/resource/field/reason/held.
func (k RefusalKey) String() string {
	return k.Container + "/" + string(k.Resource) + "/" + k.Field + "/" + k.Reason + "/" + strconv.FormatInt(k.Held, 10)
}

// RefusalKeys is the value of RecommendationRefusalsAnnotation: the
// basis's refusals in their order, each a RefusalKey, separated by
// commas; empty for none. No name in it holds a slash or a comma: a
// container's name is a DNS label, the rest are Kerf's words.
func (b *RecommendationBasis) RefusalKeys() string {
	var out strings.Builder
	for _, c := range b.Containers {
		for _, f := range c.Refusals {
			if out.Len() > 0 {
				out.WriteByte(',')
			}
			out.WriteString(RefusalKey{Container: c.Name, Resource: f.Resource, Field: f.Field, Reason: f.Reason, Held: f.Held}.String())
		}
	}
	return out.String()
}

// ParseRefusalKeys reads the value of RecommendationRefusalsAnnotation.
// An error names the annotation and the key at fault.
func ParseRefusalKeys(annotation string) ([]RefusalKey, error) {
	if annotation == "" {
		return nil, nil
	}
	var out []RefusalKey
	for i, s := range strings.Split(annotation, ",") {
		parts := strings.Split(s, "/")
		if len(parts) != 5 {
			return nil, fmt.Errorf("annotation %s: key %d %q: want container/resource/field/reason/held", RecommendationRefusalsAnnotation, i, s)
		}
		held, err := strconv.ParseInt(parts[4], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: key %d %q: held: %w", RecommendationRefusalsAnnotation, i, s, err)
		}
		out = append(out, RefusalKey{Container: parts[0], Resource: ResourceName(parts[1]), Field: parts[2], Reason: parts[3], Held: held})
	}
	return out, nil
}

// Encode writes b as the value of RecommendationBasisAnnotation.
func (b *RecommendationBasis) Encode() (string, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return "", fmt.Errorf("annotation %s: %w", RecommendationBasisAnnotation, err)
	}
	return string(raw), nil
}

// ParseRecommendationBasis reads the value of RecommendationBasisAnnotation.
// Unknown fields are ignored. An error names the annotation and, when
// the JSON is well formed, the field at fault.
func ParseRecommendationBasis(annotation string) (*RecommendationBasis, error) {
	var b RecommendationBasis
	err := json.Unmarshal([]byte(annotation), &b)
	if err == nil {
		return &b, nil
	}
	var typeErr *json.UnmarshalTypeError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return nil, fmt.Errorf("annotation %s: field %s: a JSON %s, want %s", RecommendationBasisAnnotation, typeErr.Field, typeErr.Value, typeErr.Type)
	case errors.As(err, &typeErr):
		return nil, fmt.Errorf("annotation %s: a JSON %s, want an object", RecommendationBasisAnnotation, typeErr.Value)
	case errors.As(err, &timeErr):
		// encoding/json does not say which of the two times failed.
		return nil, fmt.Errorf("annotation %s: field madeAt or containers.refusals.at: %w", RecommendationBasisAnnotation, err)
	}
	return nil, fmt.Errorf("annotation %s: %w", RecommendationBasisAnnotation, err)
}
