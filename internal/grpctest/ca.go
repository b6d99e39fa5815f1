package grpctest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// CA is a certificate authority for tests: it issues server and client
// certificates for 127.0.0.1.
type CA struct {
	t    testing.TB
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate in PEM.
	PEM []byte
}

// NewCA returns a new CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{t: t, Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue returns a certificate of serial for 127.0.0.1 (a server's, or a
// client's) and its key, in PEM.
func (p *CA) Issue(serial int64, client bool) (certPEM, keyPEM []byte) {
	p.t.Helper()
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	return p.issue(serial, nil, usage)
}

// IssueBoth returns a certificate of serial that serves and identifies a
// client alike, for 127.0.0.1 and the DNS names, as one Kubernetes secret
// serves both sides of a mutual-TLS link; and its key, in PEM.
func (p *CA) IssueBoth(serial int64, dnsNames ...string) (certPEM, keyPEM []byte) {
	p.t.Helper()
	return p.issue(serial, dnsNames, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

func (p *CA) issue(serial int64, dnsNames []string, usage ...x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	p.t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "tollgate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: dnsNames, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: usage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.Cert, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// ClientCert returns a client certificate of serial as tls.Config wants it.
func (p *CA) ClientCert(serial int64) []tls.Certificate {
	p.t.Helper()
	c, k := p.Issue(serial, true)
	kp, err := tls.X509KeyPair(c, k)
	if err != nil {
		p.t.Fatal(err)
	}
	return []tls.Certificate{kp}
}

// Pool returns a pool holding only the CA's certificate.
func (p *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.Cert)
	return pool
}
