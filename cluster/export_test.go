package cluster

import (
	"github.com/kerf-dev/kerf/cluster/fence"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LeaderReads is leaderReads, for the external tests.
var LeaderReads = leaderReads

// RollbackWriter is l's rollbacks' client.
func RollbackWriter(l *Leader) client.Client { return l.rollbackWriter }

// FenceOf is l's write fence.
func FenceOf(l *Leader) *fence.Fence { return l.fence }

// Synced reports whether l's caches are synced (it is ready).
func Synced(l *Leader) bool { return l.synced.Load() }
