package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/obmd/obmd/sol/history"
)

// History is a node's console history (the daemon's, over sol/history's
// Recorder): console-log reads it, power and boot-device operations are
// marked in it.
type History interface {
	Read(ctx context.Context, q history.Query) ([]history.Chunk, error)
	Follow(ctx context.Context, q history.Query) (*history.Tail, error)
	Mark(label string, epoch int64, m history.Marker)
}

// historyLog is console-log from the history of the requester's tenancy:
// raw bytes by default, text with --timestamps, asciicast v2 with --cast.
func (r *Runner) historyLog(ctx context.Context, req Request, cmd Command) (string, error) {
	var buf bytes.Buffer
	enc, err := r.encoder(&buf, cmd)
	if err != nil {
		return "", err
	}
	chunks, err := r.cfg.History.Read(ctx, r.historyQuery(req, cmd))
	if err != nil {
		return "", historyError(err)
	}
	for _, c := range chunks {
		if err := enc.Encode(c); err != nil {
			return "", err
		}
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// followLog is console-log --follow: the history, then the live output as
// it is recorded, to w until ctx ends (the session ends), the tenancy ends
// (an access change), or w fails. It returns the exit code.
func (r *Runner) followLog(ctx context.Context, req Request, cmd Command, w, stderr io.Writer) int {
	enc, err := r.encoder(w, cmd)
	if err != nil {
		return WriteError(w, stderr, req.Node, cmd, err)
	}
	tail, err := r.cfg.History.Follow(ctx, r.historyQuery(req, cmd))
	if err != nil {
		return WriteError(w, stderr, req.Node, cmd, historyError(err))
	}
	defer tail.Close()
	for {
		c, err := tail.Next(ctx)
		if err != nil {
			_ = enc.Close()
			if ctx.Err() != nil {
				return ExitOK
			}
			return WriteError(w, stderr, req.Node, cmd, historyError(err))
		}
		if err := enc.Encode(c); err != nil {
			return ExitOK // the client left
		}
	}
}

func (r *Runner) encoder(w io.Writer, cmd Command) (history.Encoder, error) {
	f := history.FormatRaw
	switch {
	case cmd.Cast:
		f = history.FormatCast
	case cmd.Timestamps:
		f = history.FormatText
	}
	return history.NewEncoder(w, f, history.Options{Timestamps: cmd.Timestamps})
}

// historyQuery is the tenant's query of cmd: the tenancy its session was
// admitted at.
func (r *Runner) historyQuery(req Request, cmd Command) history.Query {
	q := history.Query{Node: req.Node, Epoch: req.Epoch, Lines: cmd.Lines, Since: cmd.SinceAt}
	if cmd.SinceAgo > 0 {
		q.Since = r.cfg.Now().Add(-cmd.SinceAgo)
	}
	return q
}

// historyError says what went wrong in words safe to show: a tenancy
// ended is a cut; a store error is logged by the caller's audit, not shown.
func historyError(err error) error {
	if errors.Is(err, history.ErrEnded) {
		return err
	}
	return fmt.Errorf("read the console history: %w", err)
}

// markHistory records a power or boot-device operation that succeeded in
// the history of the requester's tenancy.
func (r *Runner) markHistory(req Request, cmd Command) {
	if r.cfg.History == nil || req.Epoch <= 0 {
		return
	}
	actor := historyActor(req)
	switch cmd.Name {
	case CmdPowerStatus:
	case CmdBootdev:
		r.cfg.History.Mark(req.Node, req.Epoch, history.BootDevice(cmd.Device, cmd.Persistent, actor))
	default:
		op := string(cmd.Name)
		if cmd.Soft {
			op += " --soft"
		}
		if cmd.Force {
			op += " --force"
		}
		r.cfg.History.Mark(req.Node, req.Epoch, history.Power(op, actor))
	}
}

// historyActor names who ran a command, as markers do: by the
// credential, as Request.User names it (a certificate by its CA, key id
// and serial, as the audit does).
func historyActor(req Request) string {
	if strings.HasPrefix(req.Actor, "http") {
		return history.ActorHTTP
	}
	if fp, ok := strings.CutPrefix(req.User, "key "); ok {
		return history.ActorSSHKey(fp)
	}
	if who, ok := strings.CutPrefix(req.User, "cert "); ok {
		return history.ActorSSHCert(who)
	}
	return history.ActorSSHToken
}

// parseSince reads console-log --since: a duration back from now (10m,
// 2h30m) or an RFC 3339 time.
func parseSince(val string) (ago time.Duration, at time.Time, err error) {
	if d, err := time.ParseDuration(val); err == nil && d > 0 {
		return d, time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, val); err == nil {
		return 0, t, nil
	}
	return 0, time.Time{}, usagef(CmdConsoleLog, "--since wants a duration (10m) or an RFC 3339 time, not %s", quote(val))
}
