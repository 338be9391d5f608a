// Package cachestore is the leader's cache: what it keeps of each object,
// its field indexes, views of stored objects and its sizes metric.
//
// The cache is most of the leader's memory (docs/performance.md, "Where
// the leader's memory goes"). This package keeps it small:
//   - Transform runs on each object before its informer stores it. It
//     drops the managed fields, which nothing in Kerf reads. It keeps a
//     pod, a ReplicaSet and a Deployment as types of its own, holding
//     only what Kerf reads. It shares what many objects hold alike:
//     resource lists, labels, annotations, a recommendation's strings and
//     amounts.
//   - An index keeps each object under one key per value: the value's
//     bucket, a hash of it. A namespace has a fixed number of buckets (the
//     cluster, for a ClusterWide index). controller-runtime's IndexField
//     keys every object twice and keeps a set of keys per value: a map an
//     object for nearly unique values such as UIDs.
//   - Cache answers a list by such a field exactly. It reads the value's
//     bucket from the informer's own objects and keeps those whose own
//     value was asked, before it copies any. Readers still call
//     client.List with client.MatchingFields.
//   - A read that only reads (client.UnsafeDisableDeepCopy) gets a view:
//     the API type, sharing what the stored object holds. The hot paths
//     read the stored objects themselves (Cache.Lookup, Stored,
//     Recommendations).
//   - A Get of an object's metadata (metav1.PartialObjectMetadata) of
//     those kinds, StatefulSets and DaemonSets reads their typed
//     informers, not a metadata informer of its own.
//   - ObjectCounts is kerf_leader_cached_objects: how many objects each
//     informer holds, by kind.
//
// Readers never see the stored types. A copying read returns the API type
// it asked for, holding what was kept. The leader reads each index one
// way: a workload's pods, ReplicaSets and recommendations in its
// namespace, a pod by UID across all namespaces.
//
// It reads what the manager's informers list and watch. It writes nothing
// to the apiserver. docs/leader.md, "Reading from the cache", has the
// design; docs/performance.md has what each part saved.
package cachestore
