package hub

import (
	"context"
	"log/slog"
	"time"

	"github.com/kerf-dev/kerf/hub/store"
)

// DefaultRetention is how long the hub keeps an action (kerf-hub
// --retention): 400 days, a year and a season to compare with.
const DefaultRetention = 400 * 24 * time.Hour

// Retention deletes the actions older than Keep, every Every. Several
// replicas may each run one: the deletes are idempotent.
type Retention struct {
	// Store is the database.
	Store *store.Store
	// Keep is how long an action stays.
	Keep time.Duration
	// Every is the time between two passes.
	Every time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives each pass's result.
	Log *slog.Logger
}

// Run makes a pass at once and then every Every until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	t := time.NewTicker(r.Every)
	defer t.Stop()
	for {
		_, _ = r.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass deletes what is older than Keep now and returns how many actions
// went.
func (r *Retention) Pass(ctx context.Context) (int64, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	log := r.Log
	if log == nil {
		log = slog.Default()
	}
	cutoff := now().Add(-r.Keep)
	n, err := r.Store.DeleteBefore(ctx, cutoff)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("retention pass failed", "cutoff", cutoff, "deleted", n, "err", err)
		}
		return n, err
	}
	if n > 0 {
		log.Info("retention deleted old actions", "cutoff", cutoff, "deleted", n)
	}
	return n, nil
}
