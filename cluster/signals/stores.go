package signals

// Stores are the leader's stores of the agents' signals, built once. The
// stream's ingest writes them; the health watch and the recommender read
// them. One Subscribe serves both stores that signal.
type Stores struct {
	// Kernel holds the OOM kills and CFS counter samples.
	Kernel *Kernel
	// Statuses holds the container events the agents saw.
	Statuses *AgentStatuses
	// Usage holds the containers' newest usage readings, for the
	// recommender; it signals nothing.
	Usage *Usage
}

// New returns the stores the leader runs with: a Kernel that compacts as
// samples arrive (WithCompaction(DefaultRecent)), AgentStatuses and Usage
// with the default bounds.
func New() *Stores {
	return &Stores{Kernel: NewKernel(WithCompaction(DefaultRecent)), Statuses: NewAgentStatuses(0), Usage: NewUsage(0)}
}

// Subscribe calls fn for every signal either store gives (see
// Kernel.Subscribe and AgentStatuses.Subscribe); fn must be quick and must
// not block. The returned func unsubscribes from both.
func (s *Stores) Subscribe(fn func(Signal)) (cancel func()) {
	k, st := s.Kernel.Subscribe(fn), s.Statuses.Subscribe(fn)
	return func() {
		k()
		st()
	}
}
