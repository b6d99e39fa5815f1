package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/heavy"
)

// RefusedConfig configures how a Limiter counts the identities its rules
// refuse (Limiter.TopRefused). Its zero value counts them, shown as they
// are, over the last one to two minutes, and publishes this replica's
// counts every 10 seconds to a store that keeps them (tollgate.RefusedStore).
type RefusedConfig struct {
	// Off turns the counting off.
	Off bool
	// HashKey, when set (at least 16 bytes), shows identities as the hex of
	// a keyed hash (RefusedID) rather than as they are, which may be
	// credentials. Replicas must share it for their counts to merge.
	HashKey []byte
	// Window is the longest a refusal is counted; a refusal is counted for
	// at least half of it. 0 means 2 minutes; at least 2 seconds.
	Window time.Duration
	// Publish is how often this replica publishes its counts to the store
	// while some rule refuses, so that TopRefused on any replica merges
	// them. 0 means 10s; a negative Publish never publishes.
	Publish time.Duration
	// Log, when positive, logs each rule's ten heaviest refused identities
	// on this replica (at INFO) at that interval, while it refuses some.
	Log time.Duration
	// Replica names this replica's counts in the store; "" means the host
	// name, the process id and a random suffix.
	Replica string
}

// Refused is the heaviest identities a rule refused over a window.
type Refused struct {
	// Start and End bound the window.
	Start, End time.Time
	// Shadow reports that the rule is a shadow rule: its refusals were
	// counted, not enforced.
	Shadow bool
	// Hashed reports that IDs are keyed hashes (RefusedConfig.HashKey).
	Hashed bool
	// Replicas is how many replicas' counts were merged (1 for local).
	Replicas int
	// Total is every refusal counted in the window.
	Total uint64
	// Top is the heaviest identities, heaviest first.
	Top []RefusedIdentity
	// Floor bounds the identities not in Top: none was refused more
	// than Floor times.
	Floor uint64
}

// RefusedIdentity is one identity's refusals in a window: about Count, at
// least Min and at most Max.
type RefusedIdentity struct {
	// ID is the key function's value ("" for ShareMissing's anonymous
	// identity), shortened when it is long or not UTF-8, or its RefusedID.
	ID              string
	Count, Min, Max uint64
}

// RefusedID returns how identity is shown under hashKey
// (RefusedConfig.HashKey), so that an operator can tell whether a suspect
// is among the refused.
func RefusedID(hashKey []byte, identity string) string { return heavy.OpaqueID(hashKey, identity) }

// The bounds of TopRefused's limit, and how many identities each replica
// publishes so that a merge of a few replicas' stays within the bounds of
// its counts.
const (
	defaultTopRefused = 10
	maxTopRefused     = 100
	publishedRefused  = 4 * maxTopRefused
	defaultPublish    = 10 * time.Second
)

// refusedBook is a Limiter's counts of refused identities: a sketch per
// rule name and shadowness, kept across SetRules.
type refusedBook struct {
	off      bool
	opts     heavy.Options
	publish  time.Duration // <= 0: never
	logEvery time.Duration // <= 0: never
	replica  string
	sketches sync.Map // sketchKey → *heavy.Sketch

	// mu guards the loop that publishes and logs, started by the first
	// refusal and stopped by Close.
	mu       sync.Mutex
	started  bool
	closed   bool
	timer    timer
	running  sync.WaitGroup
	lastLog  time.Time
	lastSent time.Time
}

type sketchKey struct {
	rule   string
	shadow bool
}

// init checks c and prepares the book.
func (rb *refusedBook) init(c RefusedConfig) error {
	rb.off, rb.opts = c.Off, heavy.Options{Window: c.Window, HashKey: c.HashKey}
	if c.Off {
		return nil
	}
	if c.Window != 0 && c.Window < 2*time.Second {
		return fmt.Errorf("engine: Refused.Window must be 0 or at least 2s, got %s", c.Window)
	}
	if c.HashKey != nil && len(c.HashKey) < heavy.MinKeyLen {
		return fmt.Errorf("engine: Refused.HashKey must be at least %d bytes, got %d", heavy.MinKeyLen, len(c.HashKey))
	}
	if _, err := heavy.New(rb.opts); err != nil { // the same checks TopRefused relies on
		return fmt.Errorf("engine: Refused: %w", err)
	}
	rb.publish, rb.logEvery, rb.replica = c.Publish, c.Log, c.Replica
	if rb.publish == 0 {
		rb.publish = defaultPublish
	}
	if rb.replica == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		rb.replica = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	return nil
}

// window is the sketches' window.
func (rb *refusedBook) window() time.Duration {
	if rb.opts.Window == 0 {
		return heavy.DefaultWindow
	}
	return rb.opts.Window
}

// observeRefused counts the identities checks refused (their store denied
// them, or their shadow rule would have).
func (l *Limiter) observeRefused(checks []*check) {
	rb := &l.refused
	if rb.off {
		return
	}
	var now time.Time
	for _, c := range checks {
		if o := c.res.outcome; o != outcomeDenied && o != outcomeShadowDenied {
			continue
		}
		if now.IsZero() {
			now = l.clk.now()
		}
		l.sketch(c.p.rule.Name, c.p.rule.Shadow, true).Observe(now, c.who)
	}
}

// sketch returns the sketch of a rule, made when make is set (else nil
// when there is none).
func (l *Limiter) sketch(rule string, shadow, make bool) *heavy.Sketch {
	rb := &l.refused
	k := sketchKey{rule, shadow}
	if s, ok := rb.sketches.Load(k); ok {
		return s.(*heavy.Sketch)
	}
	if !make {
		return nil
	}
	s, _ := heavy.New(rb.opts) // checked by init
	got, loaded := rb.sketches.LoadOrStore(k, s)
	if !loaded {
		l.startRefusedLoop()
	}
	return got.(*heavy.Sketch)
}

// TopRefused returns the limit heaviest identities the named rule refused
// over the window (RefusedConfig.Window), merged from every replica that
// published its counts to the store (tollgate.RefusedStore) within the
// window, or this replica's alone when local is set or the store keeps
// none. A limit of 0 means 10; at most 100. Errors are those of Peek; a
// Limiter whose counting is off answers one matching errors.ErrUnsupported.
func (l *Limiter) TopRefused(ctx context.Context, rule string, limit int, local bool) (Refused, error) {
	r, err := l.limitingRule(rule)
	switch {
	case err != nil:
		return Refused{}, err
	case limit < 0 || limit > maxTopRefused:
		return Refused{}, invalidArg("TopRefused: the limit %d is out of range: 0 (meaning %d) to %d", limit, defaultTopRefused, maxTopRefused)
	case l.refused.off:
		return Refused{}, fmt.Errorf("rate limit %q: refused identities are not counted (Config.Refused.Off): %w", rule, errors.ErrUnsupported)
	case limit == 0:
		limit = defaultTopRefused
	}
	now := l.clk.now()
	mine := l.snapshot(rule, r.Shadow, now, publishedRefused)
	snaps := []heavy.Snapshot{mine}
	rs, shared := l.store.(tollgate.RefusedStore)
	if !local && shared {
		got, err := rs.RefusedSummaries(ctx, rule)
		if err != nil {
			return Refused{}, storeFailed(rule, err)
		}
		for replica, b := range got {
			var s published
			if replica == l.refused.replica || json.Unmarshal(b, &s) != nil || s.Shadow != r.Shadow || now.Sub(s.Snapshot.End) > l.refused.window() {
				continue // this replica's (fresher above), unreadable, of another kind, or stale
			}
			snaps = append(snaps, s.Snapshot)
		}
	}
	merged, err := heavy.Merge(limit, snaps...)
	if err != nil {
		return Refused{}, fmt.Errorf("rate limit %q: replicas count refusals under different hash keys (Config.Refused.HashKey): %w", rule, err)
	}
	out := Refused{Start: merged.Start, End: merged.End, Shadow: r.Shadow, Hashed: merged.Key != "", Replicas: len(snaps), Total: merged.Total, Floor: merged.Floor}
	for _, e := range merged.Top {
		out.Top = append(out.Top, RefusedIdentity{ID: e.ID, Count: e.Count, Min: e.Min, Max: e.Max})
	}
	return out, nil
}

// published is what a replica publishes of a rule's refusals.
type published struct {
	Shadow   bool           `json:"shadow,omitempty"`
	Snapshot heavy.Snapshot `json:"snapshot"`
}

// snapshot is this replica's n heaviest refused identities of a rule at
// now; empty (over the window) when it refused none.
func (l *Limiter) snapshot(rule string, shadow bool, now time.Time, n int) heavy.Snapshot {
	if s := l.sketch(rule, shadow, false); s != nil {
		return s.Snapshot(now, n)
	}
	s, _ := heavy.New(l.refused.opts)
	return s.Snapshot(now, n)
}

// startRefusedLoop starts the timer that publishes and logs the counts,
// when there is something to do and it is not running or closed.
func (l *Limiter) startRefusedLoop() {
	rb := &l.refused
	_, shared := l.store.(tollgate.RefusedStore)
	if rb.tick(shared) <= 0 {
		return // nothing to publish to, nothing to log
	}
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.started || rb.closed {
		return
	}
	rb.started = true
	rb.schedule(l)
}

// tick is the period of the loop: the shorter of the publication's and
// the log's that are on.
func (rb *refusedBook) tick(shared bool) time.Duration {
	switch {
	case !shared || rb.publish <= 0:
		return rb.logEvery
	case rb.logEvery <= 0:
		return rb.publish
	}
	return min(rb.publish, rb.logEvery)
}

// schedule arms the loop's next tick; rb.mu is held.
func (rb *refusedBook) schedule(l *Limiter) {
	_, shared := l.store.(tollgate.RefusedStore)
	rb.running.Add(1)
	rb.timer = l.clk.afterFunc(rb.tick(shared), func() {
		defer rb.running.Done()
		l.refusedTick()
		rb.mu.Lock()
		defer rb.mu.Unlock()
		if !rb.closed {
			rb.schedule(l)
		}
	})
}

// refusedTick publishes and logs what is due.
func (l *Limiter) refusedTick() {
	rb := &l.refused
	now := l.clk.now()
	rs, shared := l.store.(tollgate.RefusedStore)
	publish := shared && rb.publish > 0 && now.Sub(rb.lastSent) >= rb.publish
	logNow := rb.logEvery > 0 && now.Sub(rb.lastLog) >= rb.logEvery
	if publish {
		rb.lastSent = now
	}
	if logNow {
		rb.lastLog = now
	}
	rb.sketches.Range(func(k, v any) bool {
		key, s := k.(sketchKey), v.(*heavy.Sketch)
		if publish {
			snap := s.Snapshot(now, publishedRefused)
			if snap.Total > 0 {
				l.publishRefused(rs, key, snap)
			}
		}
		if logNow {
			if snap := s.Snapshot(now, defaultTopRefused); snap.Total > 0 {
				l.log.Info("tollgate: heaviest refused identities on this replica", "rule", key.rule, "shadow", key.shadow,
					"window", now.Sub(snap.Start).Round(time.Second), "refusals", snap.Total, "top", topLine(snap))
			}
		}
		return true
	})
}

// publishRefused sends one rule's snapshot, within the store deadline.
func (l *Limiter) publishRefused(rs tollgate.RefusedStore, key sketchKey, snap heavy.Snapshot) {
	b, err := json.Marshal(published{Shadow: key.shadow, Snapshot: snap})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), l.storeTimeout)
		err = rs.PublishRefused(ctx, key.rule, l.refused.replica, b, l.refused.window()+l.refused.publish)
		cancel()
	}
	if err != nil {
		l.log.Debug("tollgate: could not publish the refused identities", "rule", key.rule, "error", err)
	}
}

// topLine is a snapshot's identities as "id=count" separated by spaces.
func topLine(s heavy.Snapshot) string {
	var b strings.Builder
	for i, e := range s.Top {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%q=%d", e.ID, e.Count)
	}
	return b.String()
}

// closeRefused stops the loop and waits for a tick in progress.
func (l *Limiter) closeRefused() {
	rb := &l.refused
	rb.mu.Lock()
	rb.closed = true
	if rb.timer != nil && rb.timer.Stop() {
		rb.running.Done() // the tick that will not run
	}
	rb.mu.Unlock()
	rb.running.Wait()
}
