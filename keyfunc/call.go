package keyfunc

import (
	"encoding/base64"
	"fmt"
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
	// Peer is the address of the connection's remote end ("host:port", a
	// Unix socket's path), or "" when the door knows none.
	Peer string
}

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
	// get returns the values of a lower-case key, "-bin" ones decoded.
	get func(key string) []string
}

// HTTPHeader returns h as key functions read it: package httplimit and the
// connectlimit module present calls with it. h is not copied.
func HTTPHeader(h http.Header) Header { return Header{wire: h} }

// MetadataHeader returns the metadata get reads as key functions read it:
// get returns the values of a lower-case key, "-bin" values already
// decoded, as gRPC metadata holds them (grpc-go's metadata.MD, or
// metadata.ValueFromIncomingContext). The gRPC interceptors present calls
// with it.
func MetadataHeader(get func(key string) []string) Header { return Header{get: get} }

// Values returns the values of key (any case), "-bin" ones decoded, or an
// error wrapping ErrInvalid when a "-bin" value is not base64.
func (h Header) Values(key string) ([]string, error) {
	lower := strings.ToLower(key)
	return h.values(lower, textproto.CanonicalMIMEHeaderKey(lower))
}

// values returns the values of a key given lower-case and canonical, as
// Values does.
func (h Header) values(lower, canonical string) ([]string, error) {
	switch {
	case h.get != nil:
		return h.get(lower), nil
	case h.wire == nil:
		return nil, nil
	}
	vs := h.wire[canonical]
	if vs == nil && canonical != lower {
		vs = h.wire[lower] // a map built by hand, not by net/http
	}
	if len(vs) == 0 || !strings.HasSuffix(lower, "-bin") {
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

// decodeBin decodes a "-bin" value as grpc-go does: padded base64 when its
// length is a multiple of 4, unpadded otherwise.
func decodeBin(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}
