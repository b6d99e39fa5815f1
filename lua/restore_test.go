package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// restoreEntry is one entry of a restore call: its keys and its 13 ARGV.
type restoreEntry struct {
	key, aux                 string
	delta, seq               int64
	era                      string
	expires                  int64
	auxKind, auxValue, until int64
}

// TestRestoreAppliesWhatTheLineageLacks writes states with the decide
// script in one era, then restores journaled writes in another, at pinned
// instants, and checks each rule of the restore script (lua/doc.go): a
// write its slot's lineage holds (same era, sequence at most the
// lineage's; or the era the slot was taken over from, sequence at most
// where it was) is not applied; one it lacks is, as a debit past empty,
// with its marker restored; a write whose effect ended, or that a later
// ended write of the same key follows, is not; a slot without lineage
// lacks every write; the key is written once, and the lineage once per
// call, in the restoring era, recording where that era took the slot
// over; and a restore sent again applies nothing twice.
func TestRestoreAppliesWhatTheLineageLacks(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	decideAt := redis.NewScript(lua.SourceAt())
	restore := redis.NewScript(lua.RestoreSourceAt())
	const eraA, eraB = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Hour, Burst: 10}
	p := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: 1})
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC).UnixMicro()
	key, lkey := prefix+"{r}:tb", prefix+"{r}:lineage"

	decideOnce := func(at int64) (seq int64) {
		t.Helper()
		r, err := decideAt.Run(ctx, c, []string{key, lkey}, eraA, 0, int(limit.Algorithm), p.Rate, p.Period, p.Capacity, 1, at/1e6, at%1e6).Int64Slice()
		if err != nil || r[0] != 1 || r[5] != at {
			t.Fatalf("decide at %d: %v %v, want admitted and written at its time", at, r, err)
		}
		return r[5]
	}
	run := func(at int64, lkey string, entries ...restoreEntry) []int64 {
		t.Helper()
		var keys []string
		argv := []any{eraB, 60_000}
		for _, e := range entries {
			aux := e.aux
			if aux == "" {
				aux = e.key
			}
			keys = append(keys, e.key, aux, e.key+":x:test")
			argv = append(argv, int(limit.Algorithm), p.Rate, p.Period, p.Capacity, e.delta, 0, 0, e.seq, e.era, e.expires, e.auxKind, e.auxValue, e.until, e.seq)
		}
		r, err := restore.Run(ctx, c, append(keys, lkey), append(argv, at/1e6, at%1e6)...).Int64Slice()
		if err != nil || len(r) != 3*len(entries)+1 || r[len(r)-1] != at {
			t.Fatalf("restore at %d: %v %v", at, r, err)
		}
		return r
	}
	tokens := func(key string) int64 {
		t.Helper()
		s, err := c.Get(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var n, ts int64
		if _, err := fmt.Sscanf(s, "%d %d", &n, &ts); err != nil || strings.Contains(s, "|") {
			t.Fatalf("state %q: %v, want two integers", s, err)
		}
		return n
	}
	lineage := func(lkey string) string {
		t.Helper()
		return c.Get(ctx, lkey).Val()
	}

	s1 := decideOnce(t0)
	s2 := decideOnce(t0 + 10)
	if tok, lin := tokens(key), lineage(lkey); tok != 8 || lin != fmt.Sprintf("%d %s", s2, eraA) {
		t.Fatalf("after two decisions: %d tokens, lineage %q", tok, lin)
	}
	far := t0 + time.Hour.Microseconds()
	now := t0 + 100

	// Held: both writes of era A are in the slot's lineage.
	r := run(now, lkey, restoreEntry{key: key, delta: 1, seq: s1, era: eraA, expires: far}, restoreEntry{key: key, delta: 1, seq: s2, era: eraA, expires: far})
	if r[0] != 0 || r[3] != 0 || r[1] != 0 || lineage(lkey) != fmt.Sprintf("%d %s", s2, eraA) {
		t.Fatalf("writes the lineage holds: %v, lineage %q; want none applied and nothing written", r, lineage(lkey))
	}

	// Lacked: a later write of era A (its primary's last, never
	// replicated) is applied with its marker; the slot is era B's now,
	// taken over at s2 from era A.
	marker := key + ":r:x"
	r = run(now, lkey, restoreEntry{key: key, aux: marker, delta: 3, seq: s2 + 5, era: eraA, expires: far, auxKind: 1, until: now + 60e6})
	if r[0] != 1 || r[1] != now {
		t.Fatalf("a write the lineage lacks: %v, want applied and written at the call's time", r)
	}
	if tok, lin := tokens(key), lineage(lkey); tok != 5 || lin != fmt.Sprintf("%d %s %d %s", now, eraB, s2, eraA) {
		t.Fatalf("after the restore: %d tokens, lineage %q; want 5 and era B taken over at %d from A", tok, lin, s2)
	}
	if v, err := c.Get(ctx, marker).Result(); err != nil || v != "0" {
		t.Fatalf("the restored write's marker: %q %v", v, err)
	}
	// The same restore sent again (its reply lost): the store's restore
	// record holds it, nothing is applied twice.
	r = run(now, lkey, restoreEntry{key: key, aux: marker, delta: 3, seq: s2 + 5, era: eraA, expires: far, auxKind: 1, until: now + 60e6})
	if r[0] != 0 {
		t.Fatalf("a restore sent again: %v, want nothing applied", r)
	}
	if tok := tokens(key); tok != 5 {
		t.Fatalf("after the restore sent again: %d tokens, want 5", tok)
	}

	// Era B's lineage still says where it took the slot over: a write of A
	// after that point is lacked, one before it held. Two entries of one
	// key: one write, the sequence once more.
	r = run(now+1, lkey, restoreEntry{key: key, delta: 1, seq: s2 - 1, era: eraA, expires: far}, restoreEntry{key: key, delta: 2, seq: s2 + 7, era: eraA, expires: far})
	if r[0] != 0 || r[3] != 1 || r[4] != now+1 {
		t.Fatalf("writes of the era taken over from: %v, want the first held, the second applied", r)
	}
	if tok, lin := tokens(key), lineage(lkey); tok != 3 || lin != fmt.Sprintf("%d %s %d %s", now+1, eraB, s2, eraA) {
		t.Fatalf("%d tokens, lineage %q; want 3, and era B's takeover kept", tok, lin)
	}

	// Ended: an entry whose effect ended is not applied, nor one of the same
	// key before it; one after it is.
	r = run(now+2, lkey, restoreEntry{key: key, delta: 1, seq: s2 + 10, era: eraA, expires: far},
		restoreEntry{key: key, delta: 1, seq: s2 + 11, era: eraA, expires: now},
		restoreEntry{key: key, delta: 1, seq: s2 + 12, era: eraA, expires: far})
	if r[0] != 0 || r[3] != 0 || r[6] != 1 {
		t.Fatalf("around an ended write: %v, want only the last applied", r)
	}

	// No lineage: a slot the new primary never received a write of lacks
	// every write, past empty when it must be (a debt, a later refill).
	fresh, flkey := prefix+"{fresh}:tb", prefix+"{fresh}:lineage"
	r = run(now, flkey, restoreEntry{key: fresh, delta: 12, seq: s1, era: eraA, expires: far})
	if r[0] != 1 {
		t.Fatalf("a write on a slot without lineage: %v, want applied", r)
	}
	if st, err := c.Get(ctx, fresh).Result(); err != nil || !strings.HasPrefix(st, "0 ") || lineage(flkey) != fmt.Sprintf("%d %s", now, eraB) {
		t.Fatalf("the fresh key holds %q (%v), lineage %q; want 0 tokens in debt and era B's lineage", st, err, lineage(flkey))
	}
	if ttl := c.PTTL(ctx, fresh).Val(); ttl < 12*time.Hour-time.Second || ttl > 12*time.Hour+time.Second {
		t.Fatalf("the fresh key lives %v, want its debt's 2h plus 10h of refill to full", ttl)
	}
}
