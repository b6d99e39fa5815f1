package exampleserver_test

// Every grpcurl command in docs/ runs, exactly as written, against the
// example server started as the documentation starts it.

import (
	"context"
	"fmt"
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
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
)

// docsAdminToken is the token the documentation's commands carry, as
// "s3cret" or $TOLLGATE_ADMIN_TOKEN.
const docsAdminToken = "s3cret"

// listenRetrying listens on the documented address, waiting a little for
// another test to let it go.
func listenRetrying(t *testing.T, addr string) net.Listener {
	t.Helper()
	var lis net.Listener
	redistest.Eventually(t, 10*time.Second, func() (err error) {
		if lis, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("the documentation's commands need %s: %w", addr, err)
		}
		return nil
	})
	return lis
}

func TestDocsGrpcurlCommands(t *testing.T) {
	grpcurl := grpctest.Grpcurl(t)
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []grpctest.DocCommand
	for _, c := range grpctest.GrpcurlCommands(t, pages...) {
		if !strings.Contains(c.Text, "127.0.0.1:8081") { // tollgate-rls's: cmd/tollgate-rls runs them
			cmds = append(cmds, c)
		}
	}
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
	redistest.Eventually(t, 10*time.Second, func() error {
		conn, err := net.Dial("tcp", cfg.AdminAddr)
		if err != nil {
			return fmt.Errorf("the admin listener does not answer: %w", err)
		}
		return conn.Close()
	})

	// What some commands must print, beyond a zero exit status.
	wants := map[string]*regexp.Regexp{
		" list":                  regexp.MustCompile(`tollgate\.example\.Echo`),
		"Admin/ListOverrides":    regexp.MustCompile(`"blocked": true`),
		"Admin/ListRules":        regexp.MustCompile(`"name": "per-tenant"`),
		"Admin/GetQuota":         regexp.MustCompile(`"available"`),
		"Admin/TopRefused":       regexp.MustCompile(`"id": "mallory"`),
		"tollgate.example.Echo/": regexp.MustCompile(`\S`),
	}
	for _, c := range cmds {
		if strings.Contains(c.Text, "Admin/TopRefused") {
			// Someone to name: calls past the 10 a second of the rule.
			md := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "mallory")
			for range 15 {
				_, _ = client.Say(md, wrapperspb.String("hi"))
			}
		}
		sh := exec.Command("sh", "-c", c.Text)
		sh.Dir = root // -import-path admin/v1 is relative to the repository's root
		sh.Env = append(os.Environ(), "PATH="+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH"),
			exampleserver.EnvAdminToken+"="+docsAdminToken)
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %s\nfailed: %v\n%s", c.Page, c.Text, err, out)
			continue
		}
		for suffix, re := range wants {
			if strings.Contains(c.Text, suffix) && !re.Match(out) {
				t.Errorf("%s: %s\nprinted:\n%s\nwant it to match %s", c.Page, c.Text, out, re)
			}
		}
		if strings.Contains(c.Text, "Admin/Block") {
			// The admin service acts on the serving Limiter: the block
			// applies to the next call.
			md := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "abuser")
			if _, err := client.Say(md, wrapperspb.String("hi")); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s: after %s\nthe blocked caller's call: %v, want PermissionDenied", c.Page, c.Text, err)
			}
		}
		if strings.Contains(c.Text, "Admin/DeleteOverride") {
			md := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "abuser")
			if _, err := client.Say(md, wrapperspb.String("hi")); err != nil {
				t.Errorf("%s: after %s\nthe caller's call: %v, want it admitted", c.Page, c.Text, err)
			}
		}
	}
}
