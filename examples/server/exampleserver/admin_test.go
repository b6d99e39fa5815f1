package exampleserver_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/tollgate/tollgate/admin/v1"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/examples/server/exampleserver"
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
