package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func discardLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// TestNewLogger checks levels and formats; "auto" is JSON when the output
// is not a terminal.
func TestNewLogger(t *testing.T) {
	tests := []struct {
		name     string
		opts     logOptions
		wantJSON bool
		wantErr  string
	}{
		{name: "auto off a terminal", opts: logOptions{level: "info", format: "auto"}, wantJSON: true},
		{name: "json", opts: logOptions{level: "debug", format: "json"}, wantJSON: true},
		{name: "text", opts: logOptions{level: "warn", format: "text"}},
		{name: "bad level", opts: logOptions{level: "loud", format: "auto"}, wantErr: "loud"},
		{name: "bad format", opts: logOptions{level: "info", format: "xml"}, wantErr: "xml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := newLogger(tt.opts, &buf)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			log.Error("hello")
			var m map[string]any
			isJSON := json.Unmarshal(buf.Bytes(), &m) == nil && m["msg"] == "hello"
			if isJSON != tt.wantJSON {
				t.Errorf("got JSON %v (%q), want %v", isJSON, buf.String(), tt.wantJSON)
			}
		})
	}
}

// TestRunUsage checks the exit codes of the command dispatch.
func TestRunUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"help"}, 0, "usage"},
		{[]string{"serve", "--no-such-flag"}, 2, "no-such-flag"},
		{[]string{"serve", "--log-level", "loud"}, 2, "loud"},
		{[]string{"migrate", "-h"}, 0, "-state-dir"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			if got := run(tt.args, &stderr); got != tt.code {
				t.Errorf("exit: got %d, want %d (stderr %q)", got, tt.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr: got %q, want it to mention %q", stderr.String(), tt.want)
			}
		})
	}
}

func TestSplitAddr(t *testing.T) {
	for _, tt := range []struct{ in, host, port string }{
		{"127.0.0.1:2222", "127.0.0.1", "2222"},
		{"[::1]:2222", "::1", "2222"},
		{"localhost:22", "localhost", "22"},
	} {
		if h, p := splitAddr(tt.in); h != tt.host || p != tt.port {
			t.Errorf("splitAddr(%q): got %q %q, want %q %q", tt.in, h, p, tt.host, tt.port)
		}
	}
}
