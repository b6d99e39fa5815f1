package exampleserver_test

// Every grpcurl command in docs/ runs, exactly as written, against the
// example server started as the documentation starts it.

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/examples/server/exampleserver"
)

// docsAdminToken is the token the documentation's commands carry, as
// "s3cret" or $TOLLGATE_ADMIN_TOKEN.
const docsAdminToken = "s3cret"

// grpcurlHint is how to install grpcurl, which .ci/run does.
const grpcurlHint = "go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4"

// findGrpcurl returns the grpcurl binary: on PATH, or where go install
// puts it.
func findGrpcurl(t *testing.T) string {
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "grpcurl")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("grpcurl is needed to run the documentation's commands and is not installed: %s", grpcurlHint)
	return ""
}

// docCommand is one grpcurl command of a page.
type docCommand struct {
	page, text string
}

// grpcurlCommands returns the grpcurl commands of the pages in dir, in
// order, with their continuation lines joined as a shell joins them.
func grpcurlCommands(t *testing.T, dir string) []docCommand {
	pages, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []docCommand
	for _, page := range pages {
		f, err := os.Open(page)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		inCode, cmd := false, ""
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
				continue
			}
			if !inCode {
				continue
			}
			if cmd != "" || strings.HasPrefix(line, "grpcurl ") {
				cmd += line + "\n"
				if !strings.HasSuffix(line, `\`) {
					out = append(out, docCommand{filepath.Base(page), strings.TrimSuffix(cmd, "\n")})
					cmd = ""
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// listenRetrying listens on the documented address, waiting a little for
// another test to let it go.
func listenRetrying(t *testing.T, addr string) net.Listener {
	deadline := time.Now().Add(10 * time.Second)
	for {
		lis, err := net.Listen("tcp", addr)
		if err == nil {
			return lis
		}
		if time.Now().After(deadline) {
			t.Fatalf("the documentation's commands need %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDocsGrpcurlCommands(t *testing.T) {
	grpcurl := findGrpcurl(t)
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	cmds := grpcurlCommands(t, filepath.Join(root, "docs"))
	if len(cmds) < 10 {
		t.Fatalf("found %d grpcurl commands in docs/, want at least 10: %v", len(cmds), cmds)
	}
	t.Logf("running the %d grpcurl commands of docs/", len(cmds))

	// As docs/policies.md starts it:
	// TOLLGATE_ADMIN_TOKEN=s3cret go run ./examples/server -admin-addr 127.0.0.1:9090
	env := map[string]string{exampleserver.EnvAdminToken: docsAdminToken}
	cfg, err := exampleserver.ParseFlags([]string{"-admin-addr", "127.0.0.1:9090"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lis := listenRetrying(t, cfg.Addr) // 127.0.0.1:50051, the default
	admin := listenRetrying(t, cfg.AdminAddr)
	admin.Close() // Serve listens on it itself
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- exampleserver.Serve(ctx, cfg, lis, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	cc, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := echo.NewClient(cc)
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", cfg.AdminAddr)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin listener does not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// What some commands must print, beyond a zero exit status.
	wants := map[string]*regexp.Regexp{
		" list":                  regexp.MustCompile(`tollgate\.example\.Echo`),
		"Admin/ListOverrides":    regexp.MustCompile(`"blocked": true`),
		"Admin/ListRules":        regexp.MustCompile(`"name": "per-tenant"`),
		"Admin/GetQuota":         regexp.MustCompile(`"available"`),
		"tollgate.example.Echo/": regexp.MustCompile(`\S`),
	}
	for _, c := range cmds {
		sh := exec.Command("sh", "-c", c.text)
		sh.Dir = root // -import-path admin/v1 is relative to the repository's root
		sh.Env = append(os.Environ(), "PATH="+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH"),
			exampleserver.EnvAdminToken+"="+docsAdminToken)
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %s\nfailed: %v\n%s", c.page, c.text, err, out)
			continue
		}
		for suffix, re := range wants {
			if strings.Contains(c.text, suffix) && !re.Match(out) {
				t.Errorf("%s: %s\nprinted:\n%s\nwant it to match %s", c.page, c.text, out, re)
			}
		}
		if strings.Contains(c.text, "Admin/Block") {
			// The admin service acts on the serving Limiter: the block
			// applies to the next call.
			md := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "abuser")
			if _, err := client.Say(md, wrapperspb.String("hi")); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s: after %s\nthe blocked caller's call: %v, want PermissionDenied", c.page, c.text, err)
			}
		}
	}
}
