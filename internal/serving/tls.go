package serving

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate/internal/telemetry"
)

// TLSFiles names a listener's certificate and key and, for mutual TLS, the
// certificate authority that must have signed every client's certificate.
// The zero value means plaintext.
type TLSFiles struct {
	Cert, Key string
	ClientCA  string
	// ClientSAN, when set with ClientCA, must be one of the client
	// certificate's subject alternative names (DNS, URI, IP or email).
	ClientSAN string
}

// Enabled reports whether f names a certificate.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Mode says how a listener with f serves: "plaintext", "TLS" or "mutual
// TLS", for its "listening on" line.
func (f TLSFiles) Mode() string {
	switch {
	case !f.Enabled():
		return "plaintext"
	case f.ClientCA != "":
		return "mutual TLS"
	}
	return "TLS"
}

// ReloadReporter returns what Config calls after each reload of rotated
// files: it logs the outcome on logger and counts it in telemetry.MetricTLSReloads
// of mp (nil: otel's global provider) for the named listener.
func ReloadReporter(logger *log.Logger, mp metric.MeterProvider, listener string) func(error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	counter, _ := mp.Meter("github.com/tollgate/tollgate/serving").Int64Counter(telemetry.MetricTLSReloads,
		metric.WithDescription("Reloads of a listener's rotated TLS files, by result (error: refused, the last good files still serve)"))
	return func(err error) {
		result := "ok"
		if err != nil {
			result = "error"
			logger.Printf("%s listener: the rotated TLS files are refused; the previous ones still serve: %v", listener, err)
		} else {
			logger.Printf("%s listener: serving the rotated TLS files", listener)
		}
		if counter != nil {
			counter.Add(context.Background(), 1, metric.WithAttributes(telemetry.AttrListener.String(listener), telemetry.AttrResult.String(result)))
		}
	}
}

// Config returns the server TLS configuration of f. The files are read now
// (an error names the bad one) and again whenever one of them changes on
// disk, as a rotated Kubernetes secret does, at the next handshake: a
// rotated certificate is served without a restart, and a bad rotation
// keeps the last good files serving. With ClientCA, a client without a
// certificate that CA signed is refused during the handshake. reloaded,
// when not nil, is told the outcome of every reload after the first read
// (ReloadReporter).
func (f TLSFiles) Config(reloaded func(error)) (*tls.Config, error) {
	switch {
	case f.Cert == "" || f.Key == "":
		return nil, errors.New("TLS needs both a certificate and a key")
	}
	r := &tlsFiles{files: f, reloaded: reloaded}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := r.current()
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
			if pool != nil {
				c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
				if san := f.ClientSAN; san != "" {
					c.VerifyConnection = func(cs tls.ConnectionState) error { return checkSAN(cs, san) }
				}
			}
			return c, nil
		},
	}, nil
}

// checkSAN refuses a client whose certificate does not name san.
func checkSAN(cs tls.ConnectionState, san string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("TLS: no client certificate")
	}
	cert := cs.PeerCertificates[0]
	names := slices.Concat(cert.DNSNames, cert.EmailAddresses)
	for _, u := range cert.URIs {
		names = append(names, u.String())
	}
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	if !slices.Contains(names, san) {
		return fmt.Errorf("TLS: the client certificate does not name %q", san)
	}
	return nil
}

// tlsFiles holds the last good contents of a TLSFiles and when its files
// were read.
type tlsFiles struct {
	files    TLSFiles
	reloaded func(error) // nil: nobody is told

	mu      sync.Mutex
	cert    tls.Certificate
	pool    *x509.CertPool
	stamps  []fileStamp
	checked time.Time
}

// fileStamp is what says a file changed: its modification time and size.
type fileStamp struct {
	mod  time.Time
	size int64
}

// recheck bounds how often the files are looked at: once a second at most,
// whatever the rate of handshakes.
const recheck = time.Second

// current returns the certificate and client CA pool to serve with,
// reading the files again when they changed since they were read.
func (r *tlsFiles) current() (tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) >= recheck {
		r.checked = time.Now()
		if stamps := r.stampsNow(); !equalStamps(stamps, r.stamps) {
			// A bad rotation (a half-written file, a key that does not
			// match) keeps the last good files serving, and is told.
			err := r.loadLocked()
			if err != nil {
				r.stamps = stamps // told once per change, not per handshake
			}
			if r.reloaded != nil {
				r.reloaded(err)
			}
		}
	}
	return r.cert, r.pool
}

func (r *tlsFiles) load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = time.Now()
	return r.loadLocked()
}

func (r *tlsFiles) loadLocked() error {
	stamps := r.stampsNow()
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", r.files.Cert, r.files.Key, err)
	}
	var pool *x509.CertPool
	if r.files.ClientCA != "" {
		pem, err := os.ReadFile(r.files.ClientCA)
		if err != nil {
			return fmt.Errorf("TLS client CA: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("TLS client CA %s: no PEM certificate in it", r.files.ClientCA)
		}
	}
	r.cert, r.pool, r.stamps = cert, pool, stamps
	return nil
}

func (r *tlsFiles) stampsNow() []fileStamp {
	var out []fileStamp
	for _, name := range []string{r.files.Cert, r.files.Key, r.files.ClientCA} {
		if name == "" {
			continue
		}
		var s fileStamp
		if info, err := os.Stat(name); err == nil {
			s = fileStamp{info.ModTime(), info.Size()}
		}
		out = append(out, s)
	}
	return out
}

func equalStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}
