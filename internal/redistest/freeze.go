package redistest

import (
	"syscall"
	"testing"
)

// Freeze stops s's process (SIGSTOP): it keeps its connections and its
// data but reads, runs and answers nothing until Thaw. Bytes sent to it
// meanwhile wait in the kernel's socket buffers. A replica frozen falls
// behind its primary while the primary still counts it connected.
func (s *Server) Freeze(t testing.TB) { s.signal(t, syscall.SIGSTOP) }

// Thaw lets a frozen s run again (SIGCONT): it reads what waited in its
// socket buffers first.
func (s *Server) Thaw(t testing.TB) { s.signal(t, syscall.SIGCONT) }

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("redistest: %s is not running here: it cannot be sent %v", s.addr, sig)
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %v to %s: %v", sig, s.addr, err)
	}
}
