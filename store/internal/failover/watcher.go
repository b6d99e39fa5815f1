package failover

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProbeEvery is how often a watcher reads its primaries while the store is
// in use or the journal holds writes: it bounds how long a change of
// primary can go unseen when no call meets it first, how long a replica
// attached to a primary can go unseen (its writes are not journaled
// meanwhile), and how long a write waits to be forgotten after its
// replicas acknowledge it.
const ProbeEvery = 50 * time.Millisecond

// idleTicks is how many reads in a row with no call and an empty journal
// stop a watcher's goroutine; the next call starts it again, and it reads
// the primaries at once.
const idleTicks = 4

// ProbeTimeout bounds one round of reads and the restores that follow.
const ProbeTimeout = time.Second

// Probe is one primary's replication and clock (µs), as the store read
// them for a watcher.
type Probe struct {
	Node string
	Info ReplInfo
	Now  int64
}

// A Watcher runs one goroutine while its store is in use (a call entered a
// gate within the last idleTicks reads) or its journal holds writes (see
// the package doc); Close stops it for good.
type Watcher struct {
	journal  *Journal
	restorer Restorer
	// probe reads every primary the store's client counts, each as a
	// Probe; one that did not answer is left out.
	probe func(ctx context.Context) ([]Probe, error)
	// gate returns the gate of node, nil when it has none yet.
	gate func(node string) *Gate
	// gates lists every gate.
	gates func() []*Gate

	mu      sync.Mutex
	running atomic.Bool
	called  atomic.Bool // a call entered a gate since the last read
	closed  bool
	stop    chan struct{}
	nudged  chan struct{}
	wg      sync.WaitGroup
	off     atomic.Bool
}

// NewWatcher returns a watcher of j's primaries, which it reads with probe
// and whose gates it finds with gate and gates.
func NewWatcher(j *Journal, r Restorer, probe func(context.Context) ([]Probe, error), gate func(string) *Gate, gates func() []*Gate) *Watcher {
	return &Watcher{journal: j, restorer: r, probe: probe, gate: gate, gates: gates, stop: make(chan struct{}), nudged: make(chan struct{}, 1)}
}

// Off reports whether the watcher was closed: the store journals nothing
// more.
func (w *Watcher) Off() bool { return w.off.Load() }

// Called notes a call entering a gate: the store is in use, and its
// primaries are read every ProbeEvery. It reads a flag or two, and writes
// one once per read of the primaries.
func (w *Watcher) Called() {
	if w.off.Load() {
		return
	}
	if !w.called.Load() {
		w.called.Store(true)
	}
	w.Ensure()
}

// Ensure starts the goroutine unless it runs. It is called after each
// write is added, and each call: it reads one flag. The goroutine clears
// the flag before it looks at the journal and the calls a last time, and a
// write is added (or a call noted) before the flag is read, so one of them
// sees the other.
func (w *Watcher) Ensure() {
	if w.running.Load() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running.Load() || w.closed {
		return
	}
	w.running.Store(true)
	w.wg.Add(1)
	go w.run()
}

// Nudge has the goroutine read the primaries at once.
func (w *Watcher) Nudge() {
	select {
	case w.nudged <- struct{}{}:
	default:
	}
}

// shut turns the journal off and has the goroutine stop, once.
func (w *Watcher) shut() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		w.off.Store(true)
		close(w.stop)
	}
	w.mu.Unlock()
}

// Close stops the goroutine, waiting for it at most until ctx ends, and
// empties the journal.
func (w *Watcher) Close(ctx context.Context) error {
	w.shut()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		w.journal.Clear()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Watcher) run() {
	defer w.wg.Done()
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	idle := 0
	for {
		w.tick()
		if w.called.Swap(false) {
			idle = 0
		} else {
			idle++
		}
		w.mu.Lock()
		if w.closed || w.journal.Len() == 0 && idle >= idleTicks {
			closed := w.closed
			if closed {
				w.journal.Clear()
			}
			w.running.Store(false)
			w.mu.Unlock()
			if !closed && (w.journal.Len() > 0 || w.called.Load()) {
				w.Ensure() // a write or a call came in meanwhile
			}
			return
		}
		w.mu.Unlock()
		select {
		case <-w.stop:
		case <-t.C:
		case <-w.nudged:
		}
	}
}

// tick reads every primary once: a primary whose server changed, or that
// no gate has verified, is verified (restoring what it lacks), as is one
// whose replicas call for another exactness than its gate's (Gate.Observe);
// the others' acknowledged writes are forgotten. Then the writes of
// retired eras added since their successor was verified are restored, and
// writes past the window leave.
func (w *Watcher) tick() {
	ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
	defer cancel()
	pos := map[string]uint64{}
	for _, g := range w.gates() {
		if era, ok := g.Era(); ok {
			pos[era] = w.journal.Pos(era)
		}
	}
	probes, err := w.probe(ctx)
	if errors.Is(err, redis.ErrClosed) {
		// The client was closed: nothing can be restored through it, and
		// the store journals nothing more.
		w.shut()
		return
	}
	for _, p := range probes {
		g := w.gate(p.Node)
		if g == nil || !p.Info.Master {
			continue
		}
		era, ok := g.Era()
		switch {
		case ok && EraOf(p.Info.ReplID) == era:
			w.journal.Observe(era, pos[era], p.Info, p.Now)
			if !g.Observe(p.Info) {
				continue
			}
			g.Invalidate() // a replica attached, or gone: exactness changes
		case ok:
			g.Invalidate()
		}
		_ = g.Verify(ctx) // on an error the next tick, or the next call, tries again
	}
	if retired := w.journal.Retired(); len(retired) > 0 {
		if entries := w.journal.Take(retired...); len(entries) > 0 {
			_, _, failed, _ := w.restorer.Restore(ctx, entries)
			for _, f := range failed {
				w.journal.Add(f)
			}
		}
	}
	w.journal.Expire()
}
