package hub

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kerf-dev/kerf/hub/store"
)

// FuzzParseAudit feeds the hub's GET /v1/audit query parser raw query
// strings, as the leader's (cluster/audit.FuzzAuditQuery): it never
// panics; bad input is a paramError naming a parameter of the query (or a
// query that does not parse at all); good input has its bounds, and a
// cursor that re-encodes to the value given.
func FuzzParseAudit(f *testing.F) {
	for _, s := range []string{
		"", "type=applied,rolled_back&cluster=prod-eu&reason=OOMKilled&namespace=shop&since=90m&limit=10",
		"type=applied&type=failed", "since=2030-03-01T12:00:00Z", "since=-1h", "limit=0", "limit=1001", "limit=1&limit=2",
		"cluster=Prod", "continue=abc", "continue=eyJ2IjoxfQ", "types=applied", "a=%zz",
		"continue=" + actionContinue(&store.Position{Time: 1_900_000_000_000_000, Seq: 3, ID: 42}),
	} {
		f.Add(s)
	}
	s := &Server{Now: func() time.Time { return time.Date(2030, 3, 1, 14, 0, 0, 0, time.UTC) }}
	f.Fuzz(func(t *testing.T, raw string) {
		aq, err := s.parseAudit(raw)
		vals, qerr := url.ParseQuery(raw)
		if err != nil {
			if qerr != nil {
				return // answered 400 without a parameter: the query is not one
			}
			pe, ok := errors.AsType[*paramError](err)
			if !ok {
				t.Fatalf("%q: error %v names no parameter", raw, err)
			}
			if _, given := vals[pe.param]; !given || (!strings.Contains(pe.msg, pe.param) && !strings.Contains(pe.msg, strconv.Quote(pe.param))) {
				t.Fatalf("%q: error %q names parameter %q, which the query does not have", raw, pe.msg, pe.param)
			}
			return
		}
		if aq.Limit < 1 || aq.Limit > MaxLimit {
			t.Fatalf("%q: limit %d", raw, aq.Limit)
		}
		for _, v := range []string{aq.Cluster, aq.Namespace} {
			if v != "" && len(validation.IsDNS1123Label(v)) > 0 {
				t.Fatalf("%q: accepted name %q", raw, v)
			}
		}
		if aq.After != nil {
			if got, given := actionContinue(aq.After), vals.Get("continue"); !slices.Contains(vals["continue"], got) {
				t.Fatalf("%q: cursor %q accepted, re-encodes to %q", raw, given, got)
			}
		}
	})
}

// FuzzHubCursor checks both of the hub's continue tokens: a token that
// decodes re-encodes to itself.
func FuzzHubCursor(f *testing.F) {
	for _, s := range []string{
		actionContinue(&store.Position{Time: 1_900_000_000_000_000, Seq: 3, ID: 42}),
		encodeCursor(workloadCursor{V: cursorVersion, Cluster: "prod", Namespace: "shop", Kind: "Deployment", Name: "web"}),
		"abc", "eyJ2IjoxfQ", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var ac actionCursor
		if decodeCursor(s, &ac) == nil {
			if got := encodeCursor(ac); got != s {
				t.Fatalf("%q decoded to %+v, which encodes to %q", s, ac, got)
			}
		}
		var wc workloadCursor
		if decodeCursor(s, &wc) == nil {
			if got := encodeCursor(wc); got != s {
				t.Fatalf("%q decoded to %+v, which encodes to %q", s, wc, got)
			}
		}
	})
}
