package httplimit

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
)

// Response is what the handler wrote, as a Rule.Settle receives it (its
// resp argument, a *Response) for a request through the middleware.
// Settle's err is nil for a status below 400, and otherwise an error naming
// the status ("HTTP 404 Not Found"); SettleStatus counts statuses. A
// handler that panicked is settled with an error and no Response.
type Response struct {
	// Status is the status code written; 200 when the handler wrote a body
	// without one, 0 when it wrote nothing.
	Status int
	// Bytes is how many bytes of body the handler wrote.
	Bytes int64
	// Body is the first bytes of the body, as many as WithSettleBody
	// keeps; nil without it.
	Body []byte
	// Truncated reports that the body was longer than what Body kept.
	Truncated bool
}

// SettleBytes is a Rule.Settle that sets the final cost of a request to
// the bytes of the response body its handler wrote: a rule's quota of
// bytes served. A call that is not an HTTP request keeps its reservation.
func SettleBytes(_ context.Context, resp any, _ error) (int64, bool) {
	r, ok := resp.(*Response)
	if !ok {
		return 0, false
	}
	return r.Bytes, true
}

// SettleBody returns a Rule.Settle that reads the final cost of a request
// from the response body its handler wrote (Response.Body: the middleware
// needs WithSettleBody), with parse: the tokens an LLM API reports in its
// answer, say. A body parse cannot read (its error), or one longer than
// WithSettleBody keeps, leaves the reservation as it is, as does a call
// that is not an HTTP request.
func SettleBody(parse func(body []byte) (int64, error)) func(context.Context, any, error) (int64, bool) {
	return func(_ context.Context, resp any, _ error) (int64, bool) {
		r, ok := resp.(*Response)
		if !ok || r.Body == nil || r.Truncated {
			return 0, false
		}
		cost, err := parse(r.Body)
		if err != nil {
			return 0, false
		}
		return cost, true
	}
}

// SettleStatus returns a Rule.Settle that keeps the reservation of a
// request whose response status is one of statuses and gives back that of
// any other: only those count, as in "5 failed logins (401) per 15
// minutes". A call that is not an HTTP request keeps its reservation.
func SettleStatus(statuses ...int) func(context.Context, any, error) (int64, bool) {
	statuses = slices.Clone(statuses)
	return func(_ context.Context, resp any, _ error) (int64, bool) {
		r, ok := resp.(*Response)
		if !ok || slices.Contains(statuses, r.Status) {
			return 0, false
		}
		return 0, true
	}
}

// recorder notes what the handler writes through it.
type recorder struct {
	http.ResponseWriter
	keep int // body bytes to keep
	resp Response
}

func (w *recorder) WriteHeader(code int) {
	if w.resp.Status == 0 && code >= 200 {
		w.resp.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(p []byte) (int, error) {
	if w.resp.Status == 0 {
		w.resp.Status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.resp.Bytes += int64(n)
	if w.keep > 0 {
		room := w.keep - len(w.resp.Body)
		if n > room {
			w.resp.Truncated = true
		}
		w.resp.Body = append(w.resp.Body, p[:min(n, max(room, 0))]...)
	}
	return n, err
}

// Flush sends what was written, when the connection can (http.Flusher):
// a streaming response goes on through the middleware.
func (w *recorder) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack hands the connection over, when the server can (http.Hijacker).
func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// response returns what the handler wrote.
func (w *recorder) response() *Response {
	if w.keep > 0 && w.resp.Body == nil {
		w.resp.Body = []byte{}
	}
	return &w.resp
}

// err is Settle's err for the status written.
func (w *recorder) err() error {
	if w.resp.Status < 400 {
		return nil
	}
	return statusError(w.resp.Status)
}

// statusError is the error of a response whose status is 400 or above.
type statusError int

func (e statusError) Error() string {
	return "HTTP " + strconv.Itoa(int(e)) + " " + http.StatusText(int(e))
}
