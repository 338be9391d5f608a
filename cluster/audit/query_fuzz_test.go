package audit

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
)

// fuzzNow is the clock a since duration counts back from.
var fuzzNow = time.Date(2030, 3, 1, 14, 0, 0, 0, time.UTC)

// FuzzAuditQuery feeds GET /v1/audit's query parser raw query strings: it
// never panics; bad input is a paramError naming a parameter of the query,
// which the handler answers with 400 and that parameter; good input gives
// a page size within its bounds, a valid namespace and a cursor that
// re-encodes to the value given.
func FuzzAuditQuery(f *testing.F) {
	for _, s := range []string{
		"", "type=applied,rolled_back&reason=OOMKilled&namespace=shop&since=90m&limit=10",
		"type=&reason=&namespace=&since=&limit=&continue=",
		"since=2030-03-01T12:00:00Z", "since=2030-03-01T12:00:00 01:00", "since=-1h",
		"type=foo", "type=applied,Applied", "limit=0", "limit=1001", "limit=ten", "limit=1&limit=2",
		"continue=not-a-cursor!", "continue=eyJ4IjoxfQ", "namespace=Not_A_Namespace", "types=applied", "a=%zz",
		"continue=" + position{Time: fuzzNow, Namespace: "shop", Name: "web", Seq: 2}.encode(),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		vals, err := url.ParseQuery(raw)
		if err != nil {
			return // the handler answers 400 before parsing (TestAuditRefusesBadQueryNamingTheParameter)
		}
		q, err := parseAuditQuery(vals, fuzzNow)
		if err != nil {
			pe, ok := errors.AsType[*paramError](err)
			if !ok {
				t.Fatalf("%q: error %v names no parameter", raw, err)
			}
			if _, given := vals[pe.param]; !given {
				t.Fatalf("%q: error names parameter %q, not in the query", raw, pe.param)
			}
			if !strings.Contains(pe.msg, pe.param) && !strings.Contains(pe.msg, strconv.Quote(pe.param)) {
				t.Fatalf("%q: message %q does not name parameter %q", raw, pe.msg, pe.param)
			}
			// The handler answers 400 naming it before it reads anything.
			rec := httptest.NewRecorder()
			(&Handler{}).serveAudit(rec, httptest.NewRequest(http.MethodGet, "/v1/audit?"+url.Values(vals).Encode(), nil))
			var body auditv1.Error
			// JSON strings hold no invalid UTF-8: such a name arrives as
			// encoding/json spells it (U+FFFD), the message quotes it.
			var want string
			if b, err := json.Marshal(pe.param); err != nil || json.Unmarshal(b, &want) != nil {
				t.Fatalf("%q: parameter %q does not round-trip JSON", raw, pe.param)
			}
			if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Parameter != want {
				t.Fatalf("%q: answered %d %s, want 400 naming %q", raw, rec.Code, rec.Body, pe.param)
			}
			return
		}
		if q.limit < 1 || q.limit > MaxLimit {
			t.Fatalf("%q: limit %d", raw, q.limit)
		}
		if q.namespace != "" && len(validation.IsDNS1123Label(q.namespace)) > 0 {
			t.Fatalf("%q: accepted namespace %q", raw, q.namespace)
		}
		if q.after != nil {
			var given string
			for _, v := range vals["continue"] {
				if v != "" {
					given = v
				}
			}
			if got := q.after.encode(); got != given {
				t.Fatalf("%q: cursor %q accepted, re-encodes to %q", raw, given, got)
			}
		}
	})
}

// FuzzCursor checks the continue token: a token that decodes re-encodes to
// itself (the cursor is the API's own, not another spelling of it), and a
// token that does not decode says why.
func FuzzCursor(f *testing.F) {
	for _, s := range []string{
		position{Time: fuzzNow, Namespace: "shop", Name: "web", Seq: 0}.encode(),
		position{Time: fuzzNow.Add(123456789), Namespace: "a", Name: "b", Seq: 7}.encode(),
		"eyJ4IjoxfQ", "eyJ2IjoxfQ", "not-a-cursor!", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := decodePosition(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: empty error", s)
			}
			return
		}
		if got := p.encode(); got != s {
			t.Fatalf("%q decoded to %+v, which encodes to %q", s, p, got)
		}
		if p.Namespace == "" || p.Name == "" || p.Seq < 0 {
			t.Fatalf("%q: incomplete position %+v accepted", s, p)
		}
	})
}

// FuzzCursorRoundTrip checks that every position the API can give a page
// (times of years 1 to 9999, as status.history's RFC 3339 times are)
// decodes back to itself.
func FuzzCursorRoundTrip(f *testing.F) {
	f.Add(fuzzNow.Unix(), int64(0), "shop", "web", 0)
	f.Add(int64(-62135596800), int64(999999999), "a", "b-c.d", 1<<40)
	f.Fuzz(func(t *testing.T, sec, nsec int64, ns, name string, seq int) {
		at := time.Unix(sec, nsec).UTC()
		// Names are the apiserver's: valid UTF-8.
		if at.Year() < 1 || at.Year() > 9999 || ns == "" || name == "" || seq < 0 || !utf8.ValidString(ns) || !utf8.ValidString(name) {
			return
		}
		want := position{Time: at, Namespace: ns, Name: name, Seq: seq}
		got, err := decodePosition(want.encode())
		if err != nil {
			t.Fatalf("%+v: its own cursor %q does not decode: %v", want, want.encode(), err)
		}
		if !got.Time.Equal(want.Time) || got.Namespace != want.Namespace || got.Name != want.Name || got.Seq != want.Seq {
			t.Fatalf("%+v came back as %+v", want, got)
		}
	})
}
