package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
)

// process is a server started for a measurement (redis-server,
// envoyproxy/ratelimit): the kernel kills it if this process dies first,
// so it never outlives the measurement, and a goroutine reaps it.
type process struct {
	cmd  *exec.Cmd
	dir  string        // its files, removed by close
	done chan struct{} // closed once it has exited and been reaped
}

// startProcess starts cmd, named what in errors, whose files are in dir;
// dir is removed when cmd cannot start.
func startProcess(cmd *exec.Cmd, dir, what string) (*process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %w", what, err)
	}
	p := &process{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// close kills the process, waits for it to exit and removes its files.
func (p *process) close() {
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = os.RemoveAll(p.dir)
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	return ports, nil
}
