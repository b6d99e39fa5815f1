package exampleserver_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/tollgate/tollgate/admin/v1"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/examples/server/exampleserver"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// -admin-addr serves tollgate.admin.v1 on its own listener, to callers with
// the token only: it shows a tenant's quota and gives it back.
func TestAdminService(t *testing.T) {
	withToken := func(k string) string {
		if k == exampleserver.EnvAdminToken {
			return "s3cret"
		}
		return ""
	}
	if _, err := exampleserver.ParseFlags([]string{"-admin-addr", "127.0.0.1:0"}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), exampleserver.EnvAdminToken) {
		t.Fatalf("-admin-addr without a token: %v, want an error naming %s", err, exampleserver.EnvAdminToken)
	}
	adminAddr := freeAddr(t)
	s := start(t, parse(t, withToken, "-rate", "2", "-period", "1h", "-admin-addr", adminAddr))
	c := echo.NewClient(dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if _, err := say(ctx, c, "acme"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := say(ctx, c, "acme"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}

	a := adminv1.NewAdminClient(dial(t, adminAddr))
	acme := &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: "acme"}}
	_, err := a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: exampleserver.RuleName, Caller: acme}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("GetQuota without a token: %v, want Unauthenticated", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	q, err := a.GetQuota(authed, &adminv1.GetQuotaRequest{Rule: exampleserver.RuleName, Caller: acme})
	if err != nil {
		t.Fatal(err)
	}
	if len(q.GetQuotas()) != 1 || q.GetQuotas()[0].GetAvailable() != 0 || q.GetQuotas()[0].GetCapacity() != 2 {
		t.Fatalf("GetQuota = %v, want one limit of capacity 2 with nothing available", q)
	}
	if _, err := a.ResetQuota(authed, &adminv1.ResetQuotaRequest{Rule: exampleserver.RuleName, Caller: acme}); err != nil {
		t.Fatal(err)
	}
	if _, err := say(ctx, c, "acme"); err != nil {
		t.Fatalf("call after ResetQuota: %v", err)
	}
	_, err = a.GetQuota(authed, &adminv1.GetQuotaRequest{Rule: "nope", Caller: acme})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("GetQuota of an unknown rule: %v, want NotFound naming it", err)
	}
}

// The admin listener over mutual TLS: a client with a certificate the
// configured CA signed is served, one without is refused; an override set
// through it applies to the limited service.
func TestAdminServiceMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := grpctest.NewCA(t, "admin CA")
	cert, key := ca.Issue(7, false)
	for name, data := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	withToken := func(k string) string {
		if k == exampleserver.EnvAdminToken {
			return "s3cret"
		}
		return ""
	}
	adminAddr := freeAddr(t)
	s := start(t, parse(t, withToken, "-rate", "1", "-period", "1h", "-admin-addr", adminAddr,
		"-admin-tls-cert", filepath.Join(dir, "tls.crt"), "-admin-tls-key", filepath.Join(dir, "tls.key"), "-admin-tls-client-ca", filepath.Join(dir, "ca.crt")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	adminClient := func(certs []tls.Certificate) adminv1.AdminClient {
		creds := credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12})
		cc, err := grpc.NewClient(adminAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return adminv1.NewAdminClient(cc)
	}
	if _, err := adminClient(nil).ListRules(authed, &adminv1.ListRulesRequest{}); err == nil {
		t.Fatal("an admin client without a certificate was served")
	}
	a := adminClient(ca.ClientCert(8))
	if _, err := a.ListRules(authed, &adminv1.ListRulesRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("an admin client with a certificate the CA signed: %v", err)
	}
	vip := &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: "vip"}}
	if _, err := a.SetOverride(authed, &adminv1.SetOverrideRequest{Rule: exampleserver.RuleName, Caller: vip,
		Limits: []*adminv1.Limit{{Rate: 3, Period: durationpb.New(time.Hour)}}}); err != nil {
		t.Fatal(err)
	}
	c := echo.NewClient(dial(t, s.Addr))
	admitted := 0
	redistest.Eventually(t, 5*time.Second, func() error {
		for admitted < 3 {
			if _, err := say(ctx, c, "vip"); err != nil {
				return fmt.Errorf("the override set through the admin listener does not apply: %d admitted, %v", admitted, err)
			}
			admitted++
		}
		return nil
	})
}
