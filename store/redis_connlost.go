package store

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// connectionLost reports whether err says the connection a command was sent
// on closed before its reply arrived (end of stream, reset, broken pipe), as
// when a client is killed or a proxy restarts: the command may or may not
// have run. A timeout is not a lost connection: the server may be frozen,
// and asking again would only wait again.
func connectionLost(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) {
		return true
	}
	var ne net.Error
	return errors.Is(err, net.ErrClosed) && !(errors.As(err, &ne) && ne.Timeout())
}
