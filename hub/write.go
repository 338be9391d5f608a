package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/internal/httpjson"
)

// fieldError is bad input in one field of a request body.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return e.msg }

func badField(field, format string, args ...any) error {
	return &fieldError{field: field, msg: field + ": " + fmt.Sprintf(format, args...)}
}

// The values the write protocol accepts, in the order messages list them.
var (
	actionTypes   = v1alpha1.ActionTypes
	workloadKinds = []v1alpha1.WorkloadKind{v1alpha1.KindDeployment, v1alpha1.KindStatefulSet, v1alpha1.KindDaemonSet}
	resourceNames = []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}
	phases        = []v1alpha1.Phase{
		v1alpha1.PhasePending, v1alpha1.PhaseApplied, v1alpha1.PhaseWatching, v1alpha1.PhaseHealthy,
		v1alpha1.PhaseRolledBack, v1alpha1.PhaseBlocked, v1alpha1.PhaseFailed, v1alpha1.PhaseDegraded,
	}
)

// serveWrite stores a batch: POST /v1/clusters/{cluster}/actions. The
// writer middleware has checked that the token is this cluster's.
func (s *Server) serveWrite(w http.ResponseWriter, r *http.Request) {
	cluster := r.PathValue("cluster")
	b, status, err := s.decodeBatch(w, r)
	if err == nil {
		err = validateBatch(cluster, b, s.now())
		status = http.StatusBadRequest
	}
	if err != nil {
		writeBodyError(w, status, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := s.Store.Ingest(ctx, cluster, b)
	if ke, ok := errors.AsType[*store.KeyConflictError](err); ok {
		httpjson.Write(w, http.StatusConflict, auditv1.Error{Error: ke.Error(), Field: fmt.Sprintf("actions[%d].key", ke.Index)})
		return
	}
	if errors.Is(err, store.ErrNotFound) {
		// The token authenticated but the cluster went (deleted meanwhile).
		httpjson.Write(w, http.StatusForbidden, auditv1.Error{Error: fmt.Sprintf("cluster %q is not registered", cluster)})
		return
	}
	if err != nil {
		s.failed(w, r, err)
		return
	}
	s.log().Debug("stored batch", "cluster", cluster, "stored", res.Stored, "duplicates", res.Duplicates)
	httpjson.Write(w, http.StatusOK, res)
}

// decodeBatch reads the body: JSON, at most MaxBodyBytes, no unknown
// fields, one value. It decodes as it reads, one action at a time, and
// stops at the first action past MaxBatchActions: a body of a million
// empty actions (4 MiB of "{}," decodes to some 370 MiB) is refused
// before it is held, and the body itself is never held whole.
func (s *Server) decodeBatch(w http.ResponseWriter, r *http.Request) (*hubv1.Batch, int, error) {
	tooLarge := fmt.Errorf("body: larger than %d bytes; send smaller batches (at most %d actions)", s.maxBody(), hubv1.MaxBatchActions)
	return decodeBody(w, r, s.maxBody(), tooLarge, decodeBatchFrom)
}

// decodeBatchFrom decodes one Batch object from dec, its actions one at a
// time (at most MaxBatchActions); an error is as jsonError makes it.
func decodeBatchFrom(dec *json.Decoder) (*hubv1.Batch, error) {
	var b hubv1.Batch
	return &b, decodeObject(dec, "the write protocol is api/hub/v1 (docs/hub.md)", func(key string) any {
		switch key {
		case "cluster":
			return &b.Cluster
		case "leader":
			return &b.Leader
		case "actions":
			return decodeArray(&b.Actions, "actions", hubv1.MaxBatchActions,
				fmt.Sprintf("more than %d actions: at most %d per batch", hubv1.MaxBatchActions, hubv1.MaxBatchActions))
		}
		return nil
	})
}

// decodeBody reads a write's body with from: JSON, at most maxBody bytes
// (tooLarge past them), no unknown fields, one value. It answers the
// HTTP status of a refusal with its error.
func decodeBody[T any](w http.ResponseWriter, r *http.Request, maxBody int64, tooLarge error, from func(*json.Decoder) (*T, error)) (*T, int, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %q: must be application/json", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	v, err := from(dec)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, http.StatusRequestEntityTooLarge, tooLarge
		}
		return nil, http.StatusBadRequest, errors.New("body: must be one JSON object, found more after it")
	}
	return v, 0, nil
}

// decodeObject decodes one JSON object from dec, field by field. field
// returns where a key's value goes: a pointer to decode into, a
// func(*json.Decoder) error to decode it, or nil for an unknown key,
// refused naming it and the protocol.
func decodeObject(dec *json.Decoder, protocol string, field func(key string) any) error {
	if err := delim(dec, '{', "body: must be a JSON object"); err != nil {
		return err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return jsonError(err, "")
		}
		key, _ := t.(string)
		switch to := field(key).(type) {
		case nil:
			return &fieldError{field: key, msg: fmt.Sprintf("unknown field %q: %s", key, protocol)}
		case func(*json.Decoder) error:
			err = to(dec)
		default:
			err = dec.Decode(to)
		}
		if err != nil {
			return jsonError(err, key)
		}
	}
	return delim(dec, '}', "body: the object is not closed")
}

// decodeArray returns a decoder of the JSON array (or null) named field
// into out, one element at a time, refusing the one past max (tooMany)
// before it is decoded.
func decodeArray[T any](out *[]T, field string, max int, tooMany string) func(*json.Decoder) error {
	return func(dec *json.Decoder) error {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		if t == nil {
			return nil // null
		}
		if d, ok := t.(json.Delim); !ok || d != '[' {
			return &fieldError{field: field, msg: field + ": must be a JSON array"}
		}
		for i := 0; dec.More(); i++ {
			if i == max {
				return &fieldError{field: field, msg: tooMany}
			}
			var v T
			if err := dec.Decode(&v); err != nil {
				return jsonError(err, fmt.Sprintf("%s[%d]", field, i))
			}
			*out = append(*out, v)
		}
		_, err = dec.Token() // ']'
		return err
	}
}

// delim reads the delimiter want, or fails with msg.
func delim(dec *json.Decoder, want json.Delim, msg string) error {
	t, err := dec.Token()
	if err != nil {
		return jsonError(err, "")
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return errors.New(msg)
	}
	return nil
}

// jsonError is the answer to an error decoding the body's value at path
// (its path from the batch, such as "actions[3]"; "" for the batch): a
// reader's error (the body past its limit) and a fieldError as they are,
// an unknown field or a wrong type named by its whole path.
func jsonError(err error, path string) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return err
	}
	if _, ok := errors.AsType[*fieldError](err); ok {
		return err
	}
	join := func(f string) string {
		switch {
		case path == "":
			return f
		case f == "":
			return path
		}
		return path + "." + f
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f = join(strings.Trim(f, `"`))
		return &fieldError{field: f, msg: fmt.Sprintf("unknown field %q: the write protocol is api/hub/v1 (docs/hub.md)", f)}
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if f := join(te.Field); f != "" {
			return &fieldError{field: f, msg: fmt.Sprintf("%s: must be a JSON %s, not %s", f, te.Type, te.Value)}
		}
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Errorf("body: not JSON at byte %d: %v", se.Offset, se)
	}
	return fmt.Errorf("body: %v", strings.TrimPrefix(err.Error(), "json: "))
}

func writeBodyError(w http.ResponseWriter, status int, err error) {
	body := auditv1.Error{Error: err.Error()}
	if fe, ok := errors.AsType[*fieldError](err); ok {
		body.Field = fe.field
	}
	httpjson.Write(w, status, body)
}

// validateBatch checks every value of a batch; the first fault is the
// answer, naming the field.
func validateBatch(cluster string, b *hubv1.Batch, now time.Time) error {
	if b.Cluster != cluster {
		return badField("cluster", "%q: must be the cluster of the path and the token, %q", b.Cluster, cluster)
	}
	l := b.Leader
	switch {
	case len(l.Identity) > 253:
		return badField("leader.identity", "at most 253 bytes, not %d", len(l.Identity))
	case l.AgentsConnected < 0:
		return badField("leader.agentsConnected", "%d: must not be negative", l.AgentsConnected)
	case l.Undelivered < 0:
		return badField("leader.undelivered", "%d: must not be negative", l.Undelivered)
	case l.LagSeconds < 0 || math.IsInf(l.LagSeconds, 0) || math.IsNaN(l.LagSeconds):
		return badField("leader.lagSeconds", "%v: must be a non-negative number", l.LagSeconds)
	}
	if len(b.Actions) > hubv1.MaxBatchActions {
		return badField("actions", "%d actions: at most %d per batch", len(b.Actions), hubv1.MaxBatchActions)
	}
	type workload struct{ ns, kind, name string }
	lastSeq := map[workload]int64{}
	for i := range b.Actions {
		a := &b.Actions[i]
		if err := validateAction(fmt.Sprintf("actions[%d]", i), a, now); err != nil {
			return err
		}
		wl := workload{a.Namespace, string(a.Workload.Kind), a.Workload.Name}
		if prev, ok := lastSeq[wl]; ok && a.Seq <= prev {
			return badField(fmt.Sprintf("actions[%d].seq", i), "%d: must be greater than the seq before it of the same workload (%d); send a workload's actions in order", a.Seq, prev)
		}
		lastSeq[wl] = a.Seq
	}
	return nil
}

// camelCase reports whether s is a CamelCase word, as an action's reason
// is: an upper-case ASCII letter, then ASCII letters and digits.
func camelCase(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// maxAhead is how far past the hub's clock an action's time may be: the
// clocks' skew. Later, it would escape retention (which deletes by time)
// and sort before every real action.
const maxAhead = time.Hour

func validateAction(p string, a *hubv1.Action, now time.Time) error {
	switch {
	case a.Key == "" || len(a.Key) > hubv1.MaxKeyLength:
		return badField(p+".key", "must be 1 to %d bytes, not %d", hubv1.MaxKeyLength, len(a.Key))
	case strings.IndexFunc(a.Key, func(r rune) bool { return r < '!' || r > '~' }) >= 0:
		return badField(p+".key", "%q: must be printable ASCII without spaces", a.Key)
	case a.Seq < 1:
		return badField(p+".seq", "%d: must be 1 or more", a.Seq)
	case a.Time.IsZero():
		return badField(p+".time", "must be set (RFC 3339)")
	case a.Time.After(now.Add(maxAhead)):
		return badField(p+".time", "%s: more than %s after the hub's clock (%s)", a.Time.UTC().Format(time.RFC3339), maxAhead, now.UTC().Format(time.RFC3339))
	case a.Reason != "" && !camelCase(a.Reason):
		return badField(p+".reason", "%q: must be a CamelCase word (letters and digits, an upper-case first)", a.Reason)
	case !slices.Contains(actionTypes, a.Type):
		return badField(p+".type", "%q: must be one of %s", a.Type, join(actionTypes))
	case a.Phase != "" && !slices.Contains(phases, a.Phase):
		return badField(p+".phase", "%q: must be empty or one of %s", a.Phase, join(phases))
	case len(a.Reason) > v1alpha1.MaxReasonLength:
		return badField(p+".reason", "at most %d bytes, not %d", v1alpha1.MaxReasonLength, len(a.Reason))
	case len(a.Message) > v1alpha1.MaxActionMessageLength:
		return badField(p+".message", "at most %d bytes, not %d", v1alpha1.MaxActionMessageLength, len(a.Message))
	case len(validation.IsDNS1123Label(a.Namespace)) > 0:
		return badField(p+".namespace", "%q: must be a namespace name (lower-case letters, digits and '-', at most 63)", a.Namespace)
	case len(validation.IsDNS1123Subdomain(a.Recommendation)) > 0:
		return badField(p+".recommendation", "%q: must be a RightsizingRecommendation name (lower-case letters, digits, '-' and '.', at most 253)", a.Recommendation)
	case !slices.Contains(workloadKinds, a.Workload.Kind):
		return badField(p+".workload.kind", "%q: must be one of %s", a.Workload.Kind, join(workloadKinds))
	case len(validation.IsDNS1123Subdomain(a.Workload.Name)) > 0:
		return badField(p+".workload.name", "%q: must be a workload name (lower-case letters, digits, '-' and '.', at most 253)", a.Workload.Name)
	case len(a.Resources) > len(resourceNames):
		return badField(p+".resources", "at most %d", len(resourceNames))
	case len(a.Containers) > v1alpha1.MaxActionContainers:
		return badField(p+".containers", "at most %d, not %d", v1alpha1.MaxActionContainers, len(a.Containers))
	case len(a.Figures) > v1alpha1.MaxFigures:
		return badField(p+".figures", "at most %d, not %d", v1alpha1.MaxFigures, len(a.Figures))
	case len(a.Refusals) > v1alpha1.MaxActionRefusals:
		return badField(p+".refusals", "at most %d, not %d", v1alpha1.MaxActionRefusals, len(a.Refusals))
	}
	for j, r := range a.Resources {
		if !slices.Contains(resourceNames, r) || slices.Index(a.Resources, r) != j {
			return badField(fmt.Sprintf("%s.resources[%d]", p, j), "%q: must be one of %s, each once", r, join(resourceNames))
		}
	}
	for j, c := range a.Containers {
		if c.Name != v1alpha1.PodLevel && len(validation.IsDNS1123Label(c.Name)) > 0 {
			return badField(fmt.Sprintf("%s.containers[%d].name", p, j), "%q: must be a container name (lower-case letters, digits and '-', at most 63) or %s", c.Name, v1alpha1.PodLevel)
		}
	}
	for j, f := range a.Figures {
		if len(f) > v1alpha1.MaxFigureLength {
			return badField(fmt.Sprintf("%s.figures[%d]", p, j), "at most %d bytes, not %d", v1alpha1.MaxFigureLength, len(f))
		}
	}
	for j := range a.Refusals {
		if err := validateRefusal(fmt.Sprintf("%s.refusals[%d]", p, j), &a.Refusals[j]); err != nil {
			return err
		}
	}
	return nil
}

// refusalFields are the fields a refusal can be about.
var refusalFields = []string{"request", "limit"}

func validateRefusal(p string, f *v1alpha1.Refusal) error {
	switch {
	case len(validation.IsDNS1123Label(f.Container)) > 0:
		return badField(p+".container", "%q: must be a container name (lower-case letters, digits and '-', at most 63)", f.Container)
	case !slices.Contains(resourceNames, f.Resource):
		return badField(p+".resource", "%q: must be one of %s", f.Resource, join(resourceNames))
	case !slices.Contains(refusalFields, f.Field):
		return badField(p+".field", "%q: must be one of %s", f.Field, join(refusalFields))
	case f.Reason == "" || len(f.Reason) > v1alpha1.MaxRefusalReasonLength:
		return badField(p+".reason", "must be 1 to %d bytes, not %d", v1alpha1.MaxRefusalReasonLength, len(f.Reason))
	case f.Asked < 0:
		return badField(p+".asked", "%d: must not be negative", f.Asked)
	case f.Held < 0:
		return badField(p+".held", "%d: must not be negative", f.Held)
	case len(f.Observed) > v1alpha1.MaxRefusalFigureLength:
		return badField(p+".observed", "at most %d bytes, not %d", v1alpha1.MaxRefusalFigureLength, len(f.Observed))
	case len(f.Threshold) > v1alpha1.MaxRefusalFigureLength:
		return badField(p+".threshold", "at most %d bytes, not %d", v1alpha1.MaxRefusalFigureLength, len(f.Threshold))
	}
	return nil
}

func join[T ~string](s []T) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}
