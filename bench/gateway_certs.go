package bench

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
	"os"
	"path/filepath"
	"time"
)

// GatewayCerts are the files of the Kubernetes secret Envoy Gateway mounts
// in its rate limit deployment (/certs): tls.crt and tls.key, one
// certificate for localhost and 127.0.0.1 that serves and identifies a
// client alike, and ca.crt, the CA that signed it; made fresh for each
// Gateway and valid for a day.
type GatewayCerts struct {
	Dir  string
	Pair tls.Certificate
	Pool *x509.CertPool
}

// NewGatewayCerts makes the CA and the certificate and writes the files.
func NewGatewayCerts() (*GatewayCerts, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "envoy-gateway test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "envoy-rate-limit"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tollgate-gateway-certs-")
	if err != nil {
		return nil, err
	}
	c := &GatewayCerts{Dir: dir, Pool: x509.NewCertPool()}
	c.Pool.AddCert(ca)
	files := map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			c.Remove()
			return nil, err
		}
	}
	if c.Pair, err = tls.X509KeyPair(files["tls.crt"], files["tls.key"]); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// Remove deletes the files.
func (c *GatewayCerts) Remove() { _ = os.RemoveAll(c.Dir) }
