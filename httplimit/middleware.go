package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/interceptor"
)

// Option configures the middleware.
type Option func(*config)

type config struct {
	fields     bool
	settleBody int
}

// WithoutRateLimitFields leaves the RateLimit-Policy and RateLimit fields
// out of every response. Retry-After still comes with a 429.
func WithoutRateLimitFields() Option {
	return func(c *config) { c.fields = false }
}

// WithSettleBody keeps the first n bytes of each admitted response's body
// for the rules' Settle (Response.Body, read by SettleBody). The default, 0,
// keeps none. n is at most MaxSettleBody.
func WithSettleBody(n int) Option {
	return func(c *config) { c.settleBody = n }
}

// MaxSettleBody is the most bytes of a response body WithSettleBody keeps
// (1 MiB): it bounds what a request makes the server hold.
const MaxSettleBody = 1 << 20

// New returns middleware that limits the requests to the handler it wraps
// with l's rules. An option out of range is an error.
//
// A request is a call to its route (see Route). An admitted request runs
// the handler with a context carrying the request's report for
// interceptor.ReportCost; once the handler returns (or panics) the call is
// ended: its seats released and its rules settled from the Response the
// handler wrote. A refused request never reaches the handler: it gets the
// status of Status, a problem details body (Problem) and, for a denial,
// Retry-After.
func New(l *interceptor.Limiter, opts ...Option) (func(http.Handler) http.Handler, error) {
	c := config{fields: true}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case l == nil:
		return nil, errors.New("httplimit: the Limiter is nil")
	case c.settleBody < 0 || c.settleBody > MaxSettleBody:
		return nil, fmt.Errorf("httplimit: WithSettleBody(%d): want 0 to %d bytes", c.settleBody, MaxSettleBody)
	}
	return func(next http.Handler) http.Handler {
		return &middleware{l: l, c: c, next: next}
	}, nil
}

// middleware is the limited handler.
type middleware struct {
	l    *interceptor.Limiter
	c    config
	next http.Handler
}

// ServeHTTP decides r, then serves it or refuses it.
func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := engine.IncomingContext(r.Context(), r.Header, r.RemoteAddr)
	v := m.l.Begin(ctx, engine.Call{Method: Route(r, m.next)})
	if m.c.fields {
		setFields(w.Header(), v.Limits())
	}
	if err := v.Err(); err != nil {
		refuse(w, v, err)
		return
	}
	rec := &recorder{ResponseWriter: w, keep: m.c.settleBody}
	defer v.EndPanicked()
	if v.Context() != ctx {
		r = r.WithContext(v.Context()) // the report of interceptor.ReportCost
	}
	m.next.ServeHTTP(rec, r)
	v.End(rec.response(), rec.err())
}

// Route returns the call a request is to the rules: its route's method
// and ServeMux pattern, "GET /items/{id}". The pattern is the one that
// matched r (Request.Pattern, set when the middleware wraps a handler the
// ServeMux routed to), or, when next is a *http.ServeMux, the pattern it
// routes r to. A pattern without a method takes r's ("/items/" is "GET
// /items/" for a GET). A request no pattern matches is its method alone
// ("GET"): only rules without Methods apply to it.
func Route(r *http.Request, next http.Handler) string {
	pattern := r.Pattern
	if mux, ok := next.(*http.ServeMux); ok && pattern == "" {
		_, pattern = mux.Handler(r)
	}
	if pattern == "" {
		return r.Method
	}
	if strings.HasPrefix(pattern, "/") || !strings.ContainsAny(pattern, " \t") {
		return r.Method + " " + pattern // no method: "/path" or "host/path"
	}
	method, rest, _ := strings.Cut(strings.Replace(pattern, "\t", " ", 1), " ")
	return method + " " + strings.TrimLeft(rest, " \t")
}
