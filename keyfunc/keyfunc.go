// Package keyfunc extracts the identity a rate limit applies to from a
// call, whichever door it came through (gRPC, Connect, net/http): a header
// or metadata key, the method or route, the peer, or an identity an
// authentication layer put in the context. Every door presents its calls
// the same way (Call), so a key function gives one tenant one identity on
// all of them. Functions combine: Join limits a pair (tenant and method,
// say) and FirstOf falls back from one source to the next.
//
// # Missing values
//
// Every Func of this package returns either a non-empty value of at most
// MaxValueLen bytes and a nil error, or "" and an error. It never returns ""
// with a nil error: an absent or empty identity is an error wrapping
// ErrMissing, so that no call slips past a limit under a shared empty
// identity, and the limiter decides explicitly what a call without one gets.
// A value that is present but unusable (longer than MaxValueLen) is an error
// wrapping ErrInvalid, which is the client's fault (gRPC InvalidArgument,
// HTTP 400) and, unlike ErrMissing, is never skipped by FirstOf. Any other error means
// the server is misconfigured. Checked applies the same policy to a Func
// written elsewhere.
//
// Values are opaque bytes: the store escapes or hashes them before they
// reach Redis, so no value can touch another identity's state.
//
// # Configuration errors
//
// A constructor given a bad argument (Metadata with a header gRPC cannot
// carry, an empty Constant, Join or FirstOf with no Func or a nil one)
// does not panic: it returns a Func that fails every call with an error
// saying what was wrong, and Validate reports that error without a call.
// engine.New and SetRules call Validate on every rule's Key, so the
// mistake is refused when the rules are built, naming the rule. A
// constructor written elsewhere does the same with Misconfigured.
package keyfunc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"
)

// Func returns the identity to limit for call, made under ctx. It returns
// an error wrapping ErrMissing when the call does not carry the value it
// reads.
type Func func(ctx context.Context, call Call) (string, error)

// ErrMissing is wrapped by the error a Func returns when the value it reads
// is absent from the call.
var ErrMissing = errors.New("keyfunc: value missing")

// ErrInvalid is wrapped by the error a Func returns when the value is
// present but cannot be used as an identity, for example because it is
// longer than MaxValueLen. It is the caller's fault, so a server answers it
// with gRPC's InvalidArgument or HTTP's 400.
var ErrInvalid = errors.New("keyfunc: invalid value")

// MaxValueLen is the longest value, in bytes, a Func of this package
// returns (4 KiB). It bounds what one client can make the limiter hash and
// store per call; real identities (tenant ids, API key ids, addresses) are
// far shorter. Join and FirstOf bound their combined result the same way.
const MaxValueLen = 4 << 10

// Misconfigured returns a Func that fails every call with err, and that
// Validate reports as misconfigured with err: what a constructor of a Func
// returns when its arguments are wrong, so that the mistake shows where the
// rule using it is built, never as a panic. err wraps neither ErrMissing nor
// ErrInvalid, so a call it fails is the server's fault.
//
// It is kept out of line: every Func it returns runs the same code, which
// is how Validate knows them without calling a Func written elsewhere.
//
//go:noinline
func Misconfigured(err error) Func {
	return func(context.Context, Call) (string, error) { return "", err }
}

// misconfiguredCode is the code every Func of Misconfigured runs.
var misconfiguredCode = reflect.ValueOf(Misconfigured(nil)).Pointer()

// Validate reports what is wrong with f before any call: f is nil, or it
// was built from bad arguments (Misconfigured; every constructor of this
// package uses it). It returns nil for any other Func, which it never
// calls.
func Validate(f Func) error {
	if f == nil {
		return errors.New("keyfunc: the Func is nil")
	}
	if reflect.ValueOf(f).Pointer() == misconfiguredCode {
		_, err := f(context.Background(), Call{})
		return err
	}
	return nil
}

// Checked returns a Func that enforces this package's policy on the results
// of f, a Func written elsewhere: ("", nil) becomes an error wrapping
// ErrMissing and a value longer than MaxValueLen an error wrapping
// ErrInvalid. Join and FirstOf apply it to every Func they are given, and a
// limiter can apply it to any Func it is configured with. A nil or
// misconfigured f gives a misconfigured Func (Validate).
func Checked(f Func) Func {
	if err := Validate(f); err != nil {
		return misconfigured("Checked", err)
	}
	return func(ctx context.Context, call Call) (string, error) {
		v, err := f(ctx, call)
		if err != nil {
			return "", err
		}
		return check(v, "value")
	}
}

// misconfigured is Misconfigured with an error naming the constructor: an
// error of Validate, or a message.
func misconfigured(constructor string, cause any) Func {
	if err, ok := cause.(error); ok {
		return Misconfigured(fmt.Errorf("keyfunc.%s: %w", constructor, err))
	}
	return Misconfigured(fmt.Errorf("keyfunc.%s: %s", constructor, cause))
}

// check enforces the policy on one value; what names it in error messages.
func check(v, what string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrMissing, what)
	}
	if len(v) > MaxValueLen {
		return "", fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalid, what, len(v), MaxValueLen)
	}
	return v, nil
}

// Metadata returns a Func that reads the header or metadata key header,
// in any case (an HTTP header and a gRPC metadata key name one thing).
// When the call carries the key several times, the first value counts and
// the others are ignored, so a client cannot choose between identities by
// repeating the header; an empty first value is missing. For a "-bin" key
// the value is the bytes the client sent, on every door (see Header); a
// value that is not base64 is invalid (ErrInvalid).
//
// A header that is not a valid gRPC metadata key (empty, or with characters
// other than 0-9 a-z - _ .) gives a misconfigured Func (Validate): a
// configuration error that shows when the rule is built, not per call.
func Metadata(header string) Func {
	key := strings.ToLower(header)
	if !validHeader(key) {
		return misconfigured("Metadata", fmt.Sprintf("%q is not a valid gRPC metadata key (0-9 a-z - _ .)", header))
	}
	canonical := textproto.CanonicalMIMEHeaderKey(key)
	what := "metadata " + strconv.Quote(key)
	return func(_ context.Context, call Call) (string, error) {
		vals, err := call.Header.values(key, canonical)
		if err != nil {
			return "", err
		}
		if len(vals) == 0 {
			return "", fmt.Errorf("%w: %s is absent", ErrMissing, what)
		}
		return check(vals[0], what)
	}
}

func validHeader(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Method returns a Func whose value is the call's Method: its full method
// name ("/pkg.Service/Method") or its HTTP route ("GET /items/{id}").
// Joined with a client identity it gives every method its own quota per
// client.
func Method() Func {
	return func(_ context.Context, call Call) (string, error) {
		return check(call.Method, "method")
	}
}

// Peer returns a Func whose value is the address of the connection's remote
// end (Call.Peer) without its port, so that one client host has one
// identity however many connections it opens. IPv4 addresses mapped into
// IPv6 ("::ffff:192.0.2.1") are unmapped to the IPv4 form, so one client is
// one identity whichever socket family it reached. An address without a
// port (a Unix socket path, an in-memory listener) is used whole.
//
// Behind a proxy or load balancer every call has the proxy's address: for
// gRPC, use interceptor.RealIP with go-grpc-middleware's realip
// interceptor instead.
func Peer() Func {
	return func(_ context.Context, call Call) (string, error) {
		var addr string
		if call.Peer != nil {
			addr = call.Peer.String()
		}
		if addr == "" {
			return "", fmt.Errorf("%w: the call has no peer", ErrMissing)
		}
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
		if ip, err := netip.ParseAddr(addr); err == nil {
			addr = ip.Unmap().String()
		}
		return check(addr, "peer address")
	}
}

// Constant returns a Func whose value is always s: every call shares one
// bucket, a global quota (for example on an expensive method). An s that
// is empty or longer than MaxValueLen gives a misconfigured Func (Validate).
func Constant(s string) Func {
	if len(s) == 0 || len(s) > MaxValueLen {
		return misconfigured("Constant", fmt.Sprintf("the value is %d bytes: want 1 to %d", len(s), MaxValueLen))
	}
	return func(context.Context, Call) (string, error) { return s, nil }
}

// identityKey is the context key under which WithIdentity stores an identity.
type identityKey struct{}

// WithIdentity returns a copy of ctx that carries id, the authenticated
// identity of the caller, for Identity to read.
//
// An authentication layer calls it once it has verified the caller's
// credentials, and passes the new context on; it must run before the
// limiter (grpc.ChainUnaryInterceptor(auth, limiter), or an HTTP middleware
// wrapping httplimit's). In a unary interceptor:
//
//	ctx = keyfunc.WithIdentity(ctx, claims.Subject)
//	return handler(ctx, req)
//
// In a stream interceptor, wrap the stream so that its Context returns the
// new context, for example with go-grpc-middleware's WrapServerStream:
//
//	w := middleware.WrapServerStream(ss)
//	w.WrappedContext = keyfunc.WithIdentity(ss.Context(), claims.Subject)
//	return handler(srv, w)
func WithIdentity(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// Identity returns a Func whose value is the identity stored by WithIdentity:
// the authenticated caller, which unlike a header the caller cannot choose
// freely. It is missing when no authentication interceptor stored one (or
// stored "").
func Identity() Func {
	return Context(identityKey{})
}

// Context returns a Func whose value is ctx.Value(key), for identities that
// an existing interceptor stores under its own key. The value must be a
// string or implement fmt.Stringer; it is missing when there is none (nil).
// A value of another type is a server configuration error, reported as an
// error that wraps neither ErrMissing nor ErrInvalid. A nil key gives a
// misconfigured Func (Validate).
func Context(key any) Func {
	if key == nil {
		return misconfigured("Context", "the key is nil")
	}
	what := fmt.Sprintf("context value %T", key)
	return func(ctx context.Context, _ Call) (string, error) {
		switch v := ctx.Value(key).(type) {
		case nil:
			return "", fmt.Errorf("%w: no %s", ErrMissing, what)
		case string:
			return check(v, what)
		case fmt.Stringer:
			return check(v.String(), what)
		default:
			return "", fmt.Errorf("keyfunc: %s holds a %T, want a string or a fmt.Stringer", what, v)
		}
	}
}

// Join returns a Func whose value combines the values of fs, in order, so
// that a limit applies to the combination (a tenant on one method, say). The
// encoding is unambiguous: each value is preceded by its length in decimal
// and a colon ("3:abc"), so ("a|b", "c") and ("a", "b|c") never give the
// same value, whatever bytes the values hold. If any of fs fails, Join fails
// with that error (wrapped, errors.Is works); its combined value is bounded
// by MaxValueLen like any other.
//
// Join of no Func, or of a nil or misconfigured one, is misconfigured
// (Validate).
func Join(fs ...Func) Func {
	fs, bad := checkedAll("Join", fs)
	if bad != nil {
		return bad
	}
	return func(ctx context.Context, call Call) (string, error) {
		var b strings.Builder
		for i, f := range fs {
			v, err := f(ctx, call)
			if err != nil {
				return "", fmt.Errorf("keyfunc: join part %d: %w", i, err)
			}
			appendPart(&b, v)
			if b.Len() > MaxValueLen {
				break // check reports it; stop before building more
			}
		}
		return check(b.String(), "joined value")
	}
}

// appendPart appends one part of a Join value: its length, a colon, itself.
func appendPart(b *strings.Builder, v string) {
	b.WriteString(strconv.Itoa(len(v)))
	b.WriteByte(':')
	b.WriteString(v)
}

// JoinValues returns the value Join gives when its Funcs return values, in
// order: what an operator passes to identify a caller of a rule keyed by
// Join (engine.Limiter's Peek and Reset) without encoding it by hand.
func JoinValues(values ...string) string {
	var b strings.Builder
	for _, v := range values {
		appendPart(&b, v)
	}
	return b.String()
}

// FirstOfValue returns the value FirstOf gives when its Func at position i
// supplied v, for the same use as JoinValues.
func FirstOfValue(i int, v string) string {
	return strconv.Itoa(i) + ":" + v
}

// FirstOf returns a Func whose value is that of the first of fs that
// succeeds, trying them in order and skipping only those whose value is
// missing (ErrMissing). Any other error is returned at once: a malformed
// header must not quietly fall back to another identity. When all are
// missing the error wraps ErrMissing and names every absent value.
//
// The value is prefixed with the position of the Func that supplied it and
// a colon ("0:acme", "1:192.0.2.1"), so that values from different sources
// never share a bucket: with FirstOf(Metadata("x-tenant"), Peer()) a client
// that sends "x-tenant: 192.0.2.1" does not spend that host's quota.
//
// FirstOf of no Func, or of a nil or misconfigured one, is misconfigured
// (Validate).
func FirstOf(fs ...Func) Func {
	fs, bad := checkedAll("FirstOf", fs)
	if bad != nil {
		return bad
	}
	return func(ctx context.Context, call Call) (string, error) {
		var missing []error
		for i, f := range fs {
			v, err := f(ctx, call)
			if err == nil {
				return check(FirstOfValue(i, v), "value")
			}
			if !errors.Is(err, ErrMissing) {
				return "", err
			}
			missing = append(missing, err)
		}
		return "", fmt.Errorf("keyfunc: none of %d values present: %w", len(fs), errors.Join(missing...))
	}
}

// checkedAll returns fs, each Checked, for the constructor name; or, when
// fs is empty or one of them is nil or misconfigured, the misconfigured
// Func name returns instead.
func checkedAll(name string, fs []Func) ([]Func, Func) {
	if len(fs) == 0 {
		return nil, misconfigured(name, "no Func given")
	}
	out := make([]Func, len(fs))
	for i, f := range fs {
		if err := Validate(f); err != nil {
			return nil, misconfigured(name, fmt.Errorf("Func %d: %w", i, err))
		}
		out[i] = Checked(f)
	}
	return out, nil
}
