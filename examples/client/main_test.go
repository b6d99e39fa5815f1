package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/examples/server/exampleserver/exampleservertest"
	"github.com/tollgate/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs the example server in-process on a loopback port, on its
// embedded memory store, with the given server flags; it stops when the test
// ends.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	return exampleservertest.Start(t, exampleservertest.Parse(t, nil, args...), nil).Addr
}

// runClient runs the command's logic and returns its stdout and stderr.
func runClient(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run %q: %v\n%s", args, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// row returns the summary table's fields for one tenant.
func row(t *testing.T, summary, tenant string) []string {
	t.Helper()
	for _, line := range strings.Split(summary, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == tenant {
			return f
		}
	}
	t.Fatalf("no row for tenant %q in\n%s", tenant, summary)
	return nil
}

// wantRow checks calls, admitted, denied, replayed and errors of a row.
func wantRow(t *testing.T, summary, tenant string, counts ...string) {
	t.Helper()
	f := row(t, summary, tenant)
	if strings.Join(f[1:6], " ") != strings.Join(counts, " ") {
		t.Fatalf("tenant %s: calls admitted denied replayed errors = %q, want %q\n%s", tenant, f[1:6], counts, summary)
	}
}

// TestQuotaPerTenant: 40 calls at concurrency 8 over two tenants with a
// quota of 5 per hour each: exactly 5 admitted per tenant, the rest denied
// with a RetryInfo the table reports.
func TestQuotaPerTenant(t *testing.T) {
	addr := startServer(t, "-rate", "5", "-period", "1h")
	out, _ := runClient(t, "-addr", addr, "-n", "40", "-c", "8", "-tenants", "a,b")
	wantRow(t, out, "a", "20", "5", "15", "0", "0")
	wantRow(t, out, "b", "20", "5", "15", "0", "0")
	wantRow(t, out, "all", "40", "10", "30", "0", "0")
	// 5 per hour: a denial asks to wait at most 12 minutes.
	retryAfter, err := time.ParseDuration(row(t, out, "a")[8])
	if err != nil || retryAfter <= 0 || retryAfter > 12*time.Minute {
		t.Fatalf("retry-after %q (%v)\n%s", row(t, out, "a")[8], err, out)
	}
	for _, col := range []string{"tenant", "admitted", "denied", "replayed", "errors", "p50", "p99", "max retry-after"} {
		if !strings.Contains(out, col) {
			t.Fatalf("summary lacks column %q:\n%s", col, out)
		}
	}
}

// TestRetriesAreReplayed: the server fails the first attempt of every call
// with UNAVAILABLE after the limiter admitted it. The retry policy sends the
// call again with the same request id, and the limiter replays it without a
// second debit: 5 calls succeed (each replayed), the quota of 5 is spent
// exactly once per call, and the other 15 are denied.
func TestRetriesAreReplayed(t *testing.T) {
	addr := startServer(t, "-rate", "5", "-period", "1h", "-flaky", "1")
	for _, method := range []string{"say", "count"} {
		out, _ := runClient(t, "-addr", addr, "-n", "20", "-c", "4", "-tenants", "r-"+method, "-method", method)
		wantRow(t, out, "r-"+method, "20", "0", "15", "5", "0")
	}
}

// TestRetryDeniedHonoursPushback: with -retry-denied, a denied call is
// retried after the server's grpc-retry-pushback-ms, so at 10 per second
// with a burst of 1 every call of a sequential client is admitted in the end.
func TestRetryDeniedHonoursPushback(t *testing.T) {
	addr := startServer(t, "-rate", "10", "-period", "1s", "-burst", "1")
	out, progress := runClient(t, "-addr", addr, "-n", "5", "-c", "1", "-tenants", "p", "-retry-denied", "-max-attempts", "5", "-progress", "20ms")
	wantRow(t, out, "p", "5", "5", "0", "0", "0")
	// Four of the five calls waited out a pushback of about 100ms, so the
	// run lasted several progress intervals.
	line := regexp.MustCompile(`^\[ *\d+\.\ds\] \d+/5 calls \(\d+/s\): \d+ admitted, \d+ replayed, \d+ denied, \d+ errors$`)
	lines := strings.Split(strings.TrimSpace(progress), "\n")
	if progress == "" || !line.MatchString(lines[0]) {
		t.Fatalf("progress lines:\n%s", progress)
	}
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// TestServerDown: without waiting, every call fails with UNAVAILABLE after
// its attempts; the table says so and the command fails. Waiting for a
// server that never comes fails after -wait, before any call.
func TestServerDown(t *testing.T) {
	addr := freeAddr(t)
	var stdout bytes.Buffer
	err := run(t.Context(), []string{"-addr", addr, "-n", "3", "-c", "3", "-tenants", "x", "-max-attempts", "2", "-wait", "0"}, &stdout, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "none of the 3 calls") {
		t.Fatalf("run: %v, want an error saying no call was answered", err)
	}
	out := stdout.String()
	wantRow(t, out, "x", "3", "0", "0", "0", "3")
	if !strings.Contains(out, "errors by code: "+codes.Unavailable.String()+": 3") {
		t.Fatalf("summary:\n%s", out)
	}

	var stderr bytes.Buffer
	start := time.Now()
	err = run(t.Context(), []string{"-addr", addr, "-n", "3", "-wait", "300ms"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "not serving within -wait 300ms") || time.Since(start) > 5*time.Second {
		t.Fatalf("run after %s: %v, want a failed wait", time.Since(start), err)
	}
	if !strings.Contains(stderr.String(), "waiting up to 300ms") {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
}

// TestWaitsForServer starts the client first and the server 300ms later:
// the client waits for it, then makes every call.
func TestWaitsForServer(t *testing.T) {
	addr := freeAddr(t)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		var stdout bytes.Buffer
		err := run(t.Context(), []string{"-addr", addr, "-n", "4", "-c", "2", "-tenants", "w", "-wait", "20s"}, &stdout, io.Discard)
		done <- result{stdout.String(), err}
	}()
	redistest.Elapse(300 * time.Millisecond) // the server comes up later than the client
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	exampleservertest.Start(t, exampleservertest.Parse(t, nil, "-rate", "3", "-period", "1h"), lis)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantRow(t, r.out, "w", "4", "3", "1", "0", "0")
}

func TestFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"-c", "0"}, {"-n", "-1"}, {"-tenants", " , "}, {"-method", "chat"}, {"-max-attempts", "6"}, {"-max-attempts", "1"}, {"extra"},
	} {
		if err := run(t.Context(), bad, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) accepted", bad)
		}
	}
	var stderr bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, io.Discard, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-retry-denied") {
		t.Fatalf("-h: %v\n%s", err, stderr.String())
	}
	if sc := serviceConfig(config{maxAttempts: 3}); strings.Contains(sc, "RESOURCE_EXHAUSTED") || !strings.Contains(sc, `"UNAVAILABLE"`) {
		t.Fatalf("default policy retries denials: %s", sc)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if percentile(d, 0.5) != 50 || percentile(d, 0.99) != 99 || percentile(d[:1], 0.99) != 1 || percentile(nil, 0.5) != 0 {
		t.Fatal("nearest-rank percentiles are wrong")
	}
}
