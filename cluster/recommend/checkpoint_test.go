package recommend

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckpointRoundTrip(t *testing.T) {
	m := defaultModel(t)
	full := steady(m, 0.3, 500*Mi, 72)
	full.AddThrottling(m, 0.4, t0.Add(time.Hour))
	full.RecordOOM(m, 480*Mi, t0.Add(3*time.Hour))
	// Every bucket used: the largest checkpoint.
	widest := &ContainerState{}
	for b, start := range m.cpu.starts {
		widest.AddCPU(m, start, t0)
		widest.AddMemory(m, &PeakWindow{}, m.mem.starts[b], t0) // one instance each
		widest.AddThrottling(m, 0.01, t0.Add(time.Duration(b)*time.Hour))
	}
	require.Len(t, widest.CPU.w, len(m.cpu.starts))
	require.Len(t, widest.Memory.w, len(m.mem.starts))
	tests := []struct {
		name  string
		state *ContainerState
	}{
		{"empty", &ContainerState{}},
		{"three days with a throttle and an OOM kill", full},
		{"every bucket", widest},
	}
	now := t0.Add(72 * time.Hour)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.state.AppendCheckpoint(m, nil)
			assert.LessOrEqual(t, len(data), MaxCheckpointBytes)
			got, err := LoadCheckpoint(m, data)
			require.NoError(t, err)
			assert.Equal(t, *tt.state, got)
			in := Input{Now: now, Request: Resources{1000, 1024 * Mi}}
			assert.Equal(t, m.Recommend(tt.state, in), m.Recommend(&got, in), "the same recommendation after a restart")
		})
	}
	t.Logf("checkpoint bytes: empty %d, three days %d, every bucket %d",
		len((&ContainerState{}).AppendCheckpoint(m, nil)), len(full.AppendCheckpoint(m, nil)), len(widest.AppendCheckpoint(m, nil)))
}

func TestLoadCheckpointRefuses(t *testing.T) {
	m := defaultModel(t)
	good := steady(m, 0.3, 500*Mi, 30).AppendCheckpoint(m, nil)
	newer := append([]byte("KRCP"), binary.AppendUvarint(nil, CheckpointVersion+1)...)
	newer = append(newer, good[5:]...)
	p := DefaultParams()
	p.BucketGrowth = 0.1
	other, err := NewModel(p)
	require.NoError(t, err)
	badBucket := (&ContainerState{CPU: Histogram{w: []float32{1, 1}, lo: 175}}).AppendCheckpoint(m, nil)

	tests := []struct {
		name  string
		model *Model
		data  []byte
		want  string
	}{
		{"a newer version", m, newer, "load checkpoint: version 2, this recommender reads up to 1: checkpoint is from a newer recommender"},
		{"other bytes", m, []byte(`{"version":1}`), "not a Kerf recommender checkpoint"},
		{"another model", other, good, "made with other bucket, half-life or interval parameters"},
		{"buckets past the model's", m, badBucket, "cpu buckets 175..176 beyond the 176 the model has"},
		{"trailing bytes", m, append(append([]byte{}, good...), 0), "1 trailing bytes"},
		{"over the size bound", m, make([]byte, MaxCheckpointBytes+1), "over the limit of 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadCheckpoint(tt.model, tt.data)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	_, err = LoadCheckpoint(m, newer)
	assert.ErrorIs(t, err, ErrCheckpointNewer)
	for n := range len(good) {
		_, err := LoadCheckpoint(m, good[:n])
		assert.Error(t, err, "a checkpoint cut at %d bytes", n)
	}
}
