package exampleserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/connectlimit"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/httplimit"
)

// HTTPRoute is the plain HTTP route of the echo service: a GET answers
// its message, limited by the same rule, per the same tenant header, as
// the Echo methods.
const HTTPRoute = "GET /v1/say/{message}"

type msg = wrapperspb.StringValue

// NewHTTPHandler returns what the HTTP listener serves: the Echo service
// over connect-go (the Connect, gRPC and gRPC-Web protocols, at the gRPC
// method paths) and HTTPRoute, behind lim, so that a tenant has one quota
// across the gRPC listener, Connect and HTTP.
func NewHTTPHandler(lim *engine.Limiter) (http.Handler, error) {
	limit, err := connectlimit.New(lim)
	if err != nil {
		return nil, err
	}
	httpLimit, err := httplimit.New(lim)
	if err != nil {
		return nil, err
	}
	opts := connect.WithInterceptors(limit)
	mux := http.NewServeMux()
	mux.Handle(echo.SayMethod, connect.NewUnaryHandler(echo.SayMethod, func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		return connect.NewResponse(wrapperspb.String(req.Msg.GetValue())), nil
	}, opts))
	mux.Handle(echo.CountMethod, connect.NewServerStreamHandler(echo.CountMethod, func(_ context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error {
		n, err := strconv.Atoi(req.Msg.GetValue())
		if err != nil || n < 0 || n > echo.MaxCount {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("count: want a decimal number from 0 to %d, got %q", echo.MaxCount, req.Msg.GetValue()))
		}
		for i := 1; i <= n; i++ {
			if err := s.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
				return err
			}
		}
		return nil
	}, opts))
	mux.Handle(echo.ChatMethod, connect.NewBidiStreamHandler(echo.ChatMethod, func(_ context.Context, s *connect.BidiStream[msg, msg]) error {
		for {
			in, err := s.Receive()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := s.Send(in); err != nil {
				return err
			}
		}
	}, opts))
	mux.Handle(HTTPRoute, httpLimit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, r.PathValue("message"))
	})))
	return mux, nil
}

// newHTTPServer returns the server of the HTTP listener: HTTP/1.1 and
// unencrypted HTTP/2 (h2c), which gRPC clients of connect-go speak.
func newHTTPServer(h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}
