package region

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// proxy is a TCP link to a Redis for the tests: what a client writes
// while a hold is on reaches the server that much later (a report held up
// by retransmissions on a slow link, delivered even after the client gave
// up on it), and the link can be turned to another server, as an address
// that fails over.
type proxy struct {
	t  *testing.T
	ln net.Listener

	mu       sync.Mutex
	upstream string
	hold     time.Duration // added to what clients write now
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
}

// newProxy listens on a loopback port and forwards to upstream until the
// test ends.
func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the address to dial instead of the server's.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// setHold delays what clients write from now on by d (0: no more).
func (p *proxy) setHold(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = d
}

// turn sends new connections to upstream and drops the open ones, as a
// failover of the address.
func (p *proxy) turn(upstream string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = upstream
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.turn("")
	p.wg.Wait()
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.upstream
		p.mu.Unlock()
		s, err := net.Dial("tcp", up)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		p.wg.Go(func() { p.forward(c, s) })
		p.wg.Go(func() {
			_, _ = io.Copy(c, s) // the server's replies, as they come
			_ = c.Close()
		})
	}
}

// chunk is what a client wrote, and when it is due at the server.
type chunk struct {
	b   []byte
	due time.Time
}

// forward copies c to s, each read delivered at its due time in order;
// what was read before the client closed is still delivered.
func (p *proxy) forward(c, s net.Conn) {
	queue := make(chan chunk, 1024)
	p.wg.Go(func() {
		defer func() {
			_ = s.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, s)
			p.mu.Unlock()
		}()
		for ch := range queue {
			time.Sleep(time.Until(ch.due))
			if _, err := s.Write(ch.b); err != nil {
				return
			}
		}
	})
	defer close(queue)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hold := p.hold
			p.mu.Unlock()
			queue <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(hold)}
		}
		if err != nil {
			return
		}
	}
}
