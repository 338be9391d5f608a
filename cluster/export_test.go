package cluster

import "sigs.k8s.io/controller-runtime/pkg/client"

// LeaderReads is leaderReads, for the external tests.
var LeaderReads = leaderReads

// RollbackWriter is l's rollbacks' client.
func RollbackWriter(l *Leader) client.Client { return l.rollbackWriter }
