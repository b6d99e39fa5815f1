package tollgate_test

// Reliability and security, end to end: replies delayed past go-redis's
// read timeout, hostile metadata and identities, request ids reused across
// tenants. Real gRPC over bufconn, real Redis. The figures these tests log
// (go test -v -run Reliability .) are in docs/reliability.md.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/keyfunc"
)

// resendingClient returns a client for srv that gives up on a reply after
// readTimeout and re-sends the command up to 3 times, with idle connections
// already open: a re-send on a new connection would wait for its handshake
// on a sleeping server and never reach it.
func resendingClient(t *testing.T, srv *redistest.Server, readTimeout time.Duration) *redis.Client {
	t.Helper()
	o := srv.Options()
	o.ReadTimeout, o.MaxRetries = readTimeout, 3
	o.MinRetryBackoff, o.MaxRetryBackoff = 5*time.Millisecond, 10*time.Millisecond
	o.ContextTimeoutEnabled = true
	o.PoolSize = 32
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	var conns []*redis.Conn
	for range o.PoolSize {
		cn := c.Conn()
		if err := cn.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	for _, cn := range conns {
		_ = cn.Close()
	}
	return c
}

// evalshaCalls returns how many EVALSHA srv has run.
func evalshaCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	for _, f := range strings.Split(srv.Info(t, "commandstats", "cmdstat_evalsha"), ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// debitedBefore makes one more call for tenant, which must be admitted, and
// returns how many units of its quota were used before that call, from the
// remaining the call reports.
func debitedBefore(t *testing.T, c *echo.Client, tenantName string, quota int) int {
	t.Helper()
	next, _, err := say(tenant(tenantName), c)
	if err != nil {
		t.Fatal(err)
	}
	remaining, _ := strconv.Atoi(one(t, next, fields.LegacyRemaining))
	return quota - 1 - remaining
}

// callWhileAsleep puts srv to sleep for d, makes one call for tenant a
// meanwhile, and returns, once srv is awake, the call's trailer, how many
// scripts srv ran from the sleep on, and the call's error.
func callWhileAsleep(t *testing.T, srv *redistest.Server, c *echo.Client, d time.Duration) (trailer metadata.MD, runs int64, err error) {
	t.Helper()
	before := evalshaCalls(t, srv)
	woke := srv.Sleep(t, d)
	trailer, _, err = say(tenant("a"), c)
	if err := <-woke; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	return trailer, evalshaCalls(t, srv) - before, err
}

// TestReliabilityDelayedReplyDebitedOnce delays Redis's reply to a decision
// (DEBUG SLEEP) and counts what the tenant was debited through the whole
// chain.
//
// Past the client's read timeout, go-redis would re-send a command (3
// retries here), but never the store's scripts: the call gets its rule's
// fail policy, and the script, which runs when Redis wakes, debits once.
// Past the store deadline, the call fails closed (UNAVAILABLE) and gRPC's
// retry policy sends it again with its request id, several times while
// Redis still sleeps; when Redis wakes, the first attempt's script debits,
// every later attempt replays it, and the call ends admitted as a replay:
// one logical call, one debit.
func TestReliabilityDelayedReplyDebitedOnce(t *testing.T) {
	redistest.SkipFaultShort(t)
	srv := redistest.Start(t) // private: it is put to sleep and its stats read
	const quota = 10

	t.Run("reply lost to the read timeout", func(t *testing.T) {
		// A read timeout of 1s, not 100ms: on a busy machine the warm-up
		// and the counting calls would lose their replies too, and be
		// admitted by the fail policy, their scripts still debiting.
		st := newRedis(t, resendingClient(t, srv, time.Second))
		r := rule(t, tollgate.PerHour(quota))
		r.FailMode = interceptor.FailOpen
		c := serve(t, limiter(t, st, interceptor.WithRules(r), interceptor.WithStoreTimeout(5*time.Second)), &echo.Server{}, nil)
		if _, _, err := say(tenant("warm-up"), c); err != nil { // loads the script
			t.Fatal(err)
		}
		trailer, runs, err := callWhileAsleep(t, srv, c, 3*time.Second)
		if err != nil {
			t.Fatalf("the call whose reply was lost, under FailOpen: %v", err)
		}
		debits := debitedBefore(t, c, "a", quota)
		t.Logf("reply delayed 3s past a 1s read timeout with 3 client retries: the script ran %d time(s), the call was admitted by its fail policy (trailers %v), the tenant was debited %d",
			runs, trailer, debits)
		if runs != 1 || debits != 1 {
			t.Fatalf("the script ran %d times and debited %d for one call, want once", runs, debits)
		}
		if len(trailer.Get(fields.LegacyRemaining)) != 0 {
			t.Errorf("a fail-open admission carries rate-limit trailers %v: no store decided", trailer)
		}
	})

	t.Run("retried by gRPC past the store deadline", func(t *testing.T) {
		st := newRedis(t, resendingClient(t, srv, time.Second))
		r := rule(t, tollgate.PerHour(quota))
		r.FailMode = interceptor.FailClosed
		l := limiter(t, st, interceptor.WithRules(r),
			interceptor.WithStoreTimeout(250*time.Millisecond), func(c *engine.Config) { c.BreakerFailures, c.BreakerCoolDown = -1, 0 })
		var attempts atomic.Int64
		countAttempts := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			attempts.Add(1)
			return handler(ctx, req)
		}
		c := serve(t, l, &echo.Server{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(countAttempts)},
			retryPolicy(5, "0.1s", "UNAVAILABLE"), grpc.WithChainUnaryInterceptor(idempotency.UnaryClientInterceptor()))
		if _, _, err := say(tenant("warm-up"), c); err != nil {
			t.Fatal(err)
		}
		attempts.Store(0)
		trailer, copies, err := callWhileAsleep(t, srv, c, 900*time.Millisecond)
		if err != nil {
			t.Fatalf("the call retried across the stall: %v", err)
		}
		debits := debitedBefore(t, c, "a", quota)
		t.Logf("Redis asleep 900ms, store deadline 250ms: %d gRPC attempts, %d script runs, the call ended replayed=%q, the tenant was debited %d",
			attempts.Load(), copies, trailer.Get(fields.Replayed), debits)
		if attempts.Load() < 3 {
			t.Fatalf("%d attempts: the retries did not meet the stall, the test proves nothing", attempts.Load())
		}
		if debits != 1 {
			t.Fatalf("one logical call was debited %d times over %d attempts and %d script runs", debits, attempts.Load(), copies)
		}
		if one(t, trailer, fields.Replayed) != "1" {
			t.Errorf("the call's last attempt was not a replay of its admission: %v", trailer)
		}
	})
}

// hostileRule limits Say to n calls an hour per value of key.
func hostileRule(t *testing.T, key keyfunc.Func, n int64) interceptor.Rule {
	return interceptor.Rule{
		Name:    "hostile " + redistest.KeyPrefix(t),
		Methods: []string{echo.SayMethod},
		Key:     key,
		Limits:  interceptor.Fixed(tollgate.PerHour(n)),
	}
}

// callWith calls Say with md as outgoing metadata.
func callWith(c *echo.Client, md metadata.MD) (metadata.MD, error) {
	trailer, _, err := say(metadata.NewOutgoingContext(context.Background(), md), c)
	return trailer, err
}

// wantOwnQuotas calls Say quota times for each identity in header, round
// robin, and checks that every call is admitted with the remaining its own
// bucket alone would leave: no identity shares a bucket with another.
func wantOwnQuotas(t *testing.T, c *echo.Client, header string, identities []string, quota int) {
	t.Helper()
	for remaining := quota - 1; remaining >= 0; remaining-- {
		for _, id := range identities {
			trailer, err := callWith(c, metadata.Pairs(header, id))
			if err != nil || one(t, trailer, fields.LegacyRemaining) != strconv.Itoa(remaining) {
				t.Fatalf("identity %.40q: %v %v, want admitted with %d remaining: it shares a bucket with another", id, trailer, err, remaining)
			}
		}
	}
}

// wantTwoThenDenied makes three calls: the first two must be admitted, the
// third denied.
func wantTwoThenDenied(t *testing.T, what string, call func() error) {
	t.Helper()
	for i := range 2 {
		if err := call(); err != nil {
			t.Fatalf("%s call %d: %v", what, i+1, err)
		}
	}
	if err := call(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%s third call: %v, want ResourceExhausted", what, err)
	}
}

// recvEOF reads one message from a stream that must end without one.
func recvEOF[T any](s interface{ Recv() (T, error) }) error {
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// TestReliabilityHostileMetadata sends what a hostile or broken client can
// put in metadata through real gRPC: a 1 MB value, a value just over the
// limit, binary values, an empty value, the header repeated a thousand
// times, request ids repeated or conflicting. Every call gets a clear
// answer, and none reaches another identity's bucket.
func TestReliabilityHostileMetadata(t *testing.T) {
	st := redisStore(t)
	c := serve(t, limiter(t, st, interceptor.WithRules(hostileRule(t, keyfunc.Metadata(tenantHeader), 2))), &echo.Server{}, nil)

	// A 1 MB value: gRPC's default header list limit (16 MB in grpc-go
	// 1.85) lets it through; the limiter refuses it.
	_, err := callWith(c, metadata.Pairs(tenantHeader, strings.Repeat("x", 1<<20)))
	s := wantCode(t, err, codes.InvalidArgument, "cannot identify the caller")
	t.Logf("1 MB x-tenant, default server: %s %q", s.Code(), s.Message())
	_, err = callWith(c, metadata.Pairs(tenantHeader, strings.Repeat("x", keyfunc.MaxValueLen+1)))
	wantCode(t, err, codes.InvalidArgument, "more than 4096")

	// A server with a small header list limit: the client refuses to send.
	small := serve(t, limiter(t, st, interceptor.WithRules(hostileRule(t, keyfunc.Metadata(tenantHeader), 2))), &echo.Server{},
		[]grpc.ServerOption{grpc.MaxHeaderListSize(8 << 10)})
	_, err = callWith(small, metadata.Pairs(tenantHeader, strings.Repeat("x", 1<<20)))
	s = wantCode(t, err, codes.Internal, "header list size")
	t.Logf("1 MB x-tenant, server with grpc.MaxHeaderListSize(8 KiB): %s %q", s.Code(), s.Message())

	// Non-printable bytes outside a -bin header: grpc-go's client refuses
	// to send them.
	_, err = callWith(c, metadata.Pairs(tenantHeader, "a\x00b"))
	s = wantCode(t, err, codes.Internal, "non-printable")
	t.Logf("x-tenant with a NUL byte: %s %q", s.Code(), s.Message())

	// An empty value is missing: refused, never a shared empty identity.
	_, err = callWith(c, metadata.Pairs(tenantHeader, ""))
	wantCode(t, err, codes.InvalidArgument, "cannot identify the caller")

	// The header a thousand times: the first value counts, the others do
	// not reach the store, so repeating it picks no other bucket.
	dup := metadata.MD{}
	for i := range 1000 {
		dup.Append(tenantHeader, "dup-"+strconv.Itoa(i))
	}
	for want := 1; want >= 0; want-- {
		trailer, err := callWith(c, dup)
		if err != nil || one(t, trailer, fields.LegacyRemaining) != strconv.Itoa(want) {
			t.Fatalf("1000 x-tenant values: %v %v, want admitted with %d remaining", trailer, err, want)
		}
	}
	_, err = callWith(c, dup)
	wantCode(t, err, codes.ResourceExhausted, "exceeded")
	for _, other := range []string{"dup-1", "dup-999"} {
		trailer, err := callWith(c, metadata.Pairs(tenantHeader, other))
		if err != nil || one(t, trailer, fields.LegacyRemaining) != "1" {
			t.Fatalf("tenant %s after another client repeated it as a later value: %v %v, want its own full quota", other, trailer, err)
		}
	}

	// Request ids: repeated with one value is one id; conflicting values
	// are refused; a malformed id is refused.
	same := metadata.Pairs(tenantHeader, "ids")
	for range 100 {
		same.Append(idempotency.DefaultHeader, "id-1")
	}
	if _, err := callWith(c, same); err != nil {
		t.Fatalf("100 equal request ids: %v", err)
	}
	_, err = callWith(c, metadata.Pairs(tenantHeader, "ids", idempotency.DefaultHeader, "id-1", idempotency.DefaultHeader, "id-2"))
	wantCode(t, err, codes.InvalidArgument, "malformed request id")
	_, err = callWith(c, metadata.Pairs(tenantHeader, "ids", idempotency.DefaultHeader, strings.Repeat("r", tollgate.MaxRequestIDLen+1)))
	wantCode(t, err, codes.InvalidArgument, "malformed request id")
	_, err = callWith(c, metadata.Pairs(tenantHeader, "ids", idempotency.DefaultHeader, "has space"))
	wantCode(t, err, codes.InvalidArgument, "malformed request id")

	// Binary identities in a -bin header: any bytes, each its own bucket.
	bin := serve(t, limiter(t, st, interceptor.WithRules(hostileRule(t, keyfunc.Metadata("x-tenant-bin"), 2))), &echo.Server{}, nil)
	wantOwnQuotas(t, bin, "x-tenant-bin", []string{"\x00", "\x00\x00", "\xff\xfe", "{", "}", "{}", "\x00{a}\xff", "a", "%00", "%7B"}, 2)
}

// TestReliabilityCraftedIdentities gives identities built to collide under
// naive key building (braces that move a Cluster hash tag, escaped and
// hashed forms of other identities, ambiguous joins, a header that imitates
// the peer address) two calls an hour each, on a Cluster, and checks that
// every one gets exactly its own two.
func TestReliabilityCraftedIdentities(t *testing.T) {
	st := clusterStore(t)

	// The store's tag of "" is "#" and base64url of SHA-256's first 128 bits;
	// an identity may spell it out.
	crafted := []string{
		"a", "{a}", "a}", "{a", "}{", "{}", "{{a}}", "%7Ba%7D", "%257Ba%257D", "%", "#",
		"#47DEQpj8HBSa-_TImW-5JA", "a:tb", "a}:tb", "a\x00ck:a", strings.Repeat("{", 4096),
		strings.Repeat("a", 64), strings.Repeat("a", 65), "bufconn", "0:bufconn", "1:bufconn",
	}
	binaryKey := keyfunc.Metadata("x-tenant-bin")
	rules := []interceptor.Rule{hostileRule(t, binaryKey, 2)}
	// Join of (tenant, method) and FirstOf(tenant, peer): a tenant value
	// that imitates the encoded form of another pair, or the peer address.
	joined := hostileRule(t, keyfunc.Join(binaryKey, keyfunc.Method()), 2)
	joined.Methods = []string{echo.CountMethod}
	firstOf := hostileRule(t, keyfunc.FirstOf(binaryKey, keyfunc.Peer()), 2)
	firstOf.Methods = []string{echo.ChatMethod}
	c := serve(t, limiter(t, st, interceptor.WithRules(append(rules, joined, firstOf)...)), &echo.Server{}, nil)

	wantOwnQuotas(t, c, "x-tenant-bin", crafted, 2)
	for _, id := range crafted {
		_, err := callWith(c, metadata.Pairs("x-tenant-bin", id))
		wantCode(t, err, codes.ResourceExhausted, "exceeded")
	}

	// Join: "a" on Count and "1:a28:/tollgate.example.Echo/Count" (what a
	// naive join of other parts would print) are different pairs.
	for _, id := range []string{"a", "1:a" + strconv.Itoa(len(echo.CountMethod)) + ":" + echo.CountMethod, "1:a"} {
		wantTwoThenDenied(t, "joined identity "+strconv.Quote(id), func() error {
			s, err := c.Count(metadata.NewOutgoingContext(context.Background(), metadata.Pairs("x-tenant-bin", id)), 0)
			if err != nil {
				return err
			}
			return recvEOF(s)
		})
	}

	// FirstOf: without the header the peer ("bufconn") is the identity; a
	// header claiming "bufconn" is another bucket.
	for _, md := range []metadata.MD{{}, metadata.Pairs("x-tenant-bin", "bufconn")} {
		wantTwoThenDenied(t, fmt.Sprintf("FirstOf identity %v", md), func() error {
			s, err := c.Chat(metadata.NewOutgoingContext(context.Background(), md))
			if err != nil {
				return err
			}
			if err := s.CloseSend(); err != nil {
				return err
			}
			return recvEOF(s)
		})
	}
	t.Logf("%d crafted identities, 3 joined pairs and 2 FirstOf sources: each admitted exactly its own 2 calls on a 3-primary Cluster", len(crafted))
}

// TestReliabilityRequestIDsAcrossTenants reuses request ids across tenants
// and within one: an id admitted for one tenant is judged afresh for
// another (no free calls from someone else's admission), and reusing one id
// buys at most 1+MaxReplays calls per admission.
func TestReliabilityRequestIDsAcrossTenants(t *testing.T) {
	const quota = 5
	c := serve(t, limiter(t, redisStore(t), interceptor.WithRules(rule(t, tollgate.PerHour(quota)))), &echo.Server{}, nil)
	withID := func(tenant, id string) (metadata.MD, error) {
		return callWith(c, metadata.Pairs(tenantHeader, tenant, idempotency.DefaultHeader, id))
	}
	remaining := func(md metadata.MD) string { return one(t, md, fields.LegacyRemaining) }

	// Tenant a is admitted with the id; tenant b sending the same id is
	// debited in its own bucket, not replayed from a's admission.
	ta, err := withID("a", "shared-id")
	if err != nil || remaining(ta) != "4" || len(ta.Get(fields.Replayed)) != 0 {
		t.Fatalf("tenant a: %v %v", ta, err)
	}
	tb, err := withID("b", "shared-id")
	if err != nil || remaining(tb) != "4" || len(tb.Get(fields.Replayed)) != 0 {
		t.Fatalf("tenant b with a's request id: %v %v, want debited in its own bucket, not replayed", tb, err)
	}
	ta, err = withID("a", "shared-id")
	if err != nil || remaining(ta) != "4" || one(t, ta, fields.Replayed) != "1" {
		t.Fatalf("tenant a's retry: %v %v, want a replay with 4 remaining", ta, err)
	}

	// One id reused 40 times by tenant c: each admission (quota of them)
	// buys itself and MaxReplays replays, then the id is judged afresh.
	var allowed, replayed, denied int
	for range 40 {
		md, err := withID("c", "reused")
		switch status.Code(err) {
		case codes.OK:
			allowed++
			if len(md.Get(fields.Replayed)) == 1 {
				replayed++
			}
		case codes.ResourceExhausted:
			denied++
		default:
			t.Fatalf("reused id: %v", err)
		}
	}
	const maxReplays = 4 // the store's default
	want := quota * (1 + maxReplays)
	t.Logf("one request id reused 40 times on a quota of %d: %d admitted (%d replayed), %d denied; bound %d = %d × (1 + %d)",
		quota, allowed, replayed, denied, want, quota, maxReplays)
	if allowed != want || replayed != quota*maxReplays || denied != 40-want {
		t.Fatalf("%d admitted, %d replayed, %d denied; want %d, %d, %d", allowed, replayed, denied,
			want, quota*maxReplays, 40-want)
	}
}
