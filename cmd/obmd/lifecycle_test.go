package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db/dbtest"
)

// TestBinaryProbes checks /healthz and /readyz (no auth), and that /readyz
// answers 503 once obmd's MariaDB or PostgreSQL database is gone while
// /healthz stays 200.
func TestBinaryProbes(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		state := t.TempDir()
		dsn := e.dsn(t, state)
		p := startObmd(t, dbEnv(dsn), loopbackArgs(state)...)
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := p.do("GET", path, "", "", ""); code != 200 {
				t.Errorf("GET %s: got %d %q, want 200", path, code, body)
			}
		}
		if e.name == "sqlite" {
			return
		}
		dropDatabase(t, dsn)
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body := p.do("GET", "/readyz", "", "", "")
			if code == 503 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /readyz with the database dropped: got %d %q, want 503", code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code, _ := p.do("GET", "/healthz", "", "", ""); code != 200 {
			t.Errorf("GET /healthz with the database dropped: got %d, want 200", code)
		}
		if code, took := p.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
			t.Errorf("SIGTERM with the database gone: got exit %d after %v, want 0", code, took)
		}
	})
}

// dropDatabase drops the database of a mysql:// or postgres:// DSN
// (dbtest's cleanup tolerates it); on PostgreSQL with the connections to it.
func dropDatabase(t *testing.T, dsn string) {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(u.Path, "/")
		server, err := sql.Open("pgx", os.Getenv(dbtest.PostgresEnv))
		if err != nil {
			t.Fatal(err)
		}
		defer server.Close()
		if _, err := server.Exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			t.Fatalf("drop %s: %v", name, err)
		}
		return
	}
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	name := cfg.DBName
	cfg.DBName = ""
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	server := sql.OpenDB(conn)
	defer server.Close()
	if _, err := server.Exec("DROP DATABASE " + name); err != nil {
		t.Fatalf("drop %s: %v", name, err)
	}
}

// TestBinaryTLS serves the admin API over HTTPS with a self-signed
// certificate and talks to it trusting only that certificate.
func TestBinaryTLS(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	certFile, keyFile, pool := selfSigned(t)
	p := startObmd(t, map[string]string{"OBMD_ADMIN_TLS_CERT": certFile, "OBMD_ADMIN_TLS_KEY": keyFile}, loopbackArgs(state)...)
	if !p.TLS {
		t.Fatalf("obmd_listening: got tls false, want true")
	}
	p.useTLS(&tls.Config{RootCAs: pool})
	admin := p.adminToken()
	if code, _ := p.do("GET", "/healthz", "", "", ""); code != 200 {
		t.Errorf("GET /healthz over TLS: got %d, want 200", code)
	}
	p.must(200, "PUT", "/node/n1", `{"type":"mock","info":{"addr":"10.0.0.4"}}`, admin)
	tok := rotate(p, "n1", admin)
	checkMockStatus(t, p, "n1", tok)

	// Plain HTTP gets no answer from the TLS port, and an untrusted client
	// refuses the certificate.
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + p.AdminAddr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("plain HTTP to the TLS port: got 200, want a failure")
		}
	}
	untrusted := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool()}}}
	if resp, err := untrusted.Get("https://" + p.AdminAddr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("client without the CA: got %d, want a certificate error", resp.StatusCode)
	}
	if code, _ := p.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Errorf("SIGTERM: got exit %d, want 0", code)
	}
	// The failed handshakes above are logged as JSON, like everything else.
	p.checkJSONLogs()
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and returns the
// files and a pool trusting it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "obmd test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestBinaryGracefulShutdown sends SIGTERM while an SSH console and an HTTP
// console stream are open: the SSH user is told why, the HTTP stream ends,
// and obmd exits 0 within its shutdown timeout.
func TestBinaryGracefulShutdown(t *testing.T) {
	t.Parallel()
	const shutdownTimeout = 5 * time.Second
	state := t.TempDir()
	p := startObmd(t, map[string]string{"OBMD_DAEMON_SHUTDOWN_TIMEOUT": shutdownTimeout.String()}, loopbackArgs(state)...)
	admin := p.adminToken()
	// Two mock nodes: a mock console has one reader at a time (as obmd's),
	// so the SSH console and the HTTP stream each get their own.
	p.must(200, "PUT", "/node/n1", `{"type":"mock","info":{"addr":"10.0.0.4"}}`, admin)
	p.must(200, "PUT", "/node/n2", `{"type":"mock","info":{"addr":"10.0.0.5"}}`, admin)
	tok := rotate(p, "n1", admin)
	tok2 := rotate(p, "n2", admin)

	// An SSH console, with a PTY as OpenSSH asks for one.
	c, err := gossh.Dial("tcp", p.SSHAddr, &gossh.ClientConfig{User: "n1", Auth: []gossh.AuthMethod{gossh.Password(tok)},
		HostKeyCallback: checkHostKey(t, p.HostKey), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("ssh: %v", err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sshOut := &notifyBuffer{}
	s.Stdout, s.Stderr = sshOut, sshOut
	if err := s.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		t.Fatalf("pty: %v", err)
	}
	if err := s.Shell(); err != nil {
		t.Fatalf("shell: %v", err)
	}
	sshDone := make(chan error, 1)
	go func() { sshDone <- s.Wait() }() // ends when obmd closes the session (or c.Close)
	if !sshOut.waitFor("\n2", 10*time.Second) {
		t.Fatalf("ssh console: got %q, want the mock counter", sshOut.String())
	}

	// An HTTP console stream.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.baseURL()+"/node/n2/console?token="+url.QueryEscape(tok2), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatalf("GET console: %v", err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("HTTP console: %v", err)
	}
	httpDone := make(chan error, 1)
	go func() { // ends when the stream ends (or cancel)
		_, err := io.Copy(io.Discard, br)
		httpDone <- err
	}()

	code, took := p.stop(syscall.SIGTERM, shutdownTimeout+10*time.Second)
	t.Logf("exit %d after %v", code, took)
	if code != 0 {
		t.Errorf("SIGTERM: got exit %d, want 0", code)
	}
	if took > shutdownTimeout {
		t.Errorf("SIGTERM: exit took %v, want within the shutdown timeout %v", took, shutdownTimeout)
	}
	select {
	case <-sshDone:
	case <-time.After(10 * time.Second):
		t.Errorf("ssh session still open after obmd exited")
	}
	if !strings.Contains(sshOut.String(), "obmd is shutting down") {
		t.Errorf("ssh console: got %q, want it to say %q", tail(sshOut.String(), 300), "obmd is shutting down")
	}
	select {
	case err := <-httpDone:
		t.Logf("HTTP console stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Errorf("HTTP console stream still open after obmd exited")
	}
	if line, ok := p.logLine("obmd_stopped"); !ok || line["sessions_late"] != float64(0) {
		t.Errorf("obmd_stopped: got %v, want every session ended in time", line)
	}
}

// notifyBuffer collects output and lets a test wait for a substring.
type notifyBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (n *notifyBuffer) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b.Write(p)
}

func (n *notifyBuffer) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b.String()
}

// waitFor polls until the output contains s or limit passes.
func (n *notifyBuffer) waitFor(s string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for !strings.Contains(n.String(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
