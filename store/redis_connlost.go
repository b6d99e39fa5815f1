package store

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// connectionLost reports whether err says the connection a command was sent
// on closed before its reply arrived (end of stream, reset, broken pipe), as
// when a client is killed or a proxy restarts: the command may or may not
// have run. A timeout is not a lost connection (none of these errors): the
// server may be frozen, and asking again would only wait again.
func connectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, net.ErrClosed)
}

// readAttempts bounds how many times askAgain asks when connections keep
// closing under it.
const readAttempts = 3

// askAgain returns read's answer, asking again when the connection closed
// under it (connectionLost), up to readAttempts times in all, while ctx
// lasts. Only a read that writes nothing may be asked this way: a script
// call that writes is sent at most once (scriptCmd), since Redis may have
// run the lost copy.
func askAgain[T any](ctx context.Context, read func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := read()
		if err == nil || attempt == readAttempts || !connectionLost(err) || ctx.Err() != nil {
			return v, err
		}
	}
}
