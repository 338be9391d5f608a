package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RightsizingCheckpoint is the recommender's saved history of one
// workload's containers: the decaying usage distributions and latches of
// cluster/recommend, so that a new leader resumes from them instead of
// starting from nothing (docs/recommender.md, "Checkpoints in the
// cluster"; VPA's VerticalPodAutoscalerCheckpoint). Only the recommender
// writes it; it lives in the workload's namespace, is named after the
// workload and is owned by it.
//
// There is no status subresource: the object is a record the recommender
// writes whole, in one request, and nothing reconciles it (as VPA's
// checkpoints).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=rckpt,categories=kerf
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.targetRef.name`,description="The workload whose history this is"
// +kubebuilder:printcolumn:name="Containers",type=integer,JSONPath=`.status.containerCount`,description="Containers checkpointed"
// +kubebuilder:printcolumn:name="Written",type=date,JSONPath=`.status.writtenAt`,description="When the recommender last wrote it"
type RightsizingCheckpoint struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the workload.
	Spec RightsizingCheckpointSpec `json:"spec"`
	// Status is the saved history.
	// +optional
	Status RightsizingCheckpointStatus `json:"status,omitempty"`
}

// RightsizingCheckpointList is a list of RightsizingCheckpoints.
// +kubebuilder:object:root=true
type RightsizingCheckpointList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the checkpoints.
	Items []RightsizingCheckpoint `json:"items"`
}

// RightsizingCheckpointSpec names the workload a checkpoint is of.
type RightsizingCheckpointSpec struct {
	// TargetRef is the workload, in the checkpoint's namespace.
	TargetRef TargetRef `json:"targetRef"`
}

// MaxCheckpointContainers bounds the containers of one checkpoint; with
// each container's data at most MaxContainerCheckpointBytes the object
// stays under about 360 KiB, well within etcd's 1.5 MiB.
const MaxCheckpointContainers = 64

// MaxContainerCheckpointBytes bounds one container's checkpoint data
// (cluster/recommend's MaxCheckpointBytes).
const MaxContainerCheckpointBytes = 4096

// RightsizingCheckpointStatus is the saved history of a workload's
// containers.
type RightsizingCheckpointStatus struct {
	// WrittenAt is when the recommender last wrote the checkpoint.
	// +optional
	WrittenAt *metav1.Time `json:"writtenAt,omitempty"`
	// ContainerCount is the number of containers, for kubectl's column.
	// +optional
	ContainerCount int32 `json:"containerCount,omitempty"`
	// Containers are the saved states, one per container name.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Containers []ContainerCheckpoint `json:"containers,omitempty"`
}

// ContainerCheckpoint is one container's saved state.
type ContainerCheckpoint struct {
	// Name is the container's name in the pod template.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Version is the version of the checkpoint form
	// (cluster/recommend.CheckpointVersion) the data was written in.
	// +kubebuilder:validation:Minimum=1
	Version int32 `json:"version"`
	// Fingerprint is the hex FNV-1a fingerprint of the model parameters
	// that shape the state (buckets, half-lives, intervals): a recommender
	// with other parameters cannot read the data.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}$`
	Fingerprint string `json:"fingerprint"`
	// Data is the checkpoint (cluster/recommend's binary form), base64 in
	// JSON, at most 4096 bytes.
	// +kubebuilder:validation:MaxLength=5464
	Data []byte `json:"data"`
	// WrittenAt is when this container's state was written.
	WrittenAt metav1.Time `json:"writtenAt"`
}
