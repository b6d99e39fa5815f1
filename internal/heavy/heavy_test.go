package heavy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Epochs: 1},
		{Epochs: MaxEpochs + 1},
		{Epochs: -2},
		{Window: -time.Minute},
		{Window: 3 * time.Second, Epochs: 4},
		{HashKey: []byte("short")},
		{HashKey: []byte{}},
	} {
		if _, err := New(o); !errors.Is(err, ErrOptions) {
			t.Errorf("New(%+v): err %v, want ErrOptions", o, err)
		}
	}
	if _, err := New(Options{Window: 8 * time.Second, Epochs: MaxEpochs, HashKey: make([]byte, MinKeyLen)}); err != nil {
		t.Errorf("New at the limits: %v", err)
	}
}

// TestWindow: a refusal is counted in its epoch and the next, then
// forgotten; a snapshot names the start of the window's oldest epoch.
func TestWindow(t *testing.T) {
	s, now := newTestSketch(t, Options{Window: 2 * time.Minute}), t0
	observe := func(id string, n int) {
		for range n {
			s.Observe(now, id)
		}
	}
	check := func(when string, start time.Time, want string) {
		t.Helper()
		snap := s.Snapshot(now, 10)
		if got := fmt.Sprint(snap.Total, snap.Top); got != want || !snap.Start.Equal(start) || !snap.End.Equal(now) {
			t.Errorf("%s: %s from %v to %v, want %s from %v to %v", when, got, snap.Start, snap.End, want, start, now)
		}
	}
	observe("a", 5)
	check("first epoch", t0.Add(-time.Minute), "5 [{a 5 5 5}]")
	now = now.Add(time.Minute + 30*time.Second)
	observe("b", 3)
	observe("a", 1)
	check("second epoch", t0, "9 [{a 6 6 6} {b 3 3 3}]")
	now = now.Add(time.Minute)
	check("third epoch", t0.Add(time.Minute), "4 [{b 3 3 3} {a 1 1 1}]")
	now = now.Add(-2 * time.Minute) // the clock goes back: the epoch stays
	observe("c", 2)
	check("clock gone back", t0.Add(-time.Minute), "6 [{b 3 3 3} {c 2 2 2} {a 1 1 1}]")
	now = now.Add(2 * time.Minute)
	check("after the clock caught up", t0.Add(time.Minute), "6 [{b 3 3 3} {c 2 2 2} {a 1 1 1}]")
	now = now.Add(time.Hour)
	check("an hour idle", t0.Add(time.Hour+time.Minute), "0 []")
	observe("d", 1)
	check("after an hour idle", t0.Add(time.Hour+time.Minute), "1 [{d 1 1 1}]")
}

// TestConcurrentObserve: many goroutines refusing the same identities,
// with the window turning over and snapshots taken meanwhile, count every
// refusal.
func TestConcurrentObserve(t *testing.T) {
	s := newTestSketch(t, Options{})
	const goroutines, perGoroutine, ids = 32, 2000, 300
	var wg sync.WaitGroup
	// Snapshots while observing.
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				s.Snapshot(t0, 5)
				runtime.Gosched()
			}
		}
	})
	var observers sync.WaitGroup
	for g := range goroutines {
		observers.Go(func() {
			for i := range perGoroutine {
				s.Observe(t0, names[(g*7+i)%ids])
			}
		})
	}
	observers.Wait()
	close(done)
	wg.Wait()
	want := map[string]uint64{}
	for g := range goroutines {
		for i := range perGoroutine {
			want[names[(g*7+i)%ids]]++
		}
	}
	snap := s.Snapshot(t0.Add(time.Second), ids)
	if snap.Total != goroutines*perGoroutine || len(snap.Top) != ids {
		t.Fatalf("Total %d over %d identities, want %d over %d", snap.Total, len(snap.Top), goroutines*perGoroutine, ids)
	}
	for _, e := range snap.Top {
		if n := want[e.ID]; n > e.Max || n < e.Min {
			t.Errorf("%s refused %d times, outside [%d, %d]", e.ID, n, e.Min, e.Max)
		}
	}
}

// TestMemory: a sketch with every epoch of every shard full is under
// 1 MiB, measured as the heap it holds.
func TestMemory(t *testing.T) {
	for _, o := range []Options{{}, {Epochs: 3}, {Epochs: MaxEpochs, Window: time.Minute}, {HashKey: make([]byte, 32)}} {
		const sketches = 4
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		kept := make([]*Sketch, sketches)
		for i := range kept {
			s, now := newTestSketch(t, o), t0
			for range s.epochs {
				for _, id := range names[:10_000] { // over 1,000 a shard: every summary full
					s.Observe(now, id)
				}
				now = now.Add(time.Duration(s.epochLen))
			}
			kept[i] = s
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := (after.HeapAlloc - before.HeapAlloc) / sketches
		t.Logf("%+v: %d bytes a sketch (%.0f KiB)", o, per, float64(per)/1024)
		if per > 1<<20 {
			t.Errorf("%+v: %d bytes a sketch, more than 1 MiB", o, per)
		}
		runtime.KeepAlive(kept)
	}
}

// TestObserveAllocatesNothing: once its memory is taken, counting costs no
// allocation, whether identities churn through the tracked set or not.
func TestObserveAllocatesNothing(t *testing.T) {
	long := make([]string, distinct)
	for i, id := range names {
		long[i] = strings.Repeat("x", 300) + id
	}
	for _, key := range [][]byte{nil, make([]byte, 16)} {
		s := newTestSketch(t, Options{HashKey: key})
		for _, id := range names {
			s.Observe(t0, id)
		}
		i := 0
		allocs := testing.AllocsPerRun(10_000, func() {
			s.Observe(t0, names[i%distinct])
			s.Observe(t0, long[i%distinct])
			i += 7919
		})
		if allocs != 0 {
			t.Errorf("key %v: %v allocations a refusal", key != nil, allocs)
		}
	}
}

// TestIndex: the index finds what a map finds, through churn that wraps
// around its table.
func TestIndex(t *testing.T) {
	const n = 64
	r := rand.New(rand.NewPCG(5, 6))
	x := newIndex(n)
	es := make([]entry, n)
	want := map[uint64]int{}
	free := make([]int, n)
	for i := range free {
		free[i] = i
	}
	for step := range 100_000 {
		// Few distinct top bits, so that homes collide and runs wrap.
		fp := uint64(r.IntN(4*n))<<56 | uint64(r.IntN(3)) | 1<<60*uint64(step%2)
		if e, ok := want[fp]; ok {
			if got := x.get(fp, es); got != e {
				t.Fatalf("step %d: get %x = %d, want %d", step, fp, got, e)
			}
			x.del(fp, es)
			delete(want, fp)
			free = append(free, e)
		} else if len(free) > 0 {
			e := free[len(free)-1]
			free = free[:len(free)-1]
			es[e].fp = fp
			x.put(fp, e, es)
			want[fp] = e
		}
		for fp, e := range want {
			if got := x.get(fp, es); got != e {
				t.Fatalf("step %d: get %x = %d, want %d", step, fp, got, e)
			}
		}
	}
}

func TestLabels(t *testing.T) {
	key := []byte("0123456789abcdef")
	long := strings.Repeat("é", 40) + "tail"
	binary := "\xff\x00tenant"
	s := newTestSketch(t, Options{})
	h := newTestSketch(t, Options{HashKey: key})
	for _, id := range []string{"tenant-a", long, long + "2", binary} {
		s.Observe(t0, id)
		h.Observe(t0, id)
	}
	plain, hashed := s.Snapshot(t0, 10), h.Snapshot(t0, 10)
	shown := map[string]bool{}
	for _, e := range plain.Top {
		shown[e.ID] = true
		if !utf8.ValidString(e.ID) || len(e.ID) > labelCap {
			t.Errorf("plain %q: not valid UTF-8 of at most %d bytes", e.ID, labelCap)
		}
	}
	for _, want := range []string{"tenant-a", OpaqueID(nil, long), OpaqueID(nil, long+"2"), OpaqueID(nil, binary)} {
		if !shown[want] {
			t.Errorf("plain: %q not among %v", want, plain.Top)
		}
	}
	if got := OpaqueID(nil, long); !strings.HasPrefix(got, strings.Repeat("é", 20)+"…") || got == OpaqueID(nil, long+"2") {
		t.Errorf("a long identity is shown as %q", got)
	}
	if got := OpaqueID(nil, binary); !strings.HasPrefix(got, "…") {
		t.Errorf("an identity not UTF-8 is shown as %q", got)
	}
	for _, e := range hashed.Top {
		if len(e.ID) != 32 || strings.Contains(e.ID, "tenant") {
			t.Errorf("hashed id %q", e.ID)
		}
	}
	if hashed.Key == "" || plain.Key != "" || hashed.Key != keyID(key) || keyID(key) == keyID([]byte("fedcba9876543210")) {
		t.Errorf("keys: plain %q, hashed %q", plain.Key, hashed.Key)
	}
	h2 := newTestSketch(t, Options{HashKey: key})
	h2.Observe(t0, "tenant-a")
	if got, want := h2.Snapshot(t0, 1).Top[0].ID, OpaqueID(key, "tenant-a"); got != want {
		t.Errorf("another sketch with the same key shows %q, OpaqueID %q", got, want)
	}
}
