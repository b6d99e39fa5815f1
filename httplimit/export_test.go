package httplimit

import "net/http"

// Route returns the route the middleware wrapping next names r by, and
// whether next answers r itself with a redirect.
func Route(r *http.Request, next http.Handler) (string, bool) {
	m := &middleware{next: next}
	m.mux, _ = next.(*http.ServeMux)
	return m.route(r)
}

// ProblemQuotaExceeded is the problem type of a denial.
const ProblemQuotaExceeded = problemQuotaExceeded
