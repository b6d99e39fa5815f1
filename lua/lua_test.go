package lua_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// decide is the decide script as a go-redis Script, for tests that call it
// directly.
var decide = redis.NewScript(lua.Decide.Source())

// testEra is the era the tests stamp their calls with (ARGV[1] of the
// decide, batch, settle and restore scripts): a call that writes with it
// writes its slot's lineage key (the scripts' last KEYS) too.
const testEra = "a1b2c3d4e5f6"

// lineageKey is the lineage key of the tests' calls on a single node: any
// key, as every key of a call is on one node.
func lineageKey(t testing.TB) string { return redistest.KeyPrefix(t) + "{!}:lineage" }

// withLineage returns keys and after them a lineage key on keys[0]'s slot,
// as the decide, batch, settle and restore scripts take their KEYS.
func withLineage(keys ...string) []string {
	return append(append(make([]string, 0, len(keys)+1), keys...), keys[0]+":lineage")
}

var algorithms = []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow}

// TestEveryFileCompilesAlone sends each *.lua file alone to Redis with
// SCRIPT LOAD, which compiles a script without running it: every file is a
// complete chunk, not a piece of a loop another file closes. The scripts
// assembled from them (gen/*.lua, every Script) compile too.
func TestEveryFileCompilesAlone(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	names, err := filepath.Glob("*.lua")
	if err != nil || len(names) < 12 {
		t.Fatalf("the package's *.lua files: %q (%v), want the drivers, arith.lua and the blocks", names, err)
	}
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ScriptLoad(ctx, string(src)).Err(); err != nil {
			t.Errorf("%s alone: %v", name, err)
		}
	}
	for s := lua.Script(0); s.Source() != ""; s++ {
		if err := c.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			t.Errorf("the %s script: %v", s, err)
		}
	}
}

// TestUnknownPartIsAnError assembles the scripts from a copy of the *.lua
// files whose decide.lua names a part lua.go does not have: the assembly
// fails, rather than leaving the line as a comment and the script without
// its blocks.
func TestUnknownPartIsAnError(t *testing.T) {
	dir := t.TempDir()
	names, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "decide.lua" {
			src = []byte(strings.Replace(string(src), "\n  --#judge\n", "\n  --#algorithms\n", 1))
		}
		if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lua.SourceIn(dir, lua.Decide); err == nil || !strings.Contains(err.Error(), `"algorithms"`) {
		t.Fatalf("decide.lua naming the part %q: error %v, want one naming it", "algorithms", err)
	}
}

// stateLayout is what KEYS[1] holds after an admission: decimal integers
// only, whether the call carried an era or not (the lineage is a key of
// its own). A microsecond timestamp (~1.8e15) written through Lua's
// tostring would read "1.8e+15" and lose its last digits.
var stateLayout = map[tollgate.Algorithm]*regexp.Regexp{
	tollgate.TokenBucket:   regexp.MustCompile(`^\d+ \d{16}$`),
	tollgate.GCRA:          regexp.MustCompile(`^\d{16} \d+$`),
	tollgate.SlidingWindow: regexp.MustCompile(`^\d+ \d+ \d+$`),
	tollgate.FixedWindow:   regexp.MustCompile(`^\d+ \d+$`),
}

// TestStateIsOneStringWithTTL runs each script without and with a request
// id, over state left by an older layout (a hash at KEYS[1]), and checks the
// contract the store and the Go mirror rely on: the old state counts as
// absent (a full bucket), the reply is the six integers, the one key written
// for the state is a string of decimal integers with a TTL no longer than
// the state matters, the request-id key, when there is one, gets the
// replay TTL, and the lineage key names the call's sequence and era, with
// its 30-minute TTL.
func TestStateIsOneStringWithTTL(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	for _, alg := range algorithms {
		for _, withID := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/request-id=%v", alg, withID), func(t *testing.T) {
				base := fmt.Sprintf("%s{%s-%v}:x", prefix, alg, withID)
				keys := []string{base}
				// 10 per second, capacity 10, cost 3.
				argv := []any{testEra, 0, int(alg), 10, 1_000_000, 10, 3}
				if withID {
					keys = append(keys, base+":r:id")
					argv = append([]any{testEra, 4, 60_000}, argv[2:]...)
				}
				lkey := fmt.Sprintf("%s{%s-%v}:lineage", prefix, alg, withID)
				keys = append(keys, lkey)
				if err := c.HSet(ctx, keys[0], "n", 0, "t", 1, "w", 0, "c", 1<<40).Err(); err != nil {
					t.Fatal(err)
				}
				reply, err := decide.Run(ctx, c, keys, argv...).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				if len(reply) != 7 || reply[0] != 1 || reply[1] != 7 || reply[2] != 0 || reply[4] != 0 || reply[5] != reply[6] || reply[6] < 1e15 {
					t.Fatalf("reply %v over an old-layout key, want {1 7 0 reset 0 now now}: the old state must read as absent, and the state written at the server time", reply)
				}
				state, err := c.Get(ctx, keys[0]).Result()
				if err != nil {
					t.Fatalf("state key after an admission: %v", err)
				}
				if !stateLayout[alg].MatchString(state) {
					t.Fatalf("state %q does not match %v", state, stateLayout[alg])
				}
				ttl, err := c.PTTL(ctx, keys[0]).Result()
				if err != nil {
					t.Fatal(err)
				}
				// The state matters at most a period and a window more
				// (sliding window), plus the 2ms margin.
				if ttl <= 0 || ttl.Milliseconds() > 2_002 {
					t.Fatalf("state TTL %v, want in (0, 2002ms]", ttl)
				}
				if withID {
					ttl, err := c.PTTL(ctx, keys[1]).Result()
					if err != nil {
						t.Fatal(err)
					}
					if ttl <= 0 || ttl > time.Minute {
						t.Fatalf("request-id key PTTL %v, want the 60s replay TTL", ttl)
					}
				}
				lin, err := c.Get(ctx, lkey).Result()
				if err != nil || lin != fmt.Sprintf("%d %s", reply[5], testEra) {
					t.Fatalf("lineage %q (%v), want the call's sequence %d and era %s", lin, err, reply[5], testEra)
				}
				if ttl, err := c.PTTL(ctx, lkey).Result(); err != nil || ttl <= 29*time.Minute || ttl > 30*time.Minute {
					t.Fatalf("lineage PTTL %v (%v), want 30 minutes", ttl, err)
				}
				n, err := c.Keys(ctx, strings.ReplaceAll(strings.TrimSuffix(base, ":x"), "{", "[{]")+"*").Result()
				if err != nil || len(n) != len(keys) {
					t.Fatalf("keys after one decision: %q (%v), want only %q", n, err, keys)
				}
			})
		}
	}
}

// A script's name is its driver's, and a number past the last script says
// so.
func TestScriptNames(t *testing.T) {
	want := []string{"decide", "batch", "settle", "seat", "reset", "admit", "finish", "share", "restore"}
	for i, name := range want {
		if got := lua.Script(i).String(); got != name {
			t.Errorf("Script(%d).String() = %q, want %q", i, got, name)
		}
	}
	if got := lua.Script(len(want)).String(); got != fmt.Sprintf("script(%d)", len(want)) {
		t.Errorf("a script past the last is named %q", got)
	}
}
