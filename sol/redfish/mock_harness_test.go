package redfish_test

import (
	"bytes"
	"crypto/tls"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol/redfish"
	"github.com/obmd/obmd/sol/redfish/redfishtest"
)

// The mock's data (redfishtest's), under the names these tests use.
const (
	systemID   = redfishtest.SystemID
	systemPath = redfishtest.SystemPath
	mockUser   = redfishtest.User
	mockPass   = redfishtest.Pass
	sessions   = redfishtest.SessionsPath
)

// testBMC is one mock BMC behind its TLS front, and the log of the
// drivers made for it.
type testBMC struct {
	*redfishtest.BMC
	logs *logBuffer
}

// startBMC starts a mock BMC behind TLS (redfishtest.Start).
func startBMC(t *testing.T, cert *tls.Certificate) *testBMC {
	t.Helper()
	b := &testBMC{BMC: redfishtest.Start(t, cert), logs: &logBuffer{}}
	t.Cleanup(func() { b.logs.checkClean(t) })
	return b
}

// info is the node's registration for this BMC.
func (b *testBMC) info() redfish.Info {
	return redfish.Info{Addr: b.URL, User: mockUser, Pass: mockPass}
}

// config is a driver config that trusts the front and polls briskly.
func (b *testBMC) config() redfish.Config {
	return redfish.Config{RootCAs: b.Pool, PollInterval: 10 * time.Millisecond, StateTimeout: 10 * time.Second}
}

// driver returns a driver for this BMC; edit, if set, changes its info.
func (b *testBMC) driver(t *testing.T, edit func(*redfish.Info, *redfish.Config)) *redfish.BMC {
	t.Helper()
	info, cfg := b.info(), b.config()
	if edit != nil {
		edit(&info, &cfg)
	}
	d, err := redfish.New("node-1", info, cfg, b.logger(info.Pass))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func (b *testBMC) logger(pass string) logrus.FieldLogger {
	b.logs.addSecret(pass)
	l := logrus.New()
	l.SetOutput(b.logs)
	l.SetLevel(logrus.DebugLevel)
	return l
}

// noSessionLeft checks that every session the driver opened was logged out.
func (b *testBMC) noSessionLeft(t *testing.T) {
	t.Helper()
	if live, created, _ := b.Counts(); live != 0 {
		t.Errorf("sessions left open on the BMC: got %d of %d, want 0", live, created)
	}
}

// logBuffer collects the driver's log and checks that no secret is in it.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	secrets []string
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) addSecret(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.secrets = append(l.secrets, s)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) checkClean(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.secrets {
		if s != "" && strings.Contains(l.buf.String(), s) {
			t.Errorf("the driver's log contains the BMC password")
		}
	}
}

// safeText checks that an error shown to a tenant names neither the BMC's
// address nor its password.
func safeText(t *testing.T, err error, b *testBMC, pass string) {
	t.Helper()
	msg := err.Error()
	u, _ := url.Parse(b.URL)
	for _, leak := range []string{u.Host, u.Hostname(), u.Port(), b.MockURL, pass} {
		if leak != "" && strings.Contains(msg, leak) {
			t.Errorf("error %q contains %q", msg, leak)
		}
	}
}
