package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/engine"
)

// ProblemQuotaExceeded is the problem type of a denial, from the IETF
// httpapi draft's registrations of problem types.
const ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is the body of a refused request, application/problem+json (RFC
// 9457). A denial has Type ProblemQuotaExceeded and names the rules that
// denied it in ViolatedPolicies; any other refusal is "about:blank" with
// the title of its status.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail is the refusal's message, as a gRPC client reads it.
	Detail string `json:"detail"`
	// ViolatedPolicies names the denying policies as the RateLimit fields
	// name them.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// Status returns the HTTP status of a refusal with the gRPC code c:
// ResourceExhausted 429, InvalidArgument 400, PermissionDenied 403,
// Unavailable (FailClosed) 503, Canceled 499, DeadlineExceeded 504, and,
// for a status a key function returned, the rest of the mapping Connect
// uses (statuses); anything else 500.
func Status(c codes.Code) int {
	for _, m := range statuses {
		if m.code == c {
			return m.status
		}
	}
	return http.StatusInternalServerError
}

// statuses pairs gRPC codes and HTTP statuses of the same meaning: Status
// reads it one way, code (the error a Rule.Settle sees) the other, each
// taking the first row that matches.
var statuses = []struct {
	code   codes.Code
	status int
}{
	{codes.ResourceExhausted, http.StatusTooManyRequests},
	{codes.InvalidArgument, http.StatusBadRequest},
	{codes.FailedPrecondition, http.StatusBadRequest},
	{codes.OutOfRange, http.StatusBadRequest},
	{codes.Unauthenticated, http.StatusUnauthorized},
	{codes.PermissionDenied, http.StatusForbidden},
	{codes.NotFound, http.StatusNotFound},
	{codes.AlreadyExists, http.StatusConflict},
	{codes.Aborted, http.StatusConflict},
	{codes.Canceled, 499}, // client closed request
	{codes.Unimplemented, http.StatusNotImplemented},
	{codes.Unavailable, http.StatusServiceUnavailable},
	{codes.Unavailable, http.StatusBadGateway},
	{codes.DeadlineExceeded, http.StatusGatewayTimeout},
	{codes.Internal, http.StatusInternalServerError},
}

// refuse answers a request v refused with err.
func refuse(w http.ResponseWriter, v *engine.Verdict, err error) {
	st := status.Convert(err)
	code := Status(st.Code())
	p := Problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: st.Message()}
	if code == 499 {
		p.Title = "Client Closed Request"
	}
	h := w.Header()
	if st.Code() == codes.ResourceExhausted {
		p.Type, p.Title = ProblemQuotaExceeded, "Request cannot be satisfied as assigned quota has been exceeded"
		p.ViolatedPolicies = violated(v.Limits())
		h.Set("Retry-After", strconv.FormatInt(seconds(retryDelay(st)), 10))
	}
	body, _ := json.Marshal(p) // strings and ints only: never fails
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// retryDelay is the wait of a denial's RetryInfo: the longest of its
// denying limits', after which every one of them admits the request.
func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// violated names the denying limits as the RateLimit fields do.
func violated(limits []engine.LimitDecision) []string {
	var out []string
	for i, ld := range limits {
		if ld.Denied {
			out = append(out, policyName(limits, i))
		}
	}
	return out
}
