package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/fields"
)

// problemQuotaExceeded is the problem type of a denial, from the IETF
// httpapi draft's registrations of problem types.
const problemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is the body of a refused request, application/problem+json (RFC
// 9457). A denial has the type
// "https://iana.org/assignments/http-problem-types#quota-exceeded" and
// names the limits that denied it in ViolatedPolicies; any other refusal
// is "about:blank" with the title of its status.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail is the refusal's message, as every door says it.
	Detail string `json:"detail"`
	// ViolatedPolicies names the denying limits as the RateLimit fields
	// name them.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// statusOf is the HTTP status of each kind of refusal.
var statusOf = [...]int{
	engine.Denied:      http.StatusTooManyRequests,
	engine.Blocked:     http.StatusForbidden,
	engine.Invalid:     http.StatusBadRequest,
	engine.Unavailable: http.StatusServiceUnavailable,
	engine.Fault:       http.StatusInternalServerError,
	engine.Canceled:    statusClientClosed,
	engine.Shed:        http.StatusServiceUnavailable,
}

// statusClientClosed is the status of a request whose client went away
// (nginx's 499 Client Closed Request).
const statusClientClosed = 499

// refuse answers a request v refused: 429 Too Many Requests for a denial,
// with Retry-After, 403 for a blocked caller, 400 for a request the rules
// cannot decide, 503 when the store cannot decide and a rule fails closed
// or when overload control shed the request (with Retry-After),
// 500 for a rule's own failure, 499 (504 past its deadline) for a client
// gone; and a problem details body.
func refuse(w http.ResponseWriter, v *engine.Verdict) {
	err := v.Err()
	kind := v.Kind()
	code := http.StatusInternalServerError
	if int(kind) < len(statusOf) && statusOf[kind] != 0 {
		code = statusOf[kind]
	}
	if kind == engine.Canceled && errors.Is(err, context.DeadlineExceeded) {
		code = http.StatusGatewayTimeout
	}
	p := Problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: err.Error()}
	if code == statusClientClosed {
		p.Title = "Client Closed Request"
	}
	h := w.Header()
	if kind == engine.Denied {
		p.Type, p.Title = problemQuotaExceeded, "Request cannot be satisfied as assigned quota has been exceeded"
		for _, ld := range v.Limits() {
			if ld.Denied {
				p.ViolatedPolicies = append(p.ViolatedPolicies, ld.Policy)
			}
		}
		h.Set("Retry-After", strconv.FormatInt(fields.Seconds(v.RetryAfter()), 10))
	}
	if kind == engine.Shed {
		h.Set("Retry-After", strconv.FormatInt(fields.Seconds(v.RetryAfter()), 10))
	}
	body, _ := json.Marshal(p) // strings and ints only: never fails
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// setFields sets the RateLimit-Policy and RateLimit fields of limits on h,
// under their canonical keys with one slice.
func setFields(h http.Header, limits []engine.LimitDecision) {
	if len(limits) == 0 {
		return
	}
	policy, state := fields.Values(limits)
	vals := []string{policy, state}
	h[canonicalPolicy], h[canonicalState] = vals[0:1:1], vals[1:2:2]
}

// The fields' keys as http.Header keeps them.
var (
	canonicalPolicy = http.CanonicalHeaderKey(fields.Policy)
	canonicalState  = http.CanonicalHeaderKey(fields.State)
)
