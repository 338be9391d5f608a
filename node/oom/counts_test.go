package oom

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCountsReconcileNeverLosesAKill(t *testing.T) {
	const cg = "/kubepods/burstable/pod1/abc"
	tests := []struct {
		name  string
		steps func(c *Counts)
		want  uint64
	}{
		{"events only: cgroup gone before its file was read", func(c *Counts) {
			c.Observe(Kill{Cgroup: cg, Count: 1})
			c.Observe(Kill{Cgroup: cg, Count: 1})
		}, 2},
		{"file only: every event dropped", func(c *Counts) {
			c.Reconcile(cg, 3)
		}, 3},
		{"kills before the agent started are in the file and counted once", func(c *Counts) {
			c.Reconcile(cg, 2)
			c.Observe(Kill{Cgroup: cg, Count: 1})
			c.Reconcile(cg, 3)
		}, 3},
		{"an event the file has not caught up with yet counts", func(c *Counts) {
			c.Reconcile(cg, 2)
			c.Observe(Kill{Cgroup: cg, Count: 1})
		}, 3},
		{"a dropped event is made up by the file", func(c *Counts) {
			c.Reconcile(cg, 0)
			c.Observe(Kill{Cgroup: cg, Count: 1})
			c.Reconcile(cg, 2)
		}, 2},
		{"a stale file reading never lowers the count", func(c *Counts) {
			c.Reconcile(cg, 4)
			c.Reconcile(cg, 1)
		}, 4},
		{"a cgroup-file report of several kills counts each", func(c *Counts) {
			c.Observe(Kill{Cgroup: cg, Count: 3})
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCounts()
			tt.steps(c)
			assert.Equal(t, tt.want, c.Count(cg))
		})
	}
}

func TestCountsIgnoresKillsWithoutACgroup(t *testing.T) {
	c := NewCounts()
	c.Observe(Kill{PID: 12, Count: 1})
	assert.Zero(t, c.Count(""))
	c.Forget("/x")
	assert.Zero(t, c.Count("/x"))
}

func TestCountsRetainForgetsUntrackedCgroups(t *testing.T) {
	c := NewCounts()
	c.Observe(Kill{Cgroup: "/a", Count: 1})
	c.Reconcile("/b", 4)
	c.Retain(func(p string) bool { return p == "/b" })
	if got := c.Count("/a"); got != 0 {
		t.Errorf("untracked /a kept: count %d", got)
	}
	if got := c.Count("/b"); got != 4 {
		t.Errorf("/b: count %d, want 4", got)
	}
}
