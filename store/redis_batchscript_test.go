package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// TestBatchScriptSharesCalls runs 64 goroutines of decisions, with and
// without request ids, with the batch script on and off, and checks from
// the servers' own command counts that on a single node batches shared
// script calls only when it is on (fewer script calls than half the
// decisions), that on a Cluster every decision keeps its own call, and
// that every identity admitted exactly its quota in every case.
func TestBatchScriptSharesCalls(t *testing.T) {
	// Private servers: their command counts are this test's alone.
	forEachPrivateRedis(t, func(t *testing.T, c redis.UniversalClient, nodes []*redistest.Server) {
		_, cluster := c.(*redis.ClusterClient)
		batchScriptShares(t, c, nodes, !cluster)
	})
}

// batchScriptShares is TestBatchScriptSharesCalls on c, whose servers are
// nodes; shares says whether the store is to send batch script calls.
func batchScriptShares(t *testing.T, c redis.UniversalClient, nodes []*redistest.Server, shares bool) {
	ctx := context.Background()
	const (
		goroutines = 64
		each       = 40
		identities = 100
		quota      = 5
	)
	scriptCalls := func() (n int64) {
		for _, srv := range nodes {
			a, _, _ := commandStats(t, srv, "evalsha")
			b, _, _ := commandStats(t, srv, "eval")
			n += a + b
		}
		return n
	}
	for _, on := range []bool{true, false} {
		for _, withID := range []bool{false, true} {
			t.Run(fmt.Sprintf("batch-script=%v/request-id=%v", on, withID), func(t *testing.T) {
				st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)), WithDenyCache(0), WithBatchScript(on))
				if st.batchScript != (on && shares) {
					t.Fatalf("a %T store with WithBatchScript(%v) sends batch script calls: %v", c, on, st.batchScript)
				}
				var calls, admitted [identities]atomic.Int64
				before := scriptCalls()
				var wg sync.WaitGroup
				errs := make(chan error, goroutines)
				for g := range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range each {
							id := (g*7 + i*13) % identities
							req := tollgate.Request{Key: "id-" + strconv.Itoa(id), Limit: quotaLimit(algorithms[id%len(algorithms)], quota)}
							if withID {
								req.RequestID = fmt.Sprintf("g%d-%d", g, i) // one id per call: no replays
							}
							d, err := st.Allow(ctx, req)
							if err != nil {
								errs <- err
								return
							}
							calls[id].Add(1)
							if d.Allowed {
								admitted[id].Add(1)
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				used := scriptCalls() - before
				for id := range identities {
					if want := min(calls[id].Load(), quota); admitted[id].Load() != want {
						t.Errorf("identity %d: %d calls, %d admitted, want %d", id, calls[id].Load(), admitted[id].Load(), want)
					}
				}
				t.Logf("%d decisions, %d script calls", goroutines*each, used)
				switch {
				case on && shares && 2*used > goroutines*each:
					t.Errorf("%d script calls for %d decisions under %d callers: the batches did not share calls", used, goroutines*each, goroutines)
				case !(on && shares) && used < goroutines*each:
					t.Errorf("%d script calls for %d decisions without batch script calls, want one each", used, goroutines*each)
				}
			})
		}
	}
}

// batchCalls returns one single-decision call per key on st (a token
// bucket of 10 per second), with request id id when it is not "".
func batchCalls(t *testing.T, st *Redis, id string, keys ...string) []*call {
	t.Helper()
	var out []*call
	for _, k := range keys {
		req, err := check.Normalize(tollgate.Request{Key: k, Limit: tollgate.PerSecond(10), RequestID: id})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st.keys.decisionCall(context.Background(), req, st.replays.modeFor(id, 0)))
	}
	return out
}

// TestBatchScriptFailsAsAWhole sends a batch whose middle call is
// malformed (its arguments cut short, so the batch script's call does not
// make whole decisions) and checks that every caller gets the error and
// that nothing was written for any of them.
func TestBatchScriptFailsAsAWhole(t *testing.T) {
	c := redistest.Single(t).Client(t)
	prefix := redistest.KeyPrefix(t)
	st := newRedis(t, c, WithPrefix(prefix), WithDenyCache(0))
	if !st.batchScript {
		t.Fatal("a store on a single node does not use the batch script")
	}
	batch := append(batchCalls(t, st, "", "a", "bad"), batchCalls(t, st, "id-1", "b")...)
	batch[1].argv = batch[1].argv[:len(batch[1].argv)-1]
	st.runBatch(batch)
	for i, call := range batch {
		<-call.done
		if call.err == nil || !strings.Contains(call.err.Error(), "tollgate batch") {
			t.Errorf("call %d of a malformed batch: error %v, want the batch script's", i, call.err)
		}
	}
	var keys []string
	for _, k := range []string{"a", "bad", "b"} {
		keys = append(keys, decisionKeys(prefix, tollgate.TokenBucket, k, "id-1")...)
	}
	if n := c.Exists(context.Background(), keys...).Val(); n != 0 {
		t.Errorf("a batch that failed as a whole left %d of its keys", n)
	}
}

// TestBatchScriptDecisionErrorIsItsOwn poisons one decision's request-id
// marker with a value Redis cannot increment and checks that, in a batch,
// that decision alone fails (as it does alone), while the decisions before
// and after it are admitted and written.
func TestBatchScriptDecisionErrorIsItsOwn(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	st := newRedis(t, c, WithPrefix(prefix), WithDenyCache(0))
	marker := decisionKeys(prefix, tollgate.TokenBucket, "poisoned", "x")[1]
	if err := c.Set(ctx, marker, "1.5", 0).Err(); err != nil {
		t.Fatal(err)
	}
	batch := append(append(batchCalls(t, st, "", "before"), batchCalls(t, st, "x", "poisoned")...), batchCalls(t, st, "y", "after")...)
	st.runBatch(batch)
	for _, call := range batch {
		<-call.done
	}
	if !errors.Is(batch[1].err, errBatchWrite) {
		t.Errorf("the poisoned decision: error %v, want %v", batch[1].err, errBatchWrite)
	}
	for _, i := range []int{0, 2} {
		if d := batch[i].decisions[0]; batch[i].err != nil || !d.Allowed || d.Remaining != 9 {
			t.Errorf("decision %d beside the poisoned one: %+v, %v; want admitted with 9 left", i, d, batch[i].err)
		}
	}
	if n := c.Exists(ctx, decisionKeys(prefix, tollgate.TokenBucket, "after", "y")...).Val(); n != 2 {
		t.Errorf("the decision after the poisoned one left %d of its state and marker, want both", n)
	}
	if n := c.Exists(ctx, decisionKeys(prefix, tollgate.TokenBucket, "poisoned", "")...).Val(); n != 0 {
		t.Error("the poisoned decision wrote its state")
	}
	if _, err := st.Allow(ctx, tollgate.Request{Key: "poisoned", Limit: tollgate.PerSecond(10), RequestID: "x"}); err == nil {
		t.Error("the poisoned decision alone succeeded, want the same failure")
	}
}

// commandCounter is a go-redis hook recording how many commands each
// pipeline of script calls a client sends holds.
type commandCounter struct {
	mu    sync.Mutex
	sizes []int
}

func (*commandCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		if name := cmds[0].Name(); name == "evalsha" || name == "eval" { // not a connection's handshake
			h.sizes = append(h.sizes, len(cmds))
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestBatchScriptSplitsLargeBatches sends one batch of 300 single
// decisions and one AllowAll set of two requests and checks that the
// decisions travel as batch script calls of at most maxShared (three) and
// the set as a decide call of its own, in one pipeline, and that every
// decision got its own answer.
func TestBatchScriptSplitsLargeBatches(t *testing.T) {
	c := redis.NewClient(redistest.Single(t).Options())
	defer c.Close()
	ctx := context.Background()
	for _, src := range []string{lua.Decide.Source(), lua.Batch.Source()} {
		if err := c.ScriptLoad(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	h := &commandCounter{}
	c.AddHook(h)
	st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)), WithDenyCache(0))
	var batch []*call
	for i := range 300 {
		batch = append(batch, batchCalls(t, st, "", "d-"+strconv.Itoa(i%150))...)
	}
	var set []tollgate.Request
	for _, k := range []string{"set-a", "set-b"} {
		req, err := check.Normalize(tollgate.Request{Key: k, Limit: tollgate.PerSecond(10)})
		if err != nil {
			t.Fatal(err)
		}
		set = append(set, req)
	}
	batch = append(batch, st.keys.newCall(ctx, set, st.keys.setKeys(set, ""), decideMode{}))
	st.runBatch(batch)
	for i, c := range batch[:300] {
		<-c.done
		// Each identity is decided twice, 150 decisions apart.
		if d := c.decisions[0]; c.err != nil || !d.Allowed || d.Remaining != int64(9-i/150) {
			t.Errorf("decision %d: %+v, %v; want admitted with %d left", i, d, c.err, 9-i/150)
		}
	}
	last := batch[300]
	<-last.done
	if last.err != nil || len(last.decisions) != 2 || !last.decisions[0].Allowed || !last.decisions[1].Allowed {
		t.Errorf("the set of two: %+v, %v; want both admitted", last.decisions, last.err)
	}
	if !slices.Equal(h.sizes, []int{4}) {
		t.Errorf("pipelines of %v commands, want one of 4: three batch script calls and the set's decide call", h.sizes)
	}
}

// TestBatchScriptSendsEachProfileOnce lays out batches of single decisions
// on three limits, interleaved, with and without request ids, with a peek
// and a call cut short, and checks that the batch script call carries each
// profile (mode, TTL, limit, cost) once and each decision's profile, or,
// when fewer than two decisions share each profile, each decision's argv
// inline; then that every decision of the batch gets the answer its own
// decide call gets, on keys of its own, in the same order. Laying a batch
// out allocates the shared call and its arguments only.
func TestBatchScriptSendsEachProfileOnce(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)), WithDenyCache(0))
	alone := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)), WithDenyCache(0))
	limits := []tollgate.Limit{
		tollgate.PerSecond(10),
		{Algorithm: tollgate.GCRA, Rate: 3, Period: time.Hour, Burst: 2},
		tollgate.Daily(2),
	}
	type decision struct {
		key   string
		limit int
		cost  int64
		id    string
		peek  bool
	}
	ds := []decision{
		{"a", 0, 4, "", false}, {"b", 1, 1, "x", false}, {"c", 2, 1, "", false}, {"a", 0, 4, "y", false},
		{"b", 1, 1, "", true}, {"b", 1, 1, "", false}, {"c", 2, 1, "x", false}, {"a", 0, 4, "", false},
		{"b", 1, 1, "x", false}, {"c", 2, 1, "", false}, {"a", 0, 1, "y", false},
	}
	calls := func(st *Redis) []*call {
		var out []*call
		for _, d := range ds {
			req, err := check.Normalize(tollgate.Request{Key: d.key, Limit: limits[d.limit], Cost: d.cost, RequestID: d.id})
			if err != nil {
				t.Fatal(err)
			}
			mode := st.replays.modeFor(d.id, 0)
			if d.peek {
				mode = decideMode{peek: true}
			}
			out = append(out, st.keys.decisionCall(ctx, req, mode))
		}
		return out
	}

	batch := calls(st)
	short := append(slices.Clone(batch[:4]), &call{keys: batch[4].keys, argv: batch[4].argv[:3], entries: 1}, batch[5])
	var want []any
	for _, c := range short {
		for _, k := range c.keys {
			want = append(want, k)
		}
	}
	profile := func(id string, limit int, cost int64) []any {
		p := algo.ParamsOf(tollgate.Request{Limit: limits[limit], Cost: cost})
		head := []any{int64(modeNoID), 0}
		if id != "" {
			head = []any{st.replays.modeFor(id, 0).arg(), st.replays.ttlMs()}
		}
		return append(head, int64(limits[limit].Algorithm), p.Rate, p.Period, p.Capacity, p.Cost)
	}
	want = append(want, batch[0].lineage, "", 5) // the slot's lineage key; no era: the gate stamps it as the call leaves
	want = append(want, profile("", 0, 4)...)
	want = append(want, profile("x", 1, 1)...)
	want = append(want, profile("", 2, 1)...)
	want = append(want, profile("y", 0, 4)...)
	want = append(want, profile("", 1, 1)...)
	want = append(want, 1, 2, 3, 4, 0, 5)
	args := func(calls []*call) (int64, []any) {
		s := newShared(calls)
		var got []any
		for _, a := range s.args[3:] {
			switch v := a.(type) {
			case *string:
				got = append(got, *v)
			case string:
				got = append(got, v)
			case *int64:
				got = append(got, *v)
			case int64:
				got = append(got, v)
			default:
				t.Fatalf("argument %v of type %T", a, a)
			}
		}
		return s.args[2].(int64), got
	}
	if nkeys, got := args(short); fmt.Sprint(got) != fmt.Sprint(want) || nkeys != 9 {
		t.Fatalf("batch script call of %d keys\n%v\nwant 9 keys\n%v", nkeys, got, want)
	}
	// Two profiles for four decisions: profiles.
	few := []*call{batch[0], batch[7], batch[2], batch[9]}
	want = nil
	for _, c := range few {
		want = append(want, c.keys[0])
	}
	want = append(want, batch[0].lineage, "", 2)
	want = append(want, profile("", 0, 4)...)
	want = append(want, profile("", 2, 1)...)
	want = append(want, 1, 1, 2, 2)
	if nkeys, got := args(few); fmt.Sprint(got) != fmt.Sprint(want) || nkeys != 5 {
		t.Fatalf("batch script call of %d keys\n%v\nwant 5 keys\n%v", nkeys, got, want)
	}
	// Eight profiles for eleven decisions: inline.
	want = nil
	for _, c := range batch {
		for _, k := range c.keys {
			want = append(want, k)
		}
	}
	want = append(want, batch[0].lineage, "", 0)
	for _, c := range batch {
		for _, a := range c.argv {
			want = append(want, a)
		}
	}
	if nkeys, got := args(batch); fmt.Sprint(got) != fmt.Sprint(want) || nkeys != 17 {
		t.Fatalf("batch script call of %d keys\n%v\nwant 17 keys, inline\n%v", nkeys, got, want)
	}
	// The shared call and its argument slice; nothing per decision or
	// profile.
	for _, calls := range [][]*call{few, batch} {
		if allocs := testing.AllocsPerRun(100, func() { newShared(calls) }); allocs > 2 {
			t.Errorf("laying out %d decisions allocates %v times, want at most 2", len(calls), allocs)
		}
	}

	st.runBatch(batch)
	for i, c := range calls(alone) {
		alone.runOne(ctx, c)
		<-batch[i].done
		// allowed, remaining and replayed: the durations count from each
		// call's own server time.
		b, a := batch[i].decisions[0], c.decisions[0]
		if batch[i].err != nil || c.err != nil || b.Allowed != a.Allowed || b.Remaining != a.Remaining || b.Replayed != a.Replayed {
			t.Errorf("decision %d %+v: %+v, %v in the batch, %+v, %v alone", i, ds[i], b, batch[i].err, a, c.err)
		}
	}
}
