package keyfunc

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"strings"
)

// Call is one call as key functions read it, whichever door it came
// through: the gRPC interceptors, package httplimit or the connectlimit
// module present the same call the same way.
type Call struct {
	// Method is what rules' Methods match: a gRPC full method or Connect
	// procedure ("/pkg.Service/Method"), or an HTTP route, its method and
	// ServeMux pattern ("GET /items/{id}").
	Method string
	// Header is the call's metadata (gRPC) or headers (HTTP, Connect).
	Header Header
	// Peer is the address of the connection's remote end: its String is
	// "host:port" or a Unix socket's path. It is nil when the door knows
	// none. It is formatted only when read (a key function calling
	// String), so that a call whose rules do not read it does not pay for
	// it.
	Peer net.Addr
}

// Addr is an address the door knows as text (an http.Request's
// RemoteAddr, "host:port") as a Call's Peer. Its network is unknown: ""
// (an empty Addr is no address: Peer treats it as missing).
type Addr string

// Network returns "": the network of an address known as text is unknown.
func (Addr) Network() string { return "" }

// String returns the address.
func (a Addr) String() string { return string(a) }

// Header is a call's headers or metadata as key functions read them: keys
// are matched without regard to case (an HTTP header and a gRPC metadata
// key name one thing: "x-tenant" reads X-Tenant), and the value of a
// "-bin" key is the bytes the client sent, whichever door carried it. gRPC
// sends those bytes base64-encoded and grpc-go decodes them; HTTP and
// Connect deliver the base64 text, which Header decodes the same way (with
// or without padding). The zero Header has no keys.
type Header struct {
	// wire is an http.Header: keys canonical, "-bin" values in base64.
	wire http.Header
	// get returns the values of a lower-case key under ctx, "-bin" ones
	// decoded.
	ctx context.Context
	get func(ctx context.Context, key string) []string
}

// HTTPHeader returns h as key functions read it: package httplimit and the
// connectlimit module present calls with it. h is not copied; its keys are
// canonical, as net/http keeps them (http.CanonicalHeaderKey).
func HTTPHeader(h http.Header) Header { return Header{wire: h} }

// MetadataHeader returns the metadata get reads under ctx as key functions
// read it: get returns the values of a lower-case key, "-bin" values
// already decoded, as gRPC metadata holds them. The gRPC interceptors
// present a call with MetadataHeader(ctx, metadata.ValueFromIncomingContext),
// which reads the metadata where grpc-go keeps it, without a copy; a map
// of metadata is read with func(_ context.Context, k string) []string {
// return md[k] }.
func MetadataHeader(ctx context.Context, get func(ctx context.Context, key string) []string) Header {
	return Header{ctx: ctx, get: get}
}

// Values returns the values of key (any case), "-bin" ones decoded, or an
// error wrapping ErrInvalid when a "-bin" value is not base64.
func (h Header) Values(key string) ([]string, error) {
	if h.get != nil {
		return h.values(strings.ToLower(key), "")
	}
	// The canonical form, built on the stack: a lookup allocates nothing.
	var buf [64]byte
	if len(key) > len(buf) {
		return h.values(strings.ToLower(key), textproto.CanonicalMIMEHeaderKey(key))
	}
	b := buf[:len(key)]
	upper := true
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b[i], upper = c, c == '-'
	}
	return h.values(key, string(b))
}

// Values returns a function that gives a Header's values of the key name
// (any case) as Header.Values does, with name's case folded once here
// rather than on every call: for a key read on every call, such as a
// request id header.
func Values(name string) func(Header) ([]string, error) {
	lower := strings.ToLower(name)
	canonical := textproto.CanonicalMIMEHeaderKey(lower)
	return func(h Header) ([]string, error) { return h.values(lower, canonical) }
}

// values returns the values of a key given lower-case and canonical, as
// Values does.
func (h Header) values(lower, canonical string) ([]string, error) {
	switch {
	case h.get != nil:
		return h.get(h.ctx, lower), nil
	case h.wire == nil:
		return nil, nil
	}
	vs := h.wire[canonical]
	if len(vs) == 0 || !hasBinSuffix(lower) {
		return vs, nil
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		b, err := decodeBin(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %q is not base64, as a \"-bin\" value must be: %v", ErrInvalid, lower, err)
		}
		out[i] = string(b)
	}
	return out, nil
}

// hasBinSuffix reports whether key ends in "-bin", in any case.
func hasBinSuffix(key string) bool {
	return len(key) >= 4 && strings.EqualFold(key[len(key)-4:], "-bin")
}

// decodeBin decodes a "-bin" value as grpc-go does: padded base64 when its
// length is a multiple of 4, unpadded otherwise.
func decodeBin(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}
