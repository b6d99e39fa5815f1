// Package keyfunc extracts the identity a rate limit applies to from a gRPC
// call: a metadata header, the method, the peer, or an identity an
// authentication interceptor put in the context.
package keyfunc

import (
	"context"
	"errors"
)

// Func returns the identity to limit for a call to fullMethod
// ("/pkg.Service/Method"). It returns an error wrapping ErrMissing when the
// call does not carry the value it reads.
type Func func(ctx context.Context, fullMethod string) (string, error)

// ErrMissing is wrapped by the error a Func returns when the value it reads
// is absent from the call.
var ErrMissing = errors.New("keyfunc: value missing")
