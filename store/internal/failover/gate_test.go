package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// replyError is an error reply from Redis, as go-redis gives one.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it a Redis reply (go-redis's Error).
func (replyError) RedisError() {}

// server is what a fake gate's info answers; restorer records restores.
type fakeServer struct {
	mu   sync.Mutex
	inf  ReplInfo
	err  error
	hits int
}

func (s *fakeServer) info(context.Context) (ReplInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hits++
	return s.inf, s.err
}

func (s *fakeServer) set(inf ReplInfo, err error) {
	s.mu.Lock()
	s.inf, s.err = inf, err
	s.mu.Unlock()
}

type fakeRestorer struct {
	mu       sync.Mutex
	restored []Entry
	eras     []any
	fail     error
}

func (r *fakeRestorer) Restore(ctx context.Context, entries []Entry) (int, int, []Entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return 0, 0, entries, r.fail
	}
	b, _ := ctx.Value(bypassKey{}).(*bypass)
	if b != nil {
		r.eras = append(r.eras, b.era)
	}
	r.restored = append(r.restored, entries...)
	return len(entries), 0, nil, nil
}

const (
	replA = "aaaaaaaaaaaa1111111111111111111111111111"
	replB = "bbbbbbbbbbbb2222222222222222222222222222"
)

func newTestGate(t *testing.T) (*Gate, *fakeServer, *fakeRestorer, *Journal) {
	t.Helper()
	j := NewJournal(time.Minute, DefaultMaxBytes)
	srv := &fakeServer{inf: ReplInfo{Master: true, ReplID: replA, ReplID2: "0000000000000000000000000000000000000000"}}
	r := &fakeRestorer{}
	g := NewGate(GateConfig{Node: "n", Journal: j, Restorer: r, Info: srv.info, Stamped: func([]any) (int, bool) { return 0, true }, Exactness: Always})
	t.Cleanup(func() { _ = g.Wait(context.Background()) })
	return g, srv, r, j
}

// TestGateVerifiesOnceThenStamps lets calls through a gate: the first
// verifies the primary (one read), every one is stamped with its era.
func TestGateVerifiesOnceThenStamps(t *testing.T) {
	g, srv, _, _ := newTestGate(t)
	for range 3 {
		p, err := g.Enter(context.Background())
		if err != nil || p.Era() != "aaaaaaaaaaaa" {
			t.Fatalf("Enter: %v %v, want era aaaaaaaaaaaa", p.Era(), err)
		}
		p.Leave()
	}
	if srv.hits != 1 {
		t.Errorf("the primary was read %d times, want once", srv.hits)
	}
}

// TestGateRestoresBeforeServingANewPrimary replaces the primary behind a
// gate (a promoted replica naming the old one's replication id as its
// second): the next call waits until the old era's writes were restored,
// stamped with the new era, and goes through stamped with it.
func TestGateRestoresBeforeServingANewPrimary(t *testing.T) {
	g, srv, r, j := newTestGate(t)
	p, _ := g.Enter(context.Background())
	p.Leave()
	j.Add(Entry{Era: "aaaaaaaaaaaa", Seq: 1, At: 1, Expires: 2, Write: Write{Key: "k", Delta: 1}})
	srv.set(ReplInfo{Master: true, ReplID: replB, ReplID2: replA}, nil)
	g.Invalidate()
	p, err := g.Enter(context.Background())
	if err != nil || p.Era() != "bbbbbbbbbbbb" {
		t.Fatalf("Enter after the change: %v %v", p.Era(), err)
	}
	p.Leave()
	if len(r.restored) != 1 || len(r.eras) != 1 || r.eras[0] != "bbbbbbbbbbbb" {
		t.Fatalf("restored %v under eras %v, want the one write under the new era", r.restored, r.eras)
	}
	if g.Changes() != 1 || !j.IsRetired("aaaaaaaaaaaa") {
		t.Errorf("changes %d, era a retired %v", g.Changes(), j.IsRetired("aaaaaaaaaaaa"))
	}
	// The same primary verified again (its epoch ended, say, as its
	// exactness did): it still names the old era as its second, and is no
	// second change.
	g.Invalidate()
	p, err = g.Enter(context.Background())
	if err != nil || p.Era() != "bbbbbbbbbbbb" {
		t.Fatalf("Enter after a second verification: %v %v", p.Era(), err)
	}
	p.Leave()
	if g.Changes() != 1 {
		t.Errorf("changes %d after the new primary was verified again, want 1", g.Changes())
	}
}

// TestGateKeepsWhatItCouldNotRestore fails a restore: the call gets the
// error, the writes stay in the journal, and the next call restores them.
func TestGateKeepsWhatItCouldNotRestore(t *testing.T) {
	g, srv, r, j := newTestGate(t)
	p, _ := g.Enter(context.Background())
	p.Leave()
	j.Add(Entry{Era: "aaaaaaaaaaaa", Seq: 1, At: 1, Expires: 2, Write: Write{Key: "k", Delta: 1}})
	srv.set(ReplInfo{Master: true, ReplID: replB, ReplID2: replA}, nil)
	g.Invalidate()
	r.fail = errors.New("no reply")
	if _, err := g.Enter(context.Background()); err == nil {
		t.Fatal("Enter with the restore failing: no error")
	}
	if j.Len() != 1 {
		t.Fatalf("%d writes kept, want 1", j.Len())
	}
	r.fail = nil
	p, err := g.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Leave()
	if len(r.restored) != 1 || j.Len() != 0 {
		t.Fatalf("restored %d, journal %d; want 1 and 0", len(r.restored), j.Len())
	}
}

// TestGateRefusesAConnectionToAnotherServer checks new connections: to the
// server verified, accepted; to another, refused and the epoch ended;
// while a call stamped for the ended epoch is in flight, a connection to
// the new server is refused too; once it ended, accepted.
func TestGateRefusesAConnectionToAnotherServer(t *testing.T) {
	g, _, _, _ := newTestGate(t)
	p, _ := g.Enter(context.Background()) // in flight, stamped a
	if err := g.Check(ReplInfo{Master: true, ReplID: replA}, true); err != nil {
		t.Fatalf("a connection to the server verified: %v", err)
	}
	other := ReplInfo{Master: true, ReplID: replB, ReplID2: replA}
	if err := g.Check(other, true); !errors.Is(err, ErrServerChanged) {
		t.Fatalf("a connection to another server: %v, want ErrServerChanged", err)
	}
	if _, ok := g.Era(); ok {
		t.Fatal("the epoch is still in force")
	}
	if err := g.Check(other, true); !errors.Is(err, ErrServerChanged) {
		t.Fatalf("a connection to the new server while a call of the old epoch is in flight: %v", err)
	}
	if err := g.Check(ReplInfo{}, false); !errors.Is(err, ErrServerChanged) {
		t.Fatalf("a connection whose server could not be read: %v", err)
	}
	p.Leave()
	if err := g.Check(other, true); err != nil {
		t.Fatalf("a connection to the new server once the old epoch's calls ended: %v", err)
	}
}

// TestGateWaitsWithinTheCallsDeadline makes a verification slow: a call
// leaves at its deadline; the verification goes on, and the next call
// finds the primary verified.
func TestGateWaitsWithinTheCallsDeadline(t *testing.T) {
	j := NewJournal(time.Minute, DefaultMaxBytes)
	release := make(chan struct{})
	info := func(ctx context.Context) (ReplInfo, error) {
		<-release
		return ReplInfo{Master: true, ReplID: replA}, nil
	}
	g := NewGate(GateConfig{Node: "n", Journal: j, Restorer: &fakeRestorer{}, Info: info, Stamped: func([]any) (int, bool) { return 0, true }, Exactness: Always})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.Enter(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enter during a slow verification: %v, want the call's deadline", err)
	}
	close(release)
	p, err := g.Enter(context.Background())
	if err != nil || p.Era() != "aaaaaaaaaaaa" {
		t.Fatalf("Enter after: %v %v", p.Era(), err)
	}
	p.Leave()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestGateWaitCountsEveryVerification makes verifications slow: Wait,
// asked while one runs, returns its context's error when that ends first
// and nil once the verification ended; Wait racing the first calls of
// fresh gates (the race detector watches) returns only once none runs.
func TestGateWaitCountsEveryVerification(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	info := func(ctx context.Context) (ReplInfo, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		return ReplInfo{Master: true, ReplID: replA}, nil
	}
	newGate := func() *Gate {
		return NewGate(GateConfig{Node: "n", Journal: NewJournal(time.Minute, DefaultMaxBytes), Restorer: &fakeRestorer{},
			Info: info, Stamped: func([]any) (int, bool) { return 0, true }, Exactness: Always})
	}
	g := newGate()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatalf("Wait with no verification: %v", err)
	}
	entered := make(chan error, 1)
	go func() {
		p, err := g.Enter(context.Background())
		p.Leave()
		entered <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait during a verification that does not end: %v, want its deadline", err)
	}
	close(release)
	if err := g.Wait(context.Background()); err != nil {
		t.Fatalf("Wait once released: %v", err)
	}
	if err := <-entered; err != nil {
		t.Fatalf("the call that waited for the verification: %v", err)
	}
	for range 20 {
		g := newGate()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				p, err := g.Enter(context.Background())
				if err == nil {
					p.Leave()
				}
			})
		}
		wg.Go(func() { _ = g.Wait(context.Background()) })
		wg.Wait()
		if err := g.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		g.runMu.Lock()
		runs := g.runs
		g.runMu.Unlock()
		if runs != 0 {
			t.Fatalf("%d verifications counted after every call and Wait returned, want 0", runs)
		}
	}
}

// TestGateWithoutInfo answers NOPERM to INFO: the gate is blind, stamps
// nothing, says so once, and lets every connection through.
func TestGateWithoutInfo(t *testing.T) {
	g, srv, _, _ := newTestGate(t)
	srv.set(ReplInfo{}, replyError("NOPERM this user has no permissions to run the 'info' command"))
	var told int
	g.OnBlind = func(error) { told++ }
	p, err := g.Enter(context.Background())
	if err != nil || p.Era() != "" {
		t.Fatalf("Enter: %q %v, want no era", p.Era(), err)
	}
	p.Leave()
	if err := g.Check(ReplInfo{Master: true, ReplID: replB}, true); err != nil {
		t.Fatalf("a connection through a blind gate: %v", err)
	}
	if told != 1 {
		t.Errorf("told %d times, want once", told)
	}
}

// TestGateExactWhenReplicated runs a gate that pays for exactness only
// while its primary has a replica: with none, calls are stamped with no
// era and a connection to another server is not refused; a replica read
// ends that epoch and the next is exact; the replica gone, the epoch stays
// exact for the grace, then ends, and the next is not; a restore of the
// era before is still stamped with the new era.
func TestGateExactWhenReplicated(t *testing.T) {
	j := NewJournal(time.Minute, DefaultMaxBytes)
	srv := &fakeServer{inf: ReplInfo{Master: true, ReplID: replA}}
	r := &fakeRestorer{}
	var calls int
	clock := time.Unix(1_800_000_000, 0)
	g := NewGate(GateConfig{Node: "n", Journal: j, Restorer: r, Info: srv.info, Stamped: func([]any) (int, bool) { return 0, true },
		Grace: 10 * time.Second, OnCall: func() { calls++ }, Now: func() time.Time { return clock }})
	t.Cleanup(func() { _ = g.Wait(context.Background()) })
	var modes []bool
	g.OnMode = func(exact bool, _ ReplInfo) { modes = append(modes, exact) }
	enter := func(want string) {
		t.Helper()
		p, err := g.Enter(context.Background())
		if err != nil || p.Era() != want {
			t.Fatalf("Enter: era %q (%v), want %q", p.Era(), err, want)
		}
		p.Leave()
	}

	enter("")
	if g.Exact() || calls != 1 {
		t.Fatalf("no replica: exact %v, %d calls noted; want not exact, 1", g.Exact(), calls)
	}
	if g.Observe(ReplInfo{Master: true, ReplID: replA}) {
		t.Fatal("no replica read again: the epoch should stand")
	}
	// Another server behind the address: a call without an era may go
	// there; the epoch ends, for the next call to verify it.
	srv.set(ReplInfo{Master: true, ReplID: replB}, nil)
	if err := g.Check(ReplInfo{Master: true, ReplID: replB}, true); err != nil {
		t.Fatalf("a connection to another server, no era stamped: %v", err)
	}
	enter("")

	// A replica attaches.
	withReplica := ReplInfo{Master: true, ReplID: replB, Replicas: 1}
	if !g.Observe(withReplica) {
		t.Fatal("a replica read: the epoch should end")
	}
	g.Invalidate()
	srv.set(withReplica, nil)
	enter("bbbbbbbbbbbb")
	if !g.Exact() || g.ModeChanges() != 1 {
		t.Fatalf("with a replica: exact %v, %d changes; want exact, 1", g.Exact(), g.ModeChanges())
	}
	// Exact, a connection to another server is refused.
	if err := g.Check(ReplInfo{Master: true, ReplID: replA}, true); !errors.Is(err, ErrServerChanged) {
		t.Fatalf("a connection to another server in an exact epoch: %v, want ErrServerChanged", err)
	}
	srv.set(withReplica, nil)
	enter("bbbbbbbbbbbb")

	// The replica leaves: the epoch stands for the grace.
	alone := ReplInfo{Master: true, ReplID: replB}
	clock = clock.Add(9 * time.Second)
	if g.Observe(alone) {
		t.Fatal("the replica gone 9 s: the epoch should stand for the grace, 10 s")
	}
	clock = clock.Add(time.Second)
	if !g.Observe(alone) {
		t.Fatal("the replica gone 10 s: the epoch should end")
	}
	g.Invalidate()
	srv.set(alone, nil)
	enter("")
	if g.ModeChanges() != 2 || fmt.Sprint(modes) != "[false false true false]" {
		t.Fatalf("%d changes, modes %v; want 2, [false false true false] (A, B, B exact, B not)", g.ModeChanges(), modes)
	}

	// A failover to a server that took over B: B's writes are restored,
	// stamped with the new era, though the new epoch is not exact.
	j.Add(Entry{Era: "bbbbbbbbbbbb", Seq: 1, At: 1, Expires: 1 << 60, Write: Write{Key: "k", Delta: 1}})
	srv.set(ReplInfo{Master: true, ReplID: "cccccccccccc3333333333333333333333333333", ReplID2: replB}, nil)
	g.Invalidate()
	enter("")
	if len(r.restored) != 1 || fmt.Sprint(r.eras) != "[cccccccccccc]" {
		t.Fatalf("restored %v stamped %v; want B's write stamped cccccccccccc", r.restored, r.eras)
	}
}
