package grpctest

import (
	"bytes"
	"sync"
)

// Log is a log destination a server's goroutines may write to while the
// test reads it: a bytes.Buffer behind a mutex.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the log.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
