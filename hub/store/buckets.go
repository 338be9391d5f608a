package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// MaxBuckets is the most time buckets one BucketQuery may ask for.
const MaxBuckets = 1000

// BucketQuery counts actions per cluster, type and time bucket: bucket i
// holds the actions at or after Start + i*Step and before Start +
// (i+1)*Step, for i from 0 to Buckets-1.
type BucketQuery struct {
	// Types keeps actions of these types; empty keeps every type.
	Types []v1alpha1.ActionType
	// Start is the start of the first bucket.
	Start time.Time
	// Step is each bucket's length; at least a second.
	Step time.Duration
	// Buckets is how many buckets, from 1 to MaxBuckets.
	Buckets int
	// Limit is the most rows returned; it must be positive.
	Limit int
}

// Bucket is how many actions of one cluster and type fell in one bucket.
type Bucket struct {
	// Cluster and Type are the actions' cluster and type.
	Cluster string
	Type    v1alpha1.ActionType
	// Index is the bucket's number, from 0.
	Index int
	// Count is how many actions; never 0 (empty buckets have no row).
	Count int64
}

// ActionBuckets counts the actions q selects per cluster, type and time
// bucket, in the database (one row per non-empty bucket, by cluster, type
// and index). It returns at most q.Limit rows, and more true when there
// were more.
func (s *Store) ActionBuckets(ctx context.Context, q BucketQuery) (rows []Bucket, more bool, err error) {
	switch {
	case q.Step < time.Second:
		return nil, false, fmt.Errorf("count actions per bucket: step %s must be at least 1s", q.Step)
	case q.Buckets < 1 || q.Buckets > MaxBuckets:
		return nil, false, fmt.Errorf("count actions per bucket: buckets %d must be from 1 to %d", q.Buckets, MaxBuckets)
	case q.Limit < 1:
		return nil, false, fmt.Errorf("count actions per bucket: limit %d must be positive", q.Limit)
	}
	start, step := q.Start.UnixNano(), q.Step.Nanoseconds()
	// The end, computed in Go: Start + Buckets*Step does not overflow for
	// MaxBuckets of any step a caller has reason to give, but check.
	end := q.Start.Add(time.Duration(q.Buckets) * q.Step).UnixNano()
	if end <= start {
		return nil, false, fmt.Errorf("count actions per bucket: %d buckets of %s from %s overflow", q.Buckets, q.Step, q.Start.Format(time.RFC3339))
	}
	// (time - start) / step is integer division on both databases: the
	// columns and the arguments are 64-bit integers.
	where := []string{"time >= ?", "time < ?"}
	args := []any{start, step, start, end}
	if len(q.Types) > 0 {
		where = append(where, "type IN (?"+strings.Repeat(", ?", len(q.Types)-1)+")")
		for _, t := range q.Types {
			args = append(args, string(t))
		}
	}
	query := "SELECT cluster, type, bucket, COUNT(*) FROM (SELECT cluster, type, (time - ?) / ? AS bucket FROM actions WHERE " +
		strings.Join(where, " AND ") + ") b GROUP BY cluster, type, bucket ORDER BY cluster, type, bucket LIMIT ?"
	args = append(args, q.Limit+1)
	rs, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, false, fmt.Errorf("count actions per bucket: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var b Bucket
		var typ string
		var idx int64
		if err := rs.Scan(&b.Cluster, &typ, &idx, &b.Count); err != nil {
			return nil, false, fmt.Errorf("count actions per bucket: %w", err)
		}
		b.Type, b.Index = v1alpha1.ActionType(typ), int(idx)
		rows = append(rows, b)
	}
	if err := rs.Err(); err != nil {
		return nil, false, fmt.Errorf("count actions per bucket: %w", err)
	}
	if len(rows) > q.Limit {
		return rows[:q.Limit], true, nil
	}
	return rows, false, nil
}
