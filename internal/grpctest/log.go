package grpctest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Log is a log destination a server's goroutines may write to while the
// test reads it: a bytes.Buffer behind a mutex. Await waits for a line
// without polling. The zero value is ready to use.
type Log struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed and replaced by every Write
}

// Write appends p to the log.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written != nil {
		close(l.written)
		l.written = nil
	}
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Count returns how many times want was written so far.
func (l *Log) Count(want string) int { return strings.Count(l.String(), want) }

// Await waits until want was written n times in all, woken by each write,
// and fails the test when it is not within 10 seconds.
func (l *Log) Await(t testing.TB, want string, n int) {
	t.Helper()
	give := time.NewTimer(10 * time.Second)
	defer give.Stop()
	for {
		l.mu.Lock()
		if strings.Count(l.b.String(), want) >= n {
			l.mu.Unlock()
			return
		}
		if l.written == nil {
			l.written = make(chan struct{})
		}
		written := l.written
		l.mu.Unlock()
		select {
		case <-written:
		case <-give.C:
			t.Fatalf("%q was not written %d times in 10s; the log:\n%s", want, n, l.String())
		}
	}
}
