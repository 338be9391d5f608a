package quality

import (
	"math"
	"math/rand/v2"
	"time"
)

// The library's shape: three weeks at one sample a minute, so a trace
// spans the recommenders' 8-day windows twice and holds 30,240 samples.
const (
	// LibraryStep is the library's sample step.
	LibraryStep = time.Minute
	// LibraryDuration is how long each library trace runs.
	LibraryDuration = 21 * 24 * time.Hour
	day             = 24 * time.Hour
)

// pattern is one of the library's generators: the sample at elapsed
// time t, with r for noise.
type pattern struct {
	name, about string
	seed        uint64
	byAge       bool
	manifest    Values
	at          func(t time.Duration, r *rand.Rand) Sample
}

// Library returns the generated traces, each of duration d (0:
// LibraryDuration) at LibraryStep. The same seed gives the same trace.
func Library(d time.Duration) []*Trace {
	if d <= 0 {
		d = LibraryDuration
	}
	out := make([]*Trace, 0, len(patterns))
	for _, p := range patterns {
		out = append(out, p.generate(d))
	}
	return out
}

// Generate returns the library trace named name, of duration d (0:
// LibraryDuration) from seed (0: the library's own); nil if none.
func Generate(name string, seed uint64, d time.Duration) *Trace {
	if d <= 0 {
		d = LibraryDuration
	}
	for _, p := range patterns {
		if p.name == name {
			if seed != 0 {
				p.seed = seed
			}
			return p.generate(d)
		}
	}
	return nil
}

func (p pattern) generate(d time.Duration) *Trace {
	r := rand.New(rand.NewPCG(p.seed, 0x6b657266))
	n := int(d / LibraryStep)
	t := &Trace{Name: p.name, About: p.about, Seed: p.seed, Step: LibraryStep, Manifest: p.manifest, MemoryByAge: p.byAge, Samples: make([]Sample, n)}
	for i := range n {
		s := p.at(time.Duration(i)*LibraryStep, r)
		s.CPU = max(s.CPU, 0)
		s.BurstCPU = max(s.BurstCPU, 0)
		s.Memory = math.Round(max(s.Memory, 0))
		if s.Burst*s.BurstCPU > s.CPU {
			s.CPU = s.Burst * s.BurstCPU
		}
		t.Samples[i] = s
	}
	return t
}

// noisy is v times a normal factor of relative deviation sd, never below 0.
func noisy(r *rand.Rand, v, sd float64) float64 { return max(v*(1+sd*r.NormFloat64()), 0) }

// daily is a day's load shape: 0 at 03:00, 1 at 15:00.
func daily(t time.Duration) float64 {
	x := float64(t%day) / float64(day)
	return 0.5 - 0.5*math.Cos(2*math.Pi*(x-0.125))
}

// weekday reports whether t falls Monday to Friday (the replays start on
// a Monday).
func weekday(t time.Duration) bool { return (t/day)%7 < 5 }

func values(cpuReq, cpuLim, memReqMi, memLimMi int64) Values {
	return Values{CPURequest: cpuReq, CPULimit: cpuLim, MemoryRequest: memReqMi * Mi, MemoryLimit: memLimMi * Mi}
}

var patterns = []pattern{
	{name: "steady", seed: 1, manifest: values(500, 1000, 512, 1024),
		about: "A service at a flat 0.3 cores and 300 Mi with small noise and rare short bursts.",
		at: func(_ time.Duration, r *rand.Rand) Sample {
			return Sample{CPU: noisy(r, 0.3, 0.05), Burst: 0.02, BurstCPU: 0.6, Memory: noisy(r, 300*Mi, 0.01)}
		}},
	{name: "diurnal", seed: 2, manifest: values(1000, 2000, 1024, 1024),
		about: "A web service that follows the day: 0.1 to 0.8 cores and 400 to 600 Mi, peaking mid-afternoon.",
		at: func(t time.Duration, r *rand.Rand) Sample {
			s := daily(t)
			cpu := noisy(r, 0.1+0.7*s, 0.08)
			return Sample{CPU: cpu, Burst: 0.05, BurstCPU: 2 * cpu, Memory: noisy(r, (400+200*s)*Mi, 0.02)}
		}},
	{name: "weekly", seed: 3, manifest: values(1000, 2000, 1024, 1536),
		about: "An office-hours service: the diurnal shape on weekdays up to 1 core and 700 Mi, a quarter of it at weekends.",
		at: func(t time.Duration, r *rand.Rand) Sample {
			s := daily(t)
			if !weekday(t) {
				s *= 0.25
			}
			cpu := noisy(r, 0.1+0.9*s, 0.08)
			return Sample{CPU: cpu, Burst: 0.05, BurstCPU: 2 * cpu, Memory: noisy(r, (400+300*s)*Mi, 0.02)}
		}},
	{name: "bursty", seed: 4, manifest: values(250, 500, 256, 512),
		about: "A latency-bound service at a mean of 0.1 cores whose requests come in bursts: 30 % of its 100 ms periods need 0.3 cores.",
		at: func(_ time.Duration, r *rand.Rand) Sample {
			f := min(max(noisy(r, 0.3, 0.1), 0.05), 0.6)
			return Sample{CPU: f*0.3 + (1-f)*0.02, Burst: f, BurstCPU: 0.3, Memory: noisy(r, 200*Mi, 0.01)}
		}},
	{name: "jvm", byAge: true, seed: 5, manifest: values(1000, 2000, 2048, 2048),
		about: "A JVM whose heap climbs from 600 Mi to 1.4 Gi over 20 minutes and drops at each collection, with GC bursts of 1.5 cores.",
		at: func(t time.Duration, r *rand.Rand) Sample {
			x := float64(t%(20*time.Minute)) / float64(20*time.Minute)
			return Sample{CPU: noisy(r, 0.5, 0.05), Burst: 0.1, BurstCPU: 1.5, Memory: noisy(r, (600+800*x)*Mi, 0.01)}
		}},
	{name: "leak", byAge: true, seed: 6, manifest: values(250, 500, 1024, 4096),
		about: "A slow memory leak of 20 Mi an hour from 300 Mi, reset by a weekly deploy, at a flat 0.2 cores.",
		at: func(t time.Duration, r *rand.Rand) Sample {
			h := float64(t%(7*day)) / float64(time.Hour)
			return Sample{CPU: noisy(r, 0.2, 0.05), Burst: 0.02, BurstCPU: 0.4, Memory: noisy(r, (300+20*h)*Mi, 0.005)}
		}},
	{name: "startup", byAge: true, seed: 7, manifest: values(500, 2000, 2048, 2048),
		about: "A service deployed daily whose first 10 minutes need 2 cores and 1.5 Gi (caches, JIT), then 0.2 cores and 500 Mi.",
		at: func(t time.Duration, r *rand.Rand) Sample {
			if t%day < 10*time.Minute {
				return Sample{CPU: noisy(r, 1.8, 0.05), Burst: 0.3, BurstCPU: 2, Memory: noisy(r, 1536*Mi, 0.01)}
			}
			return Sample{CPU: noisy(r, 0.2, 0.05), Burst: 0.02, BurstCPU: 0.4, Memory: noisy(r, 500*Mi, 0.01)}
		}},
	{name: "step", seed: 8, manifest: values(1000, 2000, 1024, 1024),
		about: "A step change in load on day 10: from 0.2 cores and 300 Mi to 0.8 cores and 700 Mi.",
		at: func(t time.Duration, r *rand.Rand) Sample {
			cpu, mem := 0.2, 300.0
			if t >= 10*day {
				cpu, mem = 0.8, 700
			}
			c := noisy(r, cpu, 0.05)
			return Sample{CPU: c, Burst: 0.05, BurstCPU: 1.5 * c, Memory: noisy(r, mem*Mi, 0.01)}
		}},
	{name: "batch", seed: 9, manifest: values(2000, 2000, 2048, 2048),
		about: "A batch job every 6 hours: 45 minutes at 1.5 cores with memory rising to 1.2 Gi, idle at 0.02 cores and 200 Mi between.",
		at: func(t time.Duration, r *rand.Rand) Sample {
			in := t % (6 * time.Hour)
			if in < 45*time.Minute {
				x := float64(in) / float64(45*time.Minute)
				return Sample{CPU: noisy(r, 1.5, 0.03), Memory: noisy(r, (200+1000*x)*Mi, 0.01)}
			}
			return Sample{CPU: noisy(r, 0.02, 0.1), Memory: noisy(r, 200*Mi, 0.01)}
		}},
}
