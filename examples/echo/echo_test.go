package echo_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/internal/grpctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts srv on an in-memory listener and returns a client for it; both
// are stopped when the test ends.
func serve(t *testing.T, srv echo.EchoServer) *echo.Client {
	t.Helper()
	return echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, srv) }, nil))
}

func TestSay(t *testing.T) {
	c := serve(t, &echo.Server{})
	for _, msg := range []string{"", "hello", "ünïcode ✓", string(make([]byte, 100000))} {
		out, err := c.Say(t.Context(), wrapperspb.String(msg))
		if err != nil {
			t.Fatalf("Say(%.20q): %v", msg, err)
		}
		if out.GetValue() != msg {
			t.Fatalf("Say(%.20q) = %.20q", msg, out.GetValue())
		}
	}
}

func TestCount(t *testing.T) {
	c := serve(t, &echo.Server{})
	for _, n := range []int{0, 1, 5, 300} {
		stream, err := c.Count(t.Context(), n)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("Count(%d): %v", n, err)
			}
			got = append(got, m.GetValue())
		}
		if len(got) != n {
			t.Fatalf("Count(%d) sent %d messages", n, len(got))
		}
		for i, v := range got {
			if v != strconv.Itoa(i+1) {
				t.Fatalf("Count(%d) message %d = %q, want %q", n, i, v, strconv.Itoa(i+1))
			}
		}
	}
}

func TestCountRejectsBadN(t *testing.T) {
	c := serve(t, &echo.Server{})
	for _, n := range []int{-1, echo.MaxCount + 1} {
		stream, err := c.Count(t.Context(), n)
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Count(%d): got %v, want InvalidArgument", n, err)
		}
	}
}

func TestChat(t *testing.T) {
	c := serve(t, &echo.Server{})
	stream, err := c.Chat(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	// Send from one goroutine while receiving in this one, as a real
	// bidirectional client would.
	sendErr := make(chan error, 1)
	go func() {
		for i := range n {
			if err := stream.Send(wrapperspb.String(fmt.Sprint("m", i))); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- stream.CloseSend()
	}()
	for i := 0; ; i++ {
		m, err := stream.Recv()
		if err == io.EOF {
			if i != n {
				t.Fatalf("received %d messages, sent %d", i, n)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint("m", i); m.GetValue() != want {
			t.Fatalf("message %d = %q, want %q", i, m.GetValue(), want)
		}
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
}

// TestBeforeHook proves the hook sees each call's method and metadata and
// that its error becomes the call's status for every method shape.
func TestBeforeHook(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	c := serve(t, &echo.Server{Before: func(ctx context.Context, fullMethod string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		seen = append(seen, fullMethod+" "+fmt.Sprint(md.Get("x-test")))
		mu.Unlock()
		return status.Error(codes.Unavailable, "try again")
	}})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-test", "v")

	_, err := c.Say(ctx, wrapperspb.String("x"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Say: %v, want Unavailable", err)
	}
	cs, err := c.Count(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("Count: %v, want Unavailable", err)
	}
	bs, err := c.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("Chat: %v, want Unavailable", err)
	}

	mu.Lock()
	defer mu.Unlock()
	want := []string{echo.SayMethod + " [v]", echo.CountMethod + " [v]", echo.ChatMethod + " [v]"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("hook saw %q, want %q", seen, want)
	}
}

// TestMethodNames checks the constants against the descriptor the server
// registers, which is where interceptors get the names they see. The server
// lists methods in map order, so both sides are sorted.
func TestMethodNames(t *testing.T) {
	s := grpc.NewServer()
	echo.Register(s, &echo.Server{})
	var names []string
	for _, m := range s.GetServiceInfo()[echo.ServiceName].Methods {
		names = append(names, "/"+echo.ServiceName+"/"+m.Name)
	}
	slices.Sort(names)
	if want := fmt.Sprint(slices.Sorted(slices.Values([]string{echo.SayMethod, echo.CountMethod, echo.ChatMethod}))); fmt.Sprint(names) != want {
		t.Fatalf("methods %v, want %v", names, want)
	}
	if echo.AllMethods != "/tollgate.example.Echo/*" {
		t.Fatalf("AllMethods = %q", echo.AllMethods)
	}
}

// TestServiceNameIsTheProtos checks the hand-written names against the ones
// generated from echo.proto.
func TestServiceNameIsTheProtos(t *testing.T) {
	if echo.ServiceName != echo.Echo_ServiceDesc.ServiceName {
		t.Fatalf("ServiceName %q, echo.proto's service %q", echo.ServiceName, echo.Echo_ServiceDesc.ServiceName)
	}
	if want := "/" + echo.ServiceName + "/Say"; echo.SayMethod != want {
		t.Fatalf("SayMethod %q, want %q", echo.SayMethod, want)
	}
}
