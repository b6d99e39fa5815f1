package store

import (
	"fmt"

	"github.com/tollgate/tollgate"
)

// normalizeAll checks a set for AllowAll and returns a normalized copy.
// Every error wraps tollgate.ErrInvalidRequest.
func normalizeAll(reqs []tollgate.Request) ([]tollgate.Request, error) {
	switch {
	case len(reqs) == 0:
		return nil, fmt.Errorf("%w: AllowAll needs at least one request", tollgate.ErrInvalidRequest)
	case len(reqs) > tollgate.MaxAllowAll:
		return nil, fmt.Errorf("%w: AllowAll takes at most %d requests, got %d", tollgate.ErrInvalidRequest, tollgate.MaxAllowAll, len(reqs))
	}
	out := make([]tollgate.Request, len(reqs))
	for i, req := range reqs {
		if req.RequestID != reqs[0].RequestID {
			return nil, fmt.Errorf("%w: AllowAll request %d has request id %q, request 0 has %q: a set carries one id", tollgate.ErrInvalidRequest, i, req.RequestID, reqs[0].RequestID)
		}
		n, err := req.Normalized()
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}
