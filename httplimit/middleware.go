package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/keyfunc"
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
// keeps none. n is at most 1 MiB: it bounds what a request makes the
// server hold.
func WithSettleBody(n int) Option {
	return func(c *config) { c.settleBody = n }
}

// maxSettleBody is the most bytes of a response body WithSettleBody keeps.
const maxSettleBody = 1 << 20

// New returns middleware that limits the requests to the handler it wraps
// with l's rules. An option out of range is an error.
//
// A request is a call to its route (see the package documentation). An
// admitted request runs the handler with a context carrying the request's
// report for engine.ReportCost; once the handler returns (or panics) the
// call is ended: its seats released and its rules settled from the
// Response the handler wrote. A refused request never reaches the handler:
// it gets the status of its refusal (429 for a denial, with Retry-After),
// and a problem details body (Problem). A redirect the ServeMux it wraps
// answers itself (a path to clean, a missing trailing slash) is not a call
// to any route: it is never limited, and never charged.
func New(l *engine.Limiter, opts ...Option) (func(http.Handler) http.Handler, error) {
	c := config{fields: true}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case l == nil:
		return nil, errors.New("httplimit: the Limiter is nil")
	case c.settleBody < 0 || c.settleBody > maxSettleBody:
		return nil, fmt.Errorf("httplimit: WithSettleBody(%d): want 0 to %d bytes", c.settleBody, maxSettleBody)
	}
	return func(next http.Handler) http.Handler {
		m := &middleware{l: l, c: c, next: next}
		m.mux, _ = next.(*http.ServeMux)
		return m
	}, nil
}

// middleware is the limited handler.
type middleware struct {
	l    *engine.Limiter
	c    config
	next http.Handler
	mux  *http.ServeMux // next, when it is a ServeMux
}

// ServeHTTP decides r, then serves it or refuses it.
func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, own := m.route(r)
	if own {
		m.next.ServeHTTP(w, r)
		return
	}
	v := m.l.Begin(r.Context(), engine.Call{Method: route, Header: keyfunc.HTTPHeader(r.Header), Peer: (*remoteAddr)(r), QuietAdmitted: !m.c.fields})
	if m.c.fields {
		setFields(w.Header(), v.Limits())
	}
	if v.Err() != nil {
		refuse(w, &v)
		return
	}
	defer v.EndPanicked()
	if !v.Settles() {
		if ctx := v.Context(); ctx != r.Context() {
			r = r.WithContext(ctx) // the call's criticality, under overload control
		}
		m.next.ServeHTTP(w, r)
		v.End(nil, nil)
		return
	}
	rec := &recorder{ResponseWriter: w, keep: m.c.settleBody}
	m.next.ServeHTTP(rec, r.WithContext(v.Context())) // the report of engine.ReportCost
	v.End(rec.response(), rec.err())
}

// remoteAddr is a request's RemoteAddr as the call's peer: a pointer to
// the request, so that presenting it allocates nothing.
type remoteAddr http.Request

// Network returns "": net/http does not say.
func (*remoteAddr) Network() string { return "" }

// String returns the request's RemoteAddr.
func (a *remoteAddr) String() string { return a.RemoteAddr }

// route returns the call r is to the rules: its route's method and
// ServeMux pattern, "GET /items/{id}". The pattern is the one the ServeMux
// the middleware wraps routes r to, or, when it wraps a handler a ServeMux
// routed r to, the pattern that matched (Request.Pattern). A pattern
// without a method takes r's ("/items/" is "GET /items/" for a GET). A
// request no pattern matches is its method alone ("GET"): only rules
// without Methods apply to it. own reports a request the wrapped ServeMux
// answers itself with a redirect.
func (m *middleware) route(r *http.Request) (route string, own bool) {
	pattern := r.Pattern
	if m.mux != nil {
		// The wrapped mux's own routes, not an outer mux's that may have
		// routed r here ("/v1/" of outer.Handle("/v1/", limited(inner))).
		var h http.Handler
		h, pattern = m.mux.Handler(r)
		if reflect.TypeOf(h) == redirectType {
			return "", true
		}
	}
	if pattern == "" {
		return r.Method, false
	}
	if strings.HasPrefix(pattern, "/") || !strings.ContainsAny(pattern, " \t") {
		return r.Method + " " + pattern, false // no method: "/path" or "host/path"
	}
	if method, rest, ok := strings.Cut(pattern, " "); ok && !strings.ContainsRune(method, '\t') && rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return pattern, false // "GET /items/{id}": the route as it is
	}
	method, rest, _ := strings.Cut(strings.Replace(pattern, "\t", " ", 1), " ")
	return method + " " + strings.TrimLeft(rest, " \t"), false
}

// redirectType is the type of the handler a ServeMux answers a redirect
// with (http.RedirectHandler's).
var redirectType = reflect.TypeOf(http.RedirectHandler("/", http.StatusMovedPermanently))
