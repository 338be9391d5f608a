package recommender

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// TestSameRefusalsReadsTheRefusalsAnnotation: the refusals are compared
// through the refusals annotation, which the leader's cache keeps. A
// recommendation written before it, with its basis alone, is not the
// same, so it is written once more, with it.
func TestSameRefusalsReadsTheRefusalsAnnotation(t *testing.T) {
	basis := v1alpha1.RecommendationBasis{Containers: []v1alpha1.ContainerBasis{{Name: "app",
		Refusals: []v1alpha1.RefusalBasis{{Resource: v1alpha1.ResourceMemory, Field: "request", Reason: "OOMKill", Held: 1 << 28}}}}}
	raw, err := basis.Encode()
	assert.NoError(t, err)
	none := v1alpha1.RecommendationBasis{Containers: []v1alpha1.ContainerBasis{{Name: "app"}}}

	summed := map[string]string{v1alpha1.RecommendationRefusalsAnnotation: "app/memory/request/OOMKill/268435456"}
	assert.True(t, sameRefusals(summed, basis.RefusalKeys()))
	assert.False(t, sameRefusals(summed, none.RefusalKeys()), "a refusal that ended")
	held := basis
	held.Containers = []v1alpha1.ContainerBasis{{Name: "app",
		Refusals: []v1alpha1.RefusalBasis{{Resource: v1alpha1.ResourceMemory, Field: "request", Reason: "OOMKill", Held: 1 << 29}}}}
	assert.False(t, sameRefusals(summed, held.RefusalKeys()), "another value held")
	assert.True(t, sameRefusals(map[string]string{v1alpha1.RecommendationRefusalsAnnotation: ""}, none.RefusalKeys()), "none, and none recorded")

	assert.False(t, sameRefusals(map[string]string{v1alpha1.RecommendationBasisAnnotation: raw}, basis.RefusalKeys()),
		"written before the refusals annotation: written again, with it")
	assert.False(t, sameRefusals(nil, none.RefusalKeys()), "no annotations at all")
}
