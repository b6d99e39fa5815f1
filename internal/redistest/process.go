package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one running redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// errPortTaken means another process bound the chosen port between the check
// and redis-server's bind; the caller picks another port.
var errPortTaken = errors.New("port already in use")

// startServer starts a redis-server with extraArgs on a free port in a new
// temporary directory. A non-empty sentinelConf starts a Sentinel instead,
// with that configuration.
func startServer(extraArgs []string, sentinelConf string) (*Server, error) {
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redistest-"+strconv.Itoa(port)+"-")
		if err != nil {
			return nil, err
		}
		var lead []string
		if sentinelConf != "" {
			// Sentinel rewrites its configuration file, so it lives in dir.
			conf := filepath.Join(dir, "sentinel.conf")
			if err := os.WriteFile(conf, []byte(sentinelConf), 0o600); err != nil {
				return nil, err
			}
			lead = []string{conf, "--sentinel"}
		}
		p, err := spawn(dir, port, lead, extraArgs)
		if err == nil {
			return &Server{addr: addr(port), proc: p, lead: lead, args: extraArgs, dir: dir, port: port}, nil
		}
		_ = os.RemoveAll(dir)
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			return nil, err
		}
	}
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// freePort returns a loopback port that is free, and whose Cluster bus port
// (port+10000) is free too.
func freePort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port >= 65535-10000 {
			continue
		}
		bus, err := net.Listen("tcp", addr(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port below 55535 with a free bus port")
}

// spawn starts redis-server with lead (a configuration file and its mode,
// which must come first), then its options, on port with its data and logs
// in dir, and waits until it answers PING.
func spawn(dir string, port int, lead, extraArgs []string) (*process, error) {
	bin, err := exec.LookPath(ServerBinary())
	if err != nil {
		return nil, fmt.Errorf("%s not found: %s", ServerBinary(), InstallHint)
	}
	args := append(append([]string(nil), lead...),
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", "redis.log",
		// DEBUG SLEEP lets tests delay replies past a client's read timeout.
		"--enable-debug-command", "local",
		// A replica syncs at once instead of after the default 5s wait for others.
		"--repl-diskless-sync-delay", "0",
	)
	args = append(args, extraArgs...)
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	// The kernel kills the server if the test binary dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	exited := false
	_, err = poll(ctx, func() error {
		select {
		case <-p.done:
			exited = true
			cancel() // nothing more to wait for
			return errors.New("exited")
		default:
		}
		reply, err := command(addr(port), "PING")
		if err == nil && reply != "PONG" {
			err = fmt.Errorf("PING answered %q", reply)
		}
		return err
	})
	switch {
	case err == nil:
		return p, nil
	case exited:
		log := logTail(dir)
		if strings.Contains(log, "Address already in use") {
			return nil, errPortTaken
		}
		return nil, fmt.Errorf("redis-server on port %d exited: %s", port, log)
	default:
		p.kill()
		return nil, fmt.Errorf("redis-server on port %d not ready after %s: %v: %s", port, startTimeout, err, logTail(dir))
	}
}

// logTail returns the end of a server's logs, for error messages.
func logTail(dir string) string {
	var b strings.Builder
	for _, name := range []string{"stdout.log", "redis.log"} {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		b.Write(data)
	}
	return strings.TrimSpace(b.String())
}

// command sends one command over a fresh connection and returns a simple or
// bulk string reply. It speaks just enough RESP for PING, INFO and CLUSTER
// INFO, without a client library's background goroutines.
func command(address string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", address, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var req strings.Builder
	req.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		req.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := conn.Write([]byte(req.String())); err != nil {
		return "", err
	}
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("unexpected reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// infoField returns the value of field in an INFO-style reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// waitFor polls cond until it returns nil or ctx ends, and then returns
// cond's last error.
func waitFor(ctx context.Context, cond func() error) error {
	_, err := poll(ctx, cond)
	return err
}

// waitInfo waits until INFO section on address contains want
// ("field:value").
func waitInfo(ctx context.Context, address, section, want string) error {
	field, value, _ := strings.Cut(want, ":")
	return waitFor(ctx, func() error {
		info, err := command(address, "INFO", section)
		if err != nil {
			return err
		}
		if got := infoField(info, field); got != value {
			return fmt.Errorf("INFO %s: %s is %q, want %q", section, field, got, value)
		}
		return nil
	})
}

// startCluster starts 3 primaries with replicas replicas each, joins them
// with redis-cli --cluster create, and waits until every node agrees the
// Cluster is whole and every replica is in sync.
func startCluster(replicas int, nodeTimeout time.Duration) (c *Cluster, err error) {
	cli, err := exec.LookPath(CLIBinary())
	if err != nil {
		return nil, fmt.Errorf("%s not found: %s", CLIBinary(), InstallHint)
	}
	n := 3 * (1 + replicas)
	var nodes []*Server
	defer func() {
		if err != nil {
			for _, s := range nodes {
				s.destroy()
			}
		}
	}()
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
	}
	for range n {
		s, err := startServer(args, "")
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, s)
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	create := []string{"--cluster", "create"}
	for _, s := range nodes {
		create = append(create, s.Addr())
	}
	create = append(create, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s --cluster create: %v: %s", CLIBinary(), err, out)
	}

	var primaries, secondaries []*Server
	for _, s := range nodes {
		err := waitFor(ctx, func() error {
			info, err := command(s.Addr(), "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			for field, want := range map[string]string{
				"cluster_state":       "ok",
				"cluster_slots_ok":    "16384",
				"cluster_known_nodes": strconv.Itoa(n),
			} {
				if got := infoField(info, field); got != want {
					return fmt.Errorf("CLUSTER INFO on %s: %s is %q, want %q", s.Addr(), field, got, want)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		info, err := command(s.Addr(), "INFO", "replication")
		if err != nil {
			return nil, err
		}
		if infoField(info, "role") == "master" {
			primaries = append(primaries, s)
			continue
		}
		if err := waitInfo(ctx, s.Addr(), "replication", "master_link_status:up"); err != nil {
			return nil, fmt.Errorf("replica %s: %w", s.Addr(), err)
		}
		secondaries = append(secondaries, s)
	}
	nodes = append(primaries, secondaries...)
	c = &Cluster{Nodes: nodes}
	for _, s := range nodes {
		c.Addrs = append(c.Addrs, s.Addr())
	}
	return c, nil
}
