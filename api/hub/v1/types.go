// Package hubv1 is the JSON wire protocol of kerf-hub (docs/hub.md,
// docs/design.md section 7b): the batches of actions a leader writes with
// POST /v1/clusters/{cluster}/actions, and the answers of the hub's read
// API. An action on the wire is the leader's audit entry (api/audit/v1)
// plus its idempotency key, its sequence number in its workload and the
// recommendation's phase after it; the read API answers with the same
// entries plus the cluster.
package hubv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Limits of the write protocol; a batch beyond them is refused whole.
const (
	// MaxBatchActions is the most actions one batch may carry.
	MaxBatchActions = 1000
	// DefaultMaxBodyBytes is the largest request body the hub reads by
	// default (kerf-hub --max-body-bytes).
	DefaultMaxBodyBytes = 4 << 20
	// MaxKeyLength is the longest idempotency key accepted.
	MaxKeyLength = 128
)

// Batch is the body of POST /v1/clusters/{cluster}/actions: actions of one
// cluster, in the order the leader recorded them, and the leader's report on
// itself. The hub stores the whole batch in one transaction or none of it.
// An empty batch is a heartbeat: it only updates the cluster's contact and
// report.
type Batch struct {
	// Cluster is the writing cluster's registered name; it must equal the
	// path's {cluster} and the token's cluster.
	Cluster string `json:"cluster"`
	// Leader is the leader's report on itself, shown by GET /v1/clusters.
	Leader LeaderReport `json:"leader"`
	// Actions are the actions to store, at most MaxBatchActions. Within
	// one workload their seq must increase.
	Actions []Action `json:"actions"`
}

// LeaderReport is what the writing leader says about itself and its
// cluster at the time of the batch.
type LeaderReport struct {
	// Identity names the leader process (its pod name).
	Identity string `json:"identity"`
	// AgentsConnected is how many node agents stream to the leader.
	AgentsConnected int `json:"agentsConnected"`
	// Undelivered is how many actions the leader still holds for the hub,
	// this batch's included.
	Undelivered int64 `json:"undelivered"`
	// LagSeconds is the age of the oldest undelivered action, 0 when none.
	LagSeconds float64 `json:"lagSeconds"`
}

// Action is one action the leader recorded: its audit entry, flattened,
// with what delivery needs.
type Action struct {
	// Key is the action's idempotency key, unique within its cluster, at
	// most MaxKeyLength bytes. A key the hub already stored with the same
	// entry is acknowledged as a duplicate and not stored again (its seq
	// and phase are not compared); the same key with another entry is
	// refused (409).
	Key string `json:"key"`
	// Seq is the action's position among its workload's actions, from 1,
	// increasing; among actions of the same time it orders them.
	Seq int64 `json:"seq"`
	// Phase is the recommendation's phase after the action; empty if the
	// leader does not know it.
	Phase v1alpha1.Phase `json:"phase"`
	auditv1.Entry
}

// ActionStatus says what the hub did with one action of a batch.
type ActionStatus string

// The outcomes of an action in a batch.
const (
	// StatusStored means the action is new and now stored.
	StatusStored ActionStatus = "stored"
	// StatusDuplicate means the hub already had it (a replay); nothing
	// changed.
	StatusDuplicate ActionStatus = "duplicate"
)

// BatchResult is the answer of a successful write (200): every action of
// the batch is durably in the hub, stored now or before.
type BatchResult struct {
	// Stored counts the actions stored by this batch.
	Stored int `json:"stored"`
	// Duplicates counts the actions the hub already had.
	Duplicates int `json:"duplicates"`
	// Actions say, in the batch's order, what happened to each action.
	Actions []ActionResult `json:"actions"`
}

// ActionResult is the outcome for one action's key.
type ActionResult struct {
	// Key is the action's idempotency key.
	Key string `json:"key"`
	// Status is stored or duplicate.
	Status ActionStatus `json:"status"`
}

// Entry is an action as the hub's read API shows it: the leader's audit
// entry plus the cluster and the workload's id.
type Entry struct {
	// Cluster is the cluster the action happened in.
	Cluster string `json:"cluster"`
	// WorkloadID is the workload's id for GET /v1/workloads/{id}/history.
	WorkloadID string `json:"workloadId"`
	// Seq is the action's position among its workload's actions.
	Seq int64 `json:"seq"`
	auditv1.Entry
}

// AuditPage is the answer of GET /v1/audit.
type AuditPage struct {
	// Items are the actions, newest first.
	Items []Entry `json:"items"`
	// Continue fetches the next page when passed as the continue query
	// parameter; empty on the last page.
	Continue string `json:"continue"`
}

// Workload is one workload the hub has actions of.
type Workload struct {
	// ID is the workload's stable opaque id, the same on every hub replica
	// and across restarts.
	ID string `json:"id"`
	// Cluster is the workload's cluster.
	Cluster string `json:"cluster"`
	// Namespace is the workload's namespace.
	Namespace string `json:"namespace"`
	// Kind is Deployment, StatefulSet or DaemonSet.
	Kind v1alpha1.WorkloadKind `json:"kind"`
	// Name is the workload's name.
	Name string `json:"name"`
	// Phase is its recommendation's phase after the last action.
	Phase v1alpha1.Phase `json:"phase"`
	// LastAction is its newest action.
	LastAction Entry `json:"lastAction"`
}

// WorkloadPage is the answer of GET /v1/workloads.
type WorkloadPage struct {
	// Items are the workloads by cluster, namespace, kind and name.
	Items []Workload `json:"items"`
	// Continue fetches the next page; empty on the last page.
	Continue string `json:"continue"`
}

// WorkloadHistory is the answer of GET /v1/workloads/{id}/history: the
// workload and a page of its actions, newest first.
type WorkloadHistory struct {
	// Workload is the workload and where it stands.
	Workload Workload `json:"workload"`
	// Items are its actions, newest first.
	Items []Entry `json:"items"`
	// Continue fetches the next page; empty on the last page.
	Continue string `json:"continue"`
}

// Cluster is one registered cluster as GET /v1/clusters shows it.
type Cluster struct {
	// Name is the cluster's registered name.
	Name string `json:"name"`
	// RegisteredAt is when it was registered.
	RegisteredAt metav1.Time `json:"registeredAt"`
	// LastContact is the time of its last accepted write; null if it
	// never wrote.
	LastContact *metav1.Time `json:"lastContact"`
	// Leader is the report of its last accepted write; null if it never
	// wrote.
	Leader *LeaderReport `json:"leader"`
	// RemovedAt is when `kerf-hub clusters remove` removed the cluster,
	// keeping its actions; absent for a cluster that writes.
	RemovedAt *metav1.Time `json:"removedAt,omitempty"`
}

// ClusterList is the answer of GET /v1/clusters.
type ClusterList struct {
	// Items are the clusters by name.
	Items []Cluster `json:"items"`
}

// MaxSavingsNamespaces is the most namespaces one savings report may
// carry; the hub refuses a larger report whole, naming the bound.
const MaxSavingsNamespaces = 2000

// SavingsReport is the body of PUT /v1/clusters/{cluster}/savings: the
// leader's per-namespace savings figures (cluster/savings.Summarize), all
// of them. The hub replaces what it stored for the cluster with them, so
// a namespace absent from the report is no longer shown. A report older
// than the one stored (a leader that lost its election) changes nothing.
type SavingsReport struct {
	// Cluster is the writing cluster's registered name; it must equal the
	// path's {cluster} and the token's cluster.
	Cluster string `json:"cluster"`
	// Time is when the leader computed the figures.
	Time metav1.Time `json:"time"`
	// Namespaces are the figures per namespace, at most
	// MaxSavingsNamespaces, each namespace once.
	Namespaces []NamespaceSavings `json:"namespaces"`
}

// NamespaceSavings is one namespace's requests as cluster/savings.Namespace
// defines them. Rollbacks and OOM kills are left out: the hub counts them
// from the actions it stores, for any window.
type NamespaceSavings struct {
	// Namespace is the namespace's name.
	Namespace string `json:"namespace"`
	// Workloads counts the namespace's recommendations.
	Workloads int `json:"workloads"`
	// Manifest, InForce and Recommended are the summed requests of one
	// pod per workload.
	Manifest    Amounts `json:"manifest"`
	InForce     Amounts `json:"inForce"`
	Recommended Amounts `json:"recommended"`
	// Unrecorded counts the container requests left out of the sums.
	Unrecorded int `json:"unrecorded"`
}

// Amounts are CPU and memory requests: millicores and bytes.
type Amounts struct {
	// CPUMillis is CPU in millicores.
	CPUMillis int64 `json:"cpuMillis"`
	// MemoryBytes is memory in bytes.
	MemoryBytes int64 `json:"memoryBytes"`
}

// SavingsResult is the answer of a successful savings report (200).
type SavingsResult struct {
	// Stored counts the namespaces stored; 0 when the report was
	// superseded.
	Stored int `json:"stored"`
	// Superseded says the hub holds a newer report of the cluster and
	// kept it.
	Superseded bool `json:"superseded,omitempty"`
}
