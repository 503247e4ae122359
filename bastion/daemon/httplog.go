package daemon

import (
	"log"
	"strings"

	"github.com/sirupsen/logrus"
)

// httpErrorLog returns a standard logger for http.Server.ErrorLog that
// writes net/http's own messages (failed TLS handshakes, handler panics)
// through l, so that they are JSON like every other line instead of going
// to the log package's plain text on stderr.
func httpErrorLog(l logrus.FieldLogger) *log.Logger {
	return log.New(errorLogWriter{l}, "", 0)
}

type errorLogWriter struct{ log logrus.FieldLogger }

func (w errorLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	e := w.log.WithField("error", msg)
	// Load balancers' TCP checks and scanners fail handshakes all day.
	if strings.Contains(msg, "TLS handshake error") {
		e.Debug("http_tls_handshake_failed")
	} else {
		e.Warn("http_server_error")
	}
	return len(p), nil
}
