// Package eventrec records events.k8s.io/v1 Events, as client-go's
// tools/events broadcaster does, within fixed bounds.
//
// client-go's broadcaster keeps a copy of every Event it sent, under its
// series key, for six to twelve minutes: finishSeries runs every six and
// drops what is older than six. It sends each Event from a goroutine of
// its own that retries for up to two minutes. Both grow with the rate of
// Events. docs/leader.md, "Events: why a recorder of Kerf's own", has
// what that cost the leader.
//
// A Recorder keeps the series of at most MaxSeries keys, the least
// recently used going first. It queues at most QueueSize Events for its
// Workers. An Event that finds the queue full is dropped and counted
// (kerf_leader_events_dropped_total). client-go's broadcaster drops one
// its watcher's queue of 1,000 has no room for, uncounted.
//
// What it writes is client-go's: the Event's name, fields and series. An
// Event isomorphic to one sent within SeriesWindow is counted in the
// first one's series rather than written anew. Isomorphic means the same
// type, reason, action, regarding and related object. The series is
// patched once for every burst of repeats, carrying their count.
package eventrec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/lru"
)

// Defaults of Config.
const (
	// DefaultQueueSize is client-go's broadcaster's queue (maxQueuedEvents).
	DefaultQueueSize = 1000
	// DefaultMaxSeries bounds the series remembered: about 3 MB of the
	// leader's heap, full (TestTheSeriesHoldWhatTheDefaultSays).
	DefaultMaxSeries = 4096
	// DefaultSeriesWindow is client-go's: an Event isomorphic to one sent
	// less than this before joins its series.
	DefaultSeriesWindow = 6 * time.Minute
	// DefaultWorkers send the queued Events.
	DefaultWorkers = 2
	// DefaultRetries bounds the attempts at an Event the apiserver could
	// not be reached for, DefaultRetryWait apart (client-go's: 12, 10 s).
	DefaultRetries   = 12
	DefaultRetryWait = 10 * time.Second
)

// Config configures a Recorder. Zero fields take their defaults.
type Config struct {
	// Events writes the Events (a fenced client's, for the leader).
	Events eventsv1client.EventsGetter
	// Scheme maps the objects Events regard to their references.
	Scheme *runtime.Scheme
	// Controller is the Events' reportingController; their
	// reportingInstance is Controller-<hostname>, as client-go's.
	Controller   string
	QueueSize    int
	MaxSeries    int
	SeriesWindow time.Duration
	Workers      int
	Retries      int
	RetryWait    time.Duration
	// Final, when set, says an error is not worth another try though the
	// apiserver did not answer it. The leader's fence refusing a write
	// while it cannot show it leads is one. The Event is counted as
	// failed at once, and its worker is free for the next.
	Final func(error) bool
	// Registerer takes kerf_leader_events_dropped_total and
	// kerf_leader_events_failed_total.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Recorder is an events.EventRecorder whose workers send its Events while
// it runs (Start). It is a manager Runnable run leading or not, so an
// Event emitted before the election is not dropped.
type Recorder struct {
	cfg      Config
	instance string
	queue    chan *job
	dropped  prometheus.Counter
	failed   prometheus.Counter
	now      func() time.Time
	log      *slog.Logger

	mu sync.Mutex
	// series maps a series key's hash (seed) to its newest Event's series
	// state.
	series *lru.Cache
	seed   maphash.Seed
}

var _ events.EventRecorder = (*Recorder)(nil)

// seriesKey is what makes two Events isomorphic (client-go's eventKey,
// whose reporting controller and instance are the Recorder's own).
type seriesKey struct {
	eventType, action, reason string
	regarding, related        corev1.ObjectReference
}

// series is what a Recorder keeps of an Event sent, for its repeats:
// what makes the Event again (eventOf) when its series finds it gone. It
// is keyed by its key's hash, 8 bytes where the key is 272, and holds the
// key itself once. An Event isomorphic to none whose series is found under
// its hash (a collision) starts a series of its own in its place.
type series struct {
	key                   seriesKey
	name, namespace, note string
	eventTime             time.Time
	// count and last are the repeats so far, written or not.
	count int32
	last  time.Time
	// queued says a write of the series is queued: a repeat meanwhile
	// only counts, and that write carries it.
	queued bool
}

// job is one write: an Event to create, or a series to patch.
type job struct {
	create *eventsv1.Event
	series *series
}

// New returns a Recorder; it sends nothing until Start.
func New(cfg Config) (*Recorder, error) {
	switch {
	case cfg.Events == nil:
		return nil, errors.New("eventrec: Config.Events is required")
	case cfg.Scheme == nil:
		return nil, errors.New("eventrec: Config.Scheme is required")
	case cfg.Controller == "":
		return nil, errors.New("eventrec: Config.Controller is required")
	}
	setDefault(&cfg.QueueSize, DefaultQueueSize)
	setDefault(&cfg.MaxSeries, DefaultMaxSeries)
	setDefault(&cfg.SeriesWindow, DefaultSeriesWindow)
	setDefault(&cfg.Workers, DefaultWorkers)
	setDefault(&cfg.Retries, DefaultRetries)
	setDefault(&cfg.RetryWait, DefaultRetryWait)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	hostname, _ := os.Hostname()
	r := &Recorder{cfg: cfg, instance: cfg.Controller + "-" + hostname, queue: make(chan *job, cfg.QueueSize),
		series: lru.New(cfg.MaxSeries), seed: maphash.MakeSeed(), now: time.Now, log: cfg.Log.With("component", "eventRecorder"),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_leader_events_dropped_total",
			Help: "Events the leader did not send because its queue of Events to send was full (the apiserver slower than the Events come).",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_leader_events_failed_total",
			Help: "Events (or series updates) the apiserver refused, or could not be reached for in every attempt.",
		})}
	if err := errors.Join(cfg.Registerer.Register(r.dropped), cfg.Registerer.Register(r.failed)); err != nil {
		return nil, fmt.Errorf("eventrec: register metrics: %w", err)
	}
	return r, nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Eventf implements events.EventRecorder: it queues an Event about
// regarding (and related, if not nil), or counts a repeat in the series of
// an isomorphic one. It never blocks.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	now := r.now()
	message := fmt.Sprintf(note, args...)
	ref, err := reference.GetReference(r.cfg.Scheme, regarding)
	if err != nil {
		r.log.Error("event not recorded: no reference to the object it regards", "reason", reason, "note", message, "err", err)
		return
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		if relatedRef, err = reference.GetReference(r.cfg.Scheme, related); err != nil {
			r.log.Debug("event recorded without its related object: no reference to it", "reason", reason, "err", err)
		}
	}
	if !util.ValidateEventType(eventtype) {
		r.log.Error("event not recorded: unsupported type", "type", eventtype, "reason", reason)
		return
	}
	key := seriesKey{eventType: eventtype, action: action, reason: reason, regarding: *ref}
	if relatedRef != nil {
		key.related = *relatedRef
	}

	hash := maphash.Comparable(r.seed, key)
	r.mu.Lock()
	var j *job
	if v, ok := r.series.Get(hash); ok && v.(*series).key == key && now.Sub(v.(*series).last) < r.cfg.SeriesWindow {
		s := v.(*series)
		s.count++
		s.last = now
		if !s.queued {
			s.queued = true
			j = &job{series: s}
		}
	} else {
		ns := ref.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		s := &series{key: key, name: util.GenerateEventName(ref.Name, now.UnixNano()), namespace: ns, note: message,
			eventTime: now, count: 1, last: now}
		r.series.Add(hash, s)
		j = &job{create: r.eventOf(s)}
	}
	r.mu.Unlock()
	if j == nil {
		return
	}
	select {
	case r.queue <- j:
	default:
		if j.series != nil {
			r.mu.Lock()
			j.series.queued = false
			r.mu.Unlock()
		}
		r.dropped.Inc()
	}
}

// Start sends the queued Events until ctx is done; what is queued then is
// dropped.
func (r *Recorder) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-r.queue:
					r.send(ctx, j)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection says a Recorder runs leading or not.
func (r *Recorder) NeedLeaderElection() bool { return false }

// send writes j, again up to Retries times while the apiserver cannot be
// reached.
func (r *Recorder) send(ctx context.Context, j *job) {
	for try := 1; ; try++ {
		err := r.write(ctx, j)
		if err == nil {
			return
		}
		var status apierrors.APIStatus
		final := r.cfg.Final != nil && r.cfg.Final(err)
		if errors.As(err, &status) || final || try >= r.cfg.Retries || ctx.Err() != nil {
			r.failed.Inc()
			r.log.Warn("event not recorded", "reason", j.reason(), "err", err, "attempts", try)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.cfg.RetryWait):
		}
	}
}

func (j *job) reason() string {
	if j.create != nil {
		return j.create.Reason
	}
	return j.series.key.reason
}

// eventOf is the Event s counts the repeats of, as first written.
func (r *Recorder) eventOf(s *series) *eventsv1.Event {
	e := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: s.name, Namespace: s.namespace},
		EventTime:           metav1.MicroTime{Time: s.eventTime},
		ReportingController: r.cfg.Controller,
		ReportingInstance:   r.instance,
		Action:              s.key.action,
		Reason:              s.key.reason,
		Regarding:           s.key.regarding,
		Note:                s.note,
		Type:                s.key.eventType,
	}
	if s.key.related != (corev1.ObjectReference{}) {
		related := s.key.related
		e.Related = &related
	}
	return e
}

// write makes one attempt at j. A series whose Event is gone (expired, or
// never written) is created whole, with its series.
func (r *Recorder) write(ctx context.Context, j *job) error {
	if e := j.create; e != nil {
		_, err := r.cfg.Events.Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // its series' write, which found it missing, made it first
		}
		return err
	}
	r.mu.Lock()
	s := j.series
	s.queued = false
	ser := &eventsv1.EventSeries{Count: s.count, LastObservedTime: metav1.MicroTime{Time: s.last}}
	r.mu.Unlock()
	patch, err := json.Marshal(map[string]any{"series": ser})
	if err != nil {
		return err
	}
	events := r.cfg.Events.Events(s.namespace)
	patchSeries := func() error {
		_, err := events.Patch(ctx, s.name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	err = patchSeries()
	if apierrors.IsNotFound(err) {
		whole := r.eventOf(s)
		whole.Series = ser
		_, err = events.Create(ctx, whole, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// The Event's own create, on another worker, made it meanwhile:
			// the series goes to it.
			err = patchSeries()
		}
	}
	return err
}
