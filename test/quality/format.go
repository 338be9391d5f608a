package quality

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The trace format, version 1: "# key: value" header lines, then CSV
// with a header row and one row per sample:
//
//	# kerf-trace: 1
//	# name: steady
//	# about: A service at a flat 0.3 cores.
//	# seed: 1
//	# step: 1m0s
//	# memory_by_age: false
//	# cpu_request_millicores: 500
//	# cpu_limit_millicores: 1000
//	# memory_request_bytes: 536870912
//	# memory_limit_bytes: 1073741824
//	index,cpu_cores,burst,burst_cpu_cores,memory_bytes
//	0,0.3,0.02,0.6,314572800
//
// Zero values are unset (no limit); seed and about may be left out.
const formatVersion = "1"

// csvHeader is the header row of the samples.
var csvHeader = []string{"index", "cpu_cores", "burst", "burst_cpu_cores", "memory_bytes"}

// maxTraceBytes bounds what ReadTrace reads: MaxSamples rows of at most
// 128 bytes, and the header.
const maxTraceBytes = MaxSamples*128 + 1<<16

// WriteTrace writes t in the trace format.
func WriteTrace(w io.Writer, t *Trace) error {
	if err := t.Validate(); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# kerf-trace: %s\n# name: %s\n# about: %s\n# seed: %d\n# step: %s\n# memory_by_age: %t\n",
		formatVersion, t.Name, strings.ReplaceAll(t.About, "\n", " "), t.Seed, t.Step, t.MemoryByAge)
	fmt.Fprintf(bw, "# cpu_request_millicores: %d\n# cpu_limit_millicores: %d\n# memory_request_bytes: %d\n# memory_limit_bytes: %d\n",
		t.Manifest.CPURequest, t.Manifest.CPULimit, t.Manifest.MemoryRequest, t.Manifest.MemoryLimit)
	cw := csv.NewWriter(bw)
	if err := cw.Write(csvHeader); err != nil {
		return fmt.Errorf("write trace %s: %w", t.Name, err)
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for i, s := range t.Samples {
		if err := cw.Write([]string{strconv.Itoa(i), f(s.CPU), f(s.Burst), f(s.BurstCPU), f(s.Memory)}); err != nil {
			return fmt.Errorf("write trace %s: %w", t.Name, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write trace %s: %w", t.Name, err)
	}
	return bw.Flush()
}

// ReadTrace reads a trace in the trace format. An error names the line
// and the field that is wrong; a trace bigger than MaxSamples samples is
// refused.
func ReadTrace(r io.Reader) (*Trace, error) {
	br := bufio.NewReader(io.LimitReader(r, maxTraceBytes+1))
	t := &Trace{}
	line := 0
	seen := map[string]bool{}
	for {
		b, err := br.Peek(1)
		if err != nil || b[0] != '#' {
			break
		}
		s, err := br.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("read trace: line %d: %w", line+1, err)
		}
		line++
		key, value, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(s, "#")), ":")
		if !ok {
			return nil, fmt.Errorf("read trace: line %d: want \"# key: value\", got %q", line, strings.TrimSpace(s))
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if seen[key] {
			return nil, fmt.Errorf("read trace: line %d: %s: given twice", line, key)
		}
		seen[key] = true
		if err := t.setHeader(key, value); err != nil {
			return nil, fmt.Errorf("read trace: line %d: %w", line, err)
		}
	}
	for _, k := range []string{"kerf-trace", "name", "step"} {
		if !seen[k] {
			return nil, fmt.Errorf("read trace: header %s: missing", k)
		}
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = len(csvHeader)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read trace %s: line %d: the header row: %w", t.Name, line+1, err)
	}
	if strings.Join(head, ",") != strings.Join(csvHeader, ",") {
		return nil, fmt.Errorf("read trace %s: line %d: the header row must be %q, got %q", t.Name, line+1, strings.Join(csvHeader, ","), strings.Join(head, ","))
	}
	line++
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line++
		if err != nil {
			return nil, fmt.Errorf("read trace %s: line %d: %w", t.Name, line, err)
		}
		if len(t.Samples) >= MaxSamples {
			return nil, fmt.Errorf("read trace %s: line %d: samples: at most %d", t.Name, line, MaxSamples)
		}
		var s Sample
		var idx float64
		for i, dst := range []*float64{&idx, &s.CPU, &s.Burst, &s.BurstCPU, &s.Memory} {
			v, err := strconv.ParseFloat(rec[i], 64)
			if err != nil {
				return nil, fmt.Errorf("read trace %s: line %d: %s: not a number: %q", t.Name, line, csvHeader[i], rec[i])
			}
			*dst = v
		}
		if int(idx) != len(t.Samples) || idx != float64(int(idx)) {
			return nil, fmt.Errorf("read trace %s: line %d: index: want %d (one row per sample, in order), got %s", t.Name, line, len(t.Samples), rec[0])
		}
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("read trace %s: line %d: %w", t.Name, line, err)
		}
		t.Samples = append(t.Samples, s)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return t, nil
}

// setHeader sets the field a header line names.
func (t *Trace) setHeader(key, value string) error {
	integer := func(dst *int64) error {
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("%s: must be a whole number >= 0, got %q", key, value)
		}
		*dst = v
		return nil
	}
	switch key {
	case "kerf-trace":
		if value != formatVersion {
			return fmt.Errorf("kerf-trace: version must be %s, got %q", formatVersion, value)
		}
	case "name":
		if value == "" || strings.ContainsAny(value, " ,/|") {
			return fmt.Errorf("name: must be a word without spaces, commas, slashes or bars, got %q", value)
		}
		t.Name = value
	case "about":
		t.About = value
	case "seed":
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return fmt.Errorf("seed: must be a whole number >= 0, got %q", value)
		}
		t.Seed = v
	case "step":
		d, err := time.ParseDuration(value)
		if err != nil {
			return fmt.Errorf("step: must be a duration such as 1m, got %q", value)
		}
		t.Step = d
	case "memory_by_age":
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("memory_by_age: must be true or false, got %q", value)
		}
		t.MemoryByAge = b
	case "cpu_request_millicores":
		return integer(&t.Manifest.CPURequest)
	case "cpu_limit_millicores":
		return integer(&t.Manifest.CPULimit)
	case "memory_request_bytes":
		return integer(&t.Manifest.MemoryRequest)
	case "memory_limit_bytes":
		return integer(&t.Manifest.MemoryLimit)
	default:
		return fmt.Errorf("%s: unknown header; known: kerf-trace, name, about, seed, step, memory_by_age, cpu_request_millicores, cpu_limit_millicores, memory_request_bytes, memory_limit_bytes", key)
	}
	return nil
}

// ReadTraces reads every *.csv file of dir as a trace, in name order.
func ReadTraces(dir string) ([]*Trace, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.csv"))
	if err != nil {
		return nil, fmt.Errorf("read traces in %s: %w", dir, err)
	}
	slices.Sort(paths)
	var out []*Trace
	for _, p := range paths {
		t, err := readTraceFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func readTraceFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	defer f.Close()
	t, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}
