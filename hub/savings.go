package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/internal/httpjson"
)

// SavingsStaleAfter is the age past which the pages mark a savings report
// stale: three of the leaders' 5-minute reports missed
// (cluster/forward's SavingsHeartbeat).
const SavingsStaleAfter = 15 * time.Minute

// serveSavings stores a savings report: PUT /v1/clusters/{cluster}/savings.
// The writer middleware has checked that the token is this cluster's.
func (s *Server) serveSavings(w http.ResponseWriter, r *http.Request) {
	cluster := r.PathValue("cluster")
	rep, status, err := s.decodeSavings(w, r)
	if err == nil {
		err = validateSavings(cluster, rep, s.now())
		status = http.StatusBadRequest
	}
	if err != nil {
		s.countSavings("refused")
		s.log().Warn("refused a savings report", "cluster", cluster, "status", status, "err", err)
		writeBodyError(w, status, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := s.Store.PutSavings(ctx, cluster, rep)
	if errors.Is(err, store.ErrNotFound) {
		s.countSavings("refused")
		httpjson.Write(w, http.StatusForbidden, auditv1.Error{Error: fmt.Sprintf("cluster %q is not registered", cluster)})
		return
	}
	if err != nil {
		s.failed(w, r, err)
		return
	}
	if res.Superseded {
		s.countSavings("superseded")
	} else {
		s.countSavings("stored")
	}
	s.log().Debug("stored savings report", "cluster", cluster, "namespaces", res.Stored, "superseded", res.Superseded)
	httpjson.Write(w, http.StatusOK, res)
}

func (s *Server) countSavings(result string) {
	if s.savingsReports != nil {
		s.savingsReports.WithLabelValues(result).Inc()
	}
}

// decodeSavings reads the body: JSON, at most MaxBodyBytes, no unknown
// fields, one value. It decodes the namespaces one at a time and stops at
// the first past MaxSavingsNamespaces, as decodeBatch does for actions.
func (s *Server) decodeSavings(w http.ResponseWriter, r *http.Request) (*hubv1.SavingsReport, int, error) {
	return decodeBody(w, r, s.maxBody(), fmt.Errorf("body: larger than %d bytes", s.maxBody()), decodeSavingsFrom)
}

// decodeSavingsFrom decodes one SavingsReport from dec.
func decodeSavingsFrom(dec *json.Decoder) (*hubv1.SavingsReport, error) {
	var rep hubv1.SavingsReport
	return &rep, decodeObject(dec, "the savings report is api/hub/v1 SavingsReport (docs/hub.md)", func(key string) any {
		switch key {
		case "cluster":
			return &rep.Cluster
		case "time":
			return &rep.Time
		case "namespaces":
			return decodeArray(&rep.Namespaces, "namespaces", hubv1.MaxSavingsNamespaces,
				fmt.Sprintf("namespaces: more than %d: a report carries at most %d namespaces", hubv1.MaxSavingsNamespaces, hubv1.MaxSavingsNamespaces))
		}
		return nil
	})
}

// validateSavings checks every value of a report; the first fault is the
// answer, naming the field.
func validateSavings(cluster string, r *hubv1.SavingsReport, now time.Time) error {
	switch {
	case r.Cluster != cluster:
		return badField("cluster", "%q: must be the cluster of the path and the token, %q", r.Cluster, cluster)
	case r.Time.IsZero():
		return badField("time", "must be set (RFC 3339)")
	case r.Time.After(now.Add(maxAhead)):
		return badField("time", "%s: more than %s after the hub's clock (%s)", r.Time.UTC().Format(time.RFC3339), maxAhead, now.UTC().Format(time.RFC3339))
	case len(r.Namespaces) > hubv1.MaxSavingsNamespaces:
		return badField("namespaces", "%d: a report carries at most %d namespaces", len(r.Namespaces), hubv1.MaxSavingsNamespaces)
	}
	seen := make(map[string]bool, len(r.Namespaces))
	for i, n := range r.Namespaces {
		p := fmt.Sprintf("namespaces[%d]", i)
		switch {
		case len(validation.IsDNS1123Label(n.Namespace)) > 0:
			return badField(p+".namespace", "%q: must be a namespace name (lower-case letters, digits and '-', at most 63)", n.Namespace)
		case seen[n.Namespace]:
			return badField(p+".namespace", "%q: each namespace once", n.Namespace)
		case n.Workloads < 0:
			return badField(p+".workloads", "%d: must not be negative", n.Workloads)
		case n.Unrecorded < 0:
			return badField(p+".unrecorded", "%d: must not be negative", n.Unrecorded)
		}
		seen[n.Namespace] = true
		for _, a := range []struct {
			name string
			v    hubv1.Amounts
		}{{"manifest", n.Manifest}, {"inForce", n.InForce}, {"recommended", n.Recommended}} {
			if a.v.CPUMillis < 0 {
				return badField(p+"."+a.name+".cpuMillis", "%d: must not be negative", a.v.CPUMillis)
			}
			if a.v.MemoryBytes < 0 {
				return badField(p+"."+a.name+".memoryBytes", "%d: must not be negative", a.v.MemoryBytes)
			}
		}
	}
	return nil
}
