package forward

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestCursorsOfFiftyThousandRecommendationsAreSaved: the delivered-up-to
// cursors were a data entry of text each ("<uid>": "<seq>"), so the
// ConfigMap reached its 1 MiB at about 23,000 recommendations and every
// save after failed, said only as a failed pass (issue 30, item 17). They
// are packed now (16 bytes and a uvarint each): 50,000 are saved to the
// real apiserver and read back the same, a UID that is not a UUID kept as
// text beside them; past the bound the save fails saying how many and
// what a new leader will do.
func TestCursorsOfFiftyThousandRecommendationsAreSaved(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t)
	f := &Forwarder{cfg: Config{Namespace: ns}, client: c, api: c, log: slog.Default(), cursors: map[types.UID]int64{}}
	for i := range 50_000 {
		f.cursors[types.UID(uuid.NewString())] = int64(i*37) % 100_000
	}
	f.cursors["not-a-uuid"] = 7
	f.dirty = true
	ctx := context.Background()
	require.NoError(t, f.saveCursors(ctx))

	g := &Forwarder{cfg: Config{Namespace: ns}, client: c, api: c, log: slog.Default()}
	require.NoError(t, g.loadCursors(ctx))
	assert.Equal(t, f.cursors, g.cursors, "read back the same")

	// Past the bound: said, not written.
	for i := range 20_000 {
		f.cursors[types.UID(fmt.Sprintf("%08d-0000-4000-8000-000000000000", i))] = 1 << 40
	}
	f.dirty = true
	err := f.saveCursors(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "70001 recommendations need")
	assert.Contains(t, err.Error(), "a new leader will resend their delivered actions (duplicates)")
}
