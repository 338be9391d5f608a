package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
)

// The endpoint serves cgroup.ReadLimits (tested in cgroup/ on fixture
// trees of both versions) from --cgroup-root: testdata/cgroup-v2 is a
// container's cgroup in its own namespace on v2 (96Mi, 500m, the weight of
// a 50m request, OOM-killed as a group); testdata/cgroup-v1-no-shares a v1
// one that lacks cpu/cpu.shares.

func TestLimitsEndpointServesTheCgroupUnderCgroupRoot(t *testing.T) {
	p := start(t, "--cgroup-root", filepath.Join("testdata", "cgroup-v2"))
	resp, err := http.Get(p.url + "/limits")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got cgroup.Limits
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	assert.Equal(t, cgroup.Limits{Version: 2, MemoryBytes: 96 << 20, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUWeight: 2, MemoryOOMGroup: true}, got)
}

func TestLimitsEndpointAnswers500NamingTheFile(t *testing.T) {
	p := start(t, "--cgroup-root", filepath.Join("testdata", "cgroup-v1-no-shares"))
	resp, err := http.Get(p.url + "/limits")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	require.NoError(t, err)
	assert.Contains(t, string(body), "cpu.shares")
}
