package fence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kerf-dev/kerf/cluster/eventrec"
	"github.com/kerf-dev/kerf/internal/kube"
)

// ErrNotLeading is the error of a write the fence refused: the replica
// cannot show that it still holds the Lease (see Fence).
var ErrNotLeading = errors.New("not leading")

// Fence ties the leader's writes to its leadership (docs/leader.md,
// "Fencing"). Each mutating request passes two checks before it is sent:
//   - Locally: the elector renews the Lease every RetryPeriod through
//     Lock, which notes when each successful renew was sent; the
//     newest must be younger than the renew deadline, by the monotonic and
//     the wall clock. Another replica takes the Lease only once it has seen
//     it unrenewed for a whole LeaseDuration, from a reading made after
//     that renew was sent. A leader frozen past its Lease (SIGSTOP) wakes to
//     find its renew too old and writes nothing, even before its elector
//     has noticed the loss.
//   - Live: the Lease, read from the apiserver, names this replica as its
//     holder. This covers what no local clock can tell. A VM paused with
//     its clocks stopped wakes with a renew that looks fresh. Its elector
//     believes it leads for up to another renew deadline while another
//     replica already acts. Writes arriving together share a read, but
//     only one begun after each of them arrived (readLease). The local
//     check runs again once the Lease is read.
//
// The Event recorder writes through the fence too (NewRecorder). The
// rollbacks' client reads the Lease on a reader of its own (reader,
// wrapReading), in its own budget.
//
// What is left is the moment between the live read and the write, which
// the writes' own preconditions (resourceVersion) narrow further.
type Fence struct {
	identity string
	// valid is how long a renew keeps writes allowed: the renew deadline.
	valid time.Duration
	// lease names the Lease.
	lease string
	// leaseReads reads the Lease live for the writes Wrap fences; a
	// budget of its own (reader) has its own.
	*leaseReads
	refused prometheus.Counter
	// reads counts the live reads of the Lease, by every reader.
	reads prometheus.Counter
	log   *slog.Logger

	mu sync.Mutex
	// recorder is the event recorder whose Events pass the fence
	// (NewRecorder).
	recorder events.EventRecorder

	// renewed is when the newest successful renew (or acquisition) by
	// this identity was sent, with its monotonic reading; zero when the
	// replica does not hold the Lease.
	renewed time.Time
}

// leaseReads reads the Lease live for the writes of one client budget,
// sharing each read between the writes waiting for it (readLease). The
// rollbacks' writes have one of their own (docs/leader.md, "The clients
// and their budgets"), so that they never wait behind the reads of the
// applies' writes, nor in the applies' rate limiter.
type leaseReads struct {
	// leases reads the Lease (name) live; nil skips the live check.
	leases coordinationv1client.LeaseInterface
	name   string
	// timeout bounds one read: the renew deadline.
	timeout time.Duration
	count   prometheus.Counter

	// readMu guards reading and next: the live read in flight, and the
	// one that begins once it ends, which every write arriving meanwhile
	// waits for (readLease).
	readMu  sync.Mutex
	reading bool
	next    *leaseRead
}

// New returns the fence of replica identity over the Lease name. It reads
// the Lease live through leases; nil skips the live check. A renew keeps
// writes allowed for valid, the renew deadline. Its counters are
// registered with reg.
func New(identity string, valid time.Duration, leases coordinationv1client.LeaseInterface, name string, reg prometheus.Registerer, log *slog.Logger) *Fence {
	f := &Fence{identity: identity, valid: valid, lease: name, log: log,
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_leader_fenced_writes_total",
			Help: "Writes the leader refused to send because it could not show it still held the Lease (renewed within the renew deadline, and named its holder when read).",
		})}
	f.reads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kerf_leader_fence_lease_reads_total",
		Help: "Live reads of the Lease by the fence: one per write, or fewer when writes arrive together and share one read begun after all of them.",
	})
	reg.MustRegister(f.refused, f.reads)
	f.leaseReads = f.reader(leases)
	return f
}

// reader returns a reader of the Lease through leases for the writes of
// another budget than the fence's own. Its reads are shared only between
// that budget's writes, and are counted with the fence's. A nil leases
// skips the live check.
func (f *Fence) reader(leases coordinationv1client.LeaseInterface) *leaseReads {
	return &leaseReads{leases: leases, name: f.lease, timeout: f.valid, count: f.reads}
}

// leaseRead is one live read of the Lease, shared by the writes that
// arrived before it began.
type leaseRead struct {
	done  chan struct{}
	lease *coordinationv1.Lease
	err   error
}

// readLease reads the Lease live for a write, sharing the read with the
// other writes waiting at the same time. It shares only a read that
// begins after the write arrived. A read already in flight may have been
// answered before a pause that the write comes after. So the write waits
// for the next one, which begins as soon as the one in flight ends. One
// write at a time costs one read each; n writes arriving together cost at
// most two.
func (l *leaseReads) readLease(ctx context.Context) (*coordinationv1.Lease, error) {
	l.readMu.Lock()
	r := l.next
	if r == nil {
		r = &leaseRead{done: make(chan struct{})}
		l.next = r
		if !l.reading {
			l.beginRead()
		}
	}
	l.readMu.Unlock()
	select {
	case <-r.done:
		return r.lease, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// beginRead sends the next read; readMu is held. The read has its own
// deadline, not a write's context: one write giving up does not fail the
// others.
func (l *leaseReads) beginRead() {
	r := l.next
	l.next, l.reading = nil, true
	l.count.Inc()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		r.lease, r.err = l.leases.Get(ctx, l.name, metav1.GetOptions{})
		cancel()
		close(r.done)
		l.readMu.Lock()
		defer l.readMu.Unlock()
		l.reading = false
		if l.next != nil {
			l.beginRead()
		}
	}()
}

// observe records the outcome of a Lease write sent at sent.
func (f *Fence) observe(sent time.Time, rec resourcelock.LeaderElectionRecord, err error) {
	if err != nil {
		return // the previous renew still counts until it is too old
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rec.HolderIdentity == f.identity {
		f.renewed = sent
	} else {
		f.renewed = time.Time{} // released
	}
}

// Held reports whether the replica may write now, and how old its newest
// renew is. Both the monotonic and the wall clock must agree: the monotonic
// clock is immune to clock steps, the wall clock keeps counting where a
// paused VM's monotonic clock may not have.
func (f *Fence) Held() (age time.Duration, ok bool) {
	f.mu.Lock()
	renewed := f.renewed
	f.mu.Unlock()
	if renewed.IsZero() {
		return 0, false
	}
	now := time.Now()
	age = max(now.Sub(renewed), now.Round(0).Sub(renewed.Round(0)))
	return age, age < f.valid
}

// check returns nil when a write may be sent, else an ErrNotLeading,
// logged and counted. reads reads the Lease live.
func (f *Fence) check(ctx context.Context, what string, reads *leaseReads) error {
	age, ok := f.Held()
	why := fmt.Sprintf("last renew %s ago, renew deadline %s", age.Truncate(time.Millisecond), f.valid)
	if ok && reads.leases != nil {
		lease, err := reads.readLease(ctx)
		switch {
		case err != nil:
			ok, why = false, "read the Lease: "+err.Error()
		case lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != f.identity:
			holder := ""
			if lease.Spec.HolderIdentity != nil {
				holder = *lease.Spec.HolderIdentity
			}
			ok, why = false, fmt.Sprintf("the Lease is held by %q", holder)
		default:
			// A pause during the read shows here.
			age, ok = f.Held()
			why = fmt.Sprintf("last renew %s ago once the Lease was read, renew deadline %s", age.Truncate(time.Millisecond), f.valid)
		}
	}
	if ok {
		return nil
	}
	f.refused.Inc()
	f.log.Warn("write refused: not leading", "write", what, "identity", f.identity, "why", why)
	return fmt.Errorf("%s: %w (%s)", what, ErrNotLeading, why)
}

// Wrap fences every mutating request of a transport, reading the Lease
// with the fence's own reader: reads pass.
func (f *Fence) Wrap(rt http.RoundTripper) http.RoundTripper {
	return f.wrapReading(f.leaseReads)(rt)
}

// wrapReading is Wrap for a budget of its own, whose writes read the
// Lease with reads (reader).
func (f *Fence) wrapReading(reads *leaseReads) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			switch req.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
			default:
				if err := f.check(req.Context(), req.Method+" "+req.URL.Path, reads); err != nil {
					return nil, err
				}
			}
			return rt.RoundTrip(req)
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Lock is the elector's Lease lock, noting each successful renew in
// its fence.
type Lock struct {
	resourcelock.Interface
	Fence *Fence
}

// Create implements resourcelock.Interface, noting the renew.
func (l Lock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, rec)
	l.Fence.observe(sent, rec, err)
	return err
}

// Update implements resourcelock.Interface, noting the renew.
func (l Lock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Update(ctx, rec)
	l.Fence.observe(sent, rec, err)
	return err
}

// NewRecorder returns the leader's event recorder, whose Events are
// written with cfg, the fenced config. An Event is emitted only after the
// status write it reports passed the fence. But the recorder's workers
// send it later, and try again for up to two minutes when the apiserver
// cannot be reached. So without the fence a leader frozen past its Lease
// would still emit on waking. An Event the fence refused is not tried
// again. The recorder runs with the manager from its start until its
// stop; it starts before the election, so nothing emitted is dropped.
func (f *Fence) NewRecorder(cfg *rest.Config, mgr manager.Manager, name string, reg prometheus.Registerer) (events.EventRecorder, error) {
	cs, err := eventsv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("fenced events client: %w", err)
	}
	r, err := eventrec.New(eventrec.Config{Events: cs, Scheme: kube.Scheme, Controller: name, Registerer: reg, Log: f.log,
		Final: func(err error) bool { return errors.Is(err, ErrNotLeading) }})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(r); err != nil {
		return nil, fmt.Errorf("add the event recorder: %w", err)
	}
	f.recorder = r
	return f.recorder, nil
}

// Recorder returns the event recorder NewRecorder made, nil before.
func (f *Fence) Recorder() events.EventRecorder { return f.recorder }

// Renewed returns when the newest successful renew by this replica was
// sent; zero when it does not hold the Lease.
func (f *Fence) Renewed() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.renewed
}
