// Package v1alpha1 holds Kerf's custom resources, group kerf.dev, version
// v1alpha1 (docs/design.md section 2): RightsizingRecommendation, the change
// a recommender asks for and the state of its health watch and rollback, and
// RightsizingPolicy / ClusterRightsizingPolicy, which select workloads and
// set the guardrails; RightsizingCheckpoint, the recommender's saved
// history of a workload.
//
// The kubebuilder markers here generate zz_generated.deepcopy.go and the CRDs
// in manifests/crd (`make generate`); the schema and its CEL rules are what
// make the apiserver refuse bad objects with a message naming the field.
//
// +kubebuilder:object:generate=true
// +groupName=kerf.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is Kerf's API group.
const Group = "kerf.dev"

var (
	// GroupVersion is the group and version of the types in this package.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&RightsizingRecommendation{}, &RightsizingRecommendationList{},
		&RightsizingPolicy{}, &RightsizingPolicyList{},
		&ClusterRightsizingPolicy{}, &ClusterRightsizingPolicyList{},
		&RollbackPolicy{}, &RollbackPolicyList{},
		&ClusterRollbackPolicy{}, &ClusterRollbackPolicyList{},
		&RightsizingCheckpoint{}, &RightsizingCheckpointList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
