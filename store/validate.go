package store

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
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
		n, err := check.Normalize(req)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		out[i] = n
	}
	if err := checkOverdraw(out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkOverdraw is normalizeAll's check of Overdraw: every request of a set or none has it.
func checkOverdraw(reqs []tollgate.Request) error {
	for i, req := range reqs {
		if req.Overdraw != reqs[0].Overdraw {
			return fmt.Errorf("%w: AllowAll request %d has Overdraw %t, request 0 %t: a set is overdrawn whole or not at all", tollgate.ErrInvalidRequest, i, req.Overdraw, reqs[0].Overdraw)
		}
	}
	return nil
}

// normalizeSettle checks a set for SettleAll (a set of one for Settle) and
// returns a normalized copy. Every error wraps tollgate.ErrInvalidRequest.
func normalizeSettle(reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64) ([]tollgate.Request, error) {
	return check.SettleSet(reqs, admitted, costs)
}

// checkKey validates a key a store call names without a Request: ctx's
// error, or one wrapping tollgate.ErrInvalidRequest for a key longer than
// tollgate.MaxKeyLen, as the Redis store refuses it.
func checkKey(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(key) > tollgate.MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, more than %d", tollgate.ErrInvalidRequest, len(key), tollgate.MaxKeyLen)
	}
	return nil
}
