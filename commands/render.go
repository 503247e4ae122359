package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol/screen"
)

// maxErrorText bounds an error message as printed.
const maxErrorText = 1024

// Run runs cmd like Do and renders the outcome for an exec session: on
// success the text (or, with --json, one JSON object) on stdout; on failure
// as WriteError does. It returns the exit code.
func (r *Runner) Run(ctx context.Context, req Request, cmd Command, stdout, stderr io.Writer) int {
	if cmd.Name == CmdConsoleLog && cmd.Follow && r.cfg.History != nil && req.Epoch > 0 {
		return r.followLog(ctx, req, cmd, stdout, stderr)
	}
	res, err := r.Do(ctx, req, cmd)
	if err != nil {
		return writeFailure(stdout, stderr, res, cmd, err)
	}
	if err := Render(stdout, res, cmd.JSON); err != nil {
		// The command was done; only its report was lost (client gone).
		r.log.WithError(err).WithFields(logrus.Fields{"node": req.Node, "session": req.Session}).
			Debug("write command output")
	}
	return ExitOK
}

// Render writes res to w: res.Text as is (console-log's bytes untouched;
// other texts end with a newline), or with asJSON one JSON object and a
// newline.
func Render(w io.Writer, res Result, asJSON bool) error {
	if asJSON {
		b, err := res.MarshalJSON()
		if err != nil {
			return fmt.Errorf("render %s: %w", res.Command, err)
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	text := res.Text
	if res.Command != CmdConsoleLog && res.Command != CmdScreen && text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	_, err := io.WriteString(w, text)
	return err
}

// WriteError reports err, from Split, Parse or Do, for cmd on node and
// returns its exit code (ExitCode). stderr always gets "obmd: " and the
// error's Message on one line (control characters escaped), then, for a usage error,
// the usage of the command (or the whole usage when the command is unknown).
// With cmd.JSON, stdout also gets one JSON object
// {"node","command","ok":false,"error"}.
func WriteError(stdout, stderr io.Writer, node string, cmd Command, err error) int {
	return writeFailure(stdout, stderr, Result{Node: node, Command: cmd.Name}, cmd, err)
}

// writeFailure is WriteError for a command whose failed run still has
// something to show (a doctor run's steps, res.Text): that goes to stdout
// first, in text or, with the error, in the JSON object.
func writeFailure(stdout, stderr io.Writer, res Result, cmd Command, err error) int {
	if err == nil {
		return ExitOK
	}
	msg := clean(Message(err), maxErrorText)
	// Write errors are ignored: the exit code is what still reaches the
	// client.
	if cmd.JSON {
		res.Error = msg
		_ = Render(stdout, res, true)
	} else if res.Text != "" {
		_ = Render(stdout, res, false)
	}
	var b strings.Builder
	b.WriteString("obmd: " + msg + "\n")
	var ue *UsageError
	if errors.As(err, &ue) {
		b.WriteString(CommandUsage(ue.Command))
	}
	_, _ = io.WriteString(stderr, b.String())
	return ExitCode(err)
}

// MarshalJSON renders a Result as its documented JSON object (see the
// package documentation): node, command and ok always; error on failure;
// otherwise the fields of the command. Non-printable characters that
// encoding/json would leave raw (DEL, C1 controls, bidi overrides) are
// escaped too.
func (r Result) MarshalJSON() ([]byte, error) {
	type wire struct {
		Node       string           `json:"node"`
		Command    string           `json:"command"`
		OK         bool             `json:"ok"`
		Error      string           `json:"error,omitempty"`
		Power      *string          `json:"power,omitempty"`
		Bootdev    *string          `json:"bootdev,omitempty"`
		Persistent *bool            `json:"persistent,omitempty"`
		Log        *string          `json:"log,omitempty"`
		Sessions   *[]SessionInfo   `json:"sessions,omitempty"`
		Version    *string          `json:"version,omitempty"`
		Help       *string          `json:"help,omitempty"`
		Match      *string          `json:"match,omitempty"`
		Line       *string          `json:"line,omitempty"`
		Offset     *int64           `json:"offset,omitempty"`
		Time       *string          `json:"time,omitempty"`
		Bytes      *int             `json:"bytes,omitempty"`
		Steps      *int             `json:"steps,omitempty"`
		Checks     []checkJSON      `json:"checks,omitempty"`
		Screen     *screen.Snapshot `json:"screen,omitempty"`
	}
	w := wire{Node: r.Node, Command: string(r.Command), OK: r.Error == "", Error: r.Error}
	if r.Command == CmdDoctor {
		w.Checks = tenantChecks(r.Checks)
	}
	if w.OK {
		switch r.Command {
		case CmdPowerStatus:
			w.Power = &r.Power
		case CmdBootdev:
			w.Bootdev, w.Persistent = &r.Bootdev, &r.Persist
		case CmdConsoleLog:
			w.Log = &r.Text
		case CmdSessions:
			if r.Sessions == nil {
				r.Sessions = []SessionInfo{}
			}
			w.Sessions = &r.Sessions
		case CmdVersion:
			w.Version = &r.Version
		case CmdHelp:
			w.Help = &r.Text
		case CmdSend:
			w.Bytes = &r.Bytes
		case CmdExpect:
			w.Steps = &r.Steps
		case CmdScreen:
			w.Screen = r.Screen
		default:
			if r.Power != "" {
				w.Power = &r.Power
			}
		}
		if mt := r.Match; mt != nil {
			at := mt.At.UTC().Format(time.RFC3339Nano)
			w.Match, w.Line, w.Offset, w.Time = &mt.Text, &mt.Line, &mt.Offset, &at
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, err
	}
	return escapeJSON(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}
