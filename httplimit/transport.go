package httplimit

import (
	"net/http"

	"github.com/tollgate/tollgate/overload"
)

// Transport is the net/http client side of overload control, what
// interceptor.UnaryClientInterceptor is to a gRPC client: each request
// carries the criticality of its context (overload.WithCriticality, or the
// one a handler's context has from the call it serves) in overload.Header,
// unless it names one already, so that a call fanning out over HTTP is shed
// downstream as what it is; and, with a Throttle, the client refuses a
// request itself when the servers refuse most of its criticality (a 503 or
// a 429 counts as refused), returning an error that wraps the
// *overload.Refusal (errors.Is overload.ErrShed) before anything is sent.
// next nil means http.DefaultTransport; t nil means no throttling.
//
//	client := &http.Client{Transport: httplimit.Transport(nil, th)}
func Transport(next http.RoundTripper, t *overload.Throttle) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{next: next, t: t}
}

type transport struct {
	next http.RoundTripper
	t    *overload.Throttle
}

// RoundTrip sends req with its criticality, through the throttle if any.
func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := overload.Critical
	if v := req.Header.Get(overload.Header); v != "" {
		if p, err := overload.ParseCriticality(v); err == nil {
			c = p
		}
	} else if from, ok := overload.CriticalityFrom(req.Context()); ok {
		c = from
		req = req.Clone(req.Context()) // a RoundTripper must not change the caller's request
		req.Header.Set(overload.Header, c.String())
	}
	if tr.t == nil {
		return tr.next.RoundTrip(req)
	}
	if err := tr.t.Allow(c); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // RoundTrip closes the body, even on an error
		}
		return nil, err
	}
	resp, err := tr.next.RoundTrip(req)
	tr.t.Record(c, err == nil && resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests)
	return resp, err
}
