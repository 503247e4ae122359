package sshdoor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/sol"
)

// escapeTexts are the console's messages that name the escape prefix
// (Config.Escape), built once by New.
type escapeTexts struct {
	help      string // the answer to escape ?: one escape a line, as conserver lists them
	watchHelp string // the same in a read-only session (console --read-only)
	hint      string // end of the banner: how to get help
	toWrite   string // a read-only viewer's role in the banner
	readOnly  string // keys typed while read-only
	unknown   string // an unknown escape command
}

// Without a PTY there are no escapes; the banner says so.
const (
	noEscapesHint   = "no escapes without a terminal (ssh -t)"
	noEscapesToRead = "you are read-only"
	noEscapesKeys   = "read-only: your keys are not sent"
)

// A read-only session (console --read-only) never writes: no escape makes
// it the writer, and its keys and breaks never reach the node.
const (
	watchRole = "this session is read-only"
	watchKeys = "this session is read-only: your keys are not sent"
)

func newEscapeTexts(prefix string) escapeTexts {
	p := escapeName(prefix)
	return escapeTexts{
		help:      escapeHelp(prefix, false),
		watchHelp: escapeHelp(prefix, true),
		hint:      p + " ? for help",
		toWrite:   "you are read-only (" + p + " f to write)",
		readOnly:  "read-only: your keys are not sent; " + p + " f takes over writing",
		unknown:   "unknown escape; " + p + " ? for help",
	}
}

// escapeHelp lists the escapes one a line, as conserver does, with the
// terminal's line ends (escapes exist only with a PTY); watch: those of a
// read-only session.
func escapeHelp(prefix string, watch bool) string {
	p := escapeName(prefix)
	var b strings.Builder
	b.WriteString("\r\n[obmd escapes: " + p + ", then]\r\n")
	for _, e := range []struct {
		key, what string
		writes    bool // not in a read-only session
	}{
		{string(EscDetach), "detach", false},
		{string(EscTakeOver), "take over writing", true},
		{string(EscReadOnly), "become read-only", true},
		{string(EscBreak), "send a serial break", true},
		{string(EscRedraw), "redraw the screen", false},
		{string(EscPlayback), "play back the scrollback", false},
		{escapeName(prefix[:1]), "send " + p + " itself", true},
		{string(EscHelp), "this help", false},
	} {
		if !watch || !e.writes {
			fmt.Fprintf(&b, "  %-7s %s\r\n", e.key, e.what)
		}
	}
	if watch {
		b.WriteString("  (" + watchRole + ": it never writes or sends a break)\r\n")
	}
	return b.String()
}

// escapeName is an escape prefix as users type it: control bytes as Ctrl-X,
// other bytes as they are ("\x05c" is "Ctrl-E c").
func escapeName(prefix string) string {
	keys := make([]string, 0, len(prefix))
	for _, b := range []byte(prefix) {
		switch {
		case b < 0x20:
			keys = append(keys, "Ctrl-"+string(rune(b+0x40)))
		case b == 0x7f:
			keys = append(keys, "Ctrl-?")
		case b == ' ':
			keys = append(keys, "Space")
		case b > 0x7f:
			keys = append(keys, fmt.Sprintf("0x%02X", b))
		default:
			keys = append(keys, string(rune(b)))
		}
	}
	return strings.Join(keys, " ")
}

// A console without a PTY whose client sent input ends when the client
// ends it (EOF: `ssh -T node < script.txt`), unless --ignore-eof: once the
// input has gone to the node, the output goes on until it has paused for
// eofQuiet, at most eofLinger. A client that ends an empty input (`ssh -n`,
// x/crypto without Stdin: a reader) keeps its console until it hangs up.
const (
	eofQuiet  = 500 * time.Millisecond
	eofLinger = 10 * time.Second
)

// consoleMode is how a console session treats its client's input.
type consoleMode struct {
	pty   bool // escapes are read (the session has a PTY)
	watch bool // console --read-only: never writes, whatever the client does
	eof   bool // the end of the client's input, if it sent any, ends the session
}

// console attaches the session to the node's console until the viewer
// detaches, the client leaves or ends its input (without a PTY), or the
// session is cut. Console bytes go to the channel untouched (no newline
// rewriting); obmd's own messages go to stderr. The output loop runs here;
// the input reader is a goroutine in c.wg that ends when serve closes the
// channel. Escapes are read only on a session with a PTY (c.pty): without
// one every input byte goes to the node.
func (c *channel) console(sctx context.Context, info sessions.Info, cmd commands.Command, stderr io.Writer) (int, error) {
	mode := consoleMode{pty: c.pty, watch: cmd.ReadOnly, eof: !c.pty && !cmd.IgnoreEOF}
	// Other viewers are shown the session ID alone (banner, takeover
	// notice), as `sessions` lists it, never the viewer's address or
	// credential.
	// With a terminal, the attach replay is the node's screen redrawn (if
	// it shows something): a full-screen program's last bytes are mostly
	// repaints. Without one, the bytes as they came.
	v, err := c.s.consoles.Attach(sctx, c.label, sol.AttachOptions{Session: info.ID, ReadOnly: cmd.ReadOnly, Replay: true,
		Epoch: info.Epoch, Screen: mode.pty})
	if err != nil {
		if sctx.Err() != nil { // cut before it could attach: the caller says why
			return commands.ExitFailed, context.Cause(sctx)
		}
		c.log.WithError(err).Error("console_attach_failed")
		fmt.Fprintf(stderr, "obmd: cannot attach to the console of %s\n", safe(c.label))
		return commands.ExitFailed, err
	}
	defer v.Close()
	say := func(msg string) { io.WriteString(c.ch.Stderr(), notice(msg)) }
	if d := c.s.cfg.RoleWait; d > 0 {
		wctx, cancel := context.WithTimeout(sctx, d)
		v.AwaitRole(wctx) // undecided after d: the banner says what this replica knows
		cancel()
	}
	say(c.banner(v, mode))

	keys := newKeystrokes()
	c.mu.Lock()
	c.onBreak = func() bool {
		if mode.watch {
			say(watchRole)
			return false
		}
		keys.settle(breakSettleIdle, breakSettleMax)
		c.sendBreak(sctx, v)
		return true
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.onBreak = nil
		c.mu.Unlock()
	}()

	msgs := make(chan string, 16) // input side -> this loop; never blocks the sender
	detach := make(chan struct{})
	eof := make(chan error, 1) // the input side's: the client's input ended, and went to the node (nil) or not
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.consoleInput(sctx, v, mode, keys, msgs, detach, eof)
	}()

	// After the end of the input: quiet fires once the output paused for
	// eofQuiet, linger at eofLinger.
	var quiet, linger <-chan time.Time
	var quietT *time.Timer
	for {
		select {
		case ch, ok := <-v.Output():
			if !ok {
				// Cuts and shutdown are told by the caller; anything else
				// that ended the viewer (too slow a reader, displaced from a
				// one-reader mock console) is told here.
				err := v.Err()
				if !access.IsCut(err) {
					say(sol.TenantText(err))
				}
				return commands.ExitFailed, err
			}
			if ch.Skipped > 0 {
				say(fmt.Sprintf("%d bytes skipped: this connection is too slow", ch.Skipped))
			}
			if ch.Notice != "" {
				say(ch.Notice)
			}
			data := ch.Data
			if len(ch.Screen) > 0 && mode.pty {
				data = ch.Screen // a replay or a redraw (Ctrl-E c r)
			}
			if len(data) > 0 {
				if _, err := c.ch.Write(data); err != nil {
					return commands.ExitOK, nil
				}
				if quietT != nil {
					quietT.Reset(eofQuiet)
				}
			}
		case m := <-msgs:
			io.WriteString(c.ch.Stderr(), m)
		case <-detach:
			say("detached")
			return commands.ExitOK, nil
		case err := <-eof:
			eof = nil
			if err != nil {
				say(sol.TenantText(err))
				return commands.ExitFailed, nil
			}
			quietT = time.NewTimer(eofQuiet)
			defer quietT.Stop()
			lingerT := time.NewTimer(eofLinger)
			defer lingerT.Stop()
			quiet, linger = quietT.C, lingerT.C
		case <-quiet:
			return commands.ExitOK, nil
		case <-linger:
			return commands.ExitOK, nil
		case <-c.closed:
			return commands.ExitOK, nil
		case <-sctx.Done():
			return commands.ExitFailed, context.Cause(sctx)
		}
	}
}

// notice is one of obmd's console messages as the client's stderr shows
// it, on a line of its own.
func notice(msg string) string { return "\r\n[obmd: " + msg + "]\r\n" }

// banner is the line a viewer sees on attach. Viewers are named by
// session ID (in cluster mode a random prefix per replica, never a
// replica's name: that is for operators), those of other replicas as the
// holder knows them, and the writer wherever it is.
func (c *channel) banner(v *sol.Viewer, mode consoleMode) string {
	// The writer may be on another replica.
	others := sol.Others(c.s.consoles.Viewers(c.label), c.s.consoles.Writer(c.label), v.Who())
	role, hint := "you are writing", c.s.esc.hint
	if !mode.pty {
		hint = noEscapesHint
	}
	switch {
	case mode.watch:
		role = watchRole
	case v.Writer():
	case mode.pty:
		role = c.s.esc.toWrite
	default:
		role = noEscapesToRead
	}
	who := "no one else attached"
	if len(others) > 0 {
		who = fmt.Sprintf("%d other(s): %s", len(others), strings.Join(others, ", "))
	}
	return fmt.Sprintf("console of %s; %s; %s; %s", safe(c.label), role, who, hint)
}

// consoleInput reads the client's keystrokes, acting on escapes and sending
// the rest to the console (never in a read-only session). It returns when
// the channel is closed or the client ends its input (EOF); with mode.eof,
// if the client sent anything, it then waits for the input to have gone to
// the node and sends eof whether it did (sol.Viewer.Flush).
func (c *channel) consoleInput(sctx context.Context, v *sol.Viewer, mode consoleMode, keys *keystrokes,
	msgs chan<- string, detach chan<- struct{}, eof chan<- error) {
	tell := func(m string) {
		select {
		case msgs <- m:
		default:
		}
	}
	say := func(m string) { tell(notice(m)) }
	var lastHint time.Time
	readOnly := noEscapesKeys
	feed := func(b []byte) []escapeEvent { return []escapeEvent{{Data: b}} }
	if mode.pty {
		readOnly = c.s.esc.readOnly
		feed = newEscapeParser([]byte(c.s.cfg.Escape)).Feed
	}
	help := c.s.esc.help
	if mode.watch {
		readOnly, help = watchKeys, c.s.esc.watchHelp
	}
	// Keystrokes are small and a paste is read in several pieces; this
	// buffer lives as long as the viewer, so it is the viewer's largest
	// allocation (32 KiB here made half of an idle viewer's heap).
	buf := make([]byte, 4<<10)
	defer keys.done()
	sent := false
	for {
		keys.reading(true)
		n, err := c.ch.Read(buf)
		keys.reading(false)
		sent = sent || n > 0
		for _, ev := range feed(buf[:n]) {
			if ev.Data != nil {
				if len(ev.Data) == 0 {
					continue
				}
				refused := mode.watch
				if !refused {
					_, err := v.Write(ev.Data)
					refused = errors.Is(err, sol.ErrReadOnly)
				}
				if refused && time.Since(lastHint) > 5*time.Second {
					lastHint = time.Now()
					say(readOnly)
				}
				continue
			}
			switch {
			case ev.Cmd == EscDetach:
				close(detach)
				return
			case ev.Cmd == EscHelp:
				tell(help)
			case ev.Cmd == EscRedraw:
				v.Redraw()
			case ev.Cmd == EscPlayback:
				v.Replay()
			case mode.watch && (ev.Cmd == EscTakeOver || ev.Cmd == EscReadOnly || ev.Cmd == EscBreak):
				say(watchRole)
			case ev.Cmd == EscTakeOver:
				v.TakeWrite()
				say("you are writing")
			case ev.Cmd == EscReadOnly:
				v.ReadOnly()
				say("you are read-only")
			case ev.Cmd == EscBreak:
				c.sendBreak(sctx, v)
			default:
				say(c.s.esc.unknown)
			}
		}
		if err != nil {
			if mode.eof && sent && errors.Is(err, io.EOF) {
				eof <- v.Flush() // buffered: never blocks
			}
			return
		}
	}
}

// sendBreak sends a serial break (escape b, or OpenSSH's ~B as an RFC 4335
// break request); only the writer may.
func (c *channel) sendBreak(ctx context.Context, v *sol.Viewer) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := v.Break(ctx); err != nil {
		c.log.WithError(err).Info("break_failed")
		io.WriteString(c.ch.Stderr(), notice("break not sent: "+sol.TenantText(err)))
		return
	}
	io.WriteString(c.ch.Stderr(), notice("break sent"))
	c.audit(ctx, "console.break", "ok", "")
}

// A break request (OpenSSH's ~B) waits until the input reader has been idle
// for breakSettleIdle, at most breakSettleMax.
const (
	breakSettleIdle = 10 * time.Millisecond
	breakSettleMax  = 200 * time.Millisecond
)

// keystrokes follows the console's input reader so that a break request can
// wait for the keystrokes sent before it. SSH delivers requests apart from
// the data (x/crypto queues them separately), and OpenSSH sends the Enter
// that must precede ~B as data just before the request: without waiting,
// the break could overtake it (ipmitool then refuses a break that is not at
// a line start). When the request arrives, that data is already in the
// channel's buffer, where a Read returns it at once; so a reader that has
// sat in Read for a moment has handed over everything sent before.
type keystrokes struct {
	mu    sync.Mutex
	in    bool // the reader is in Read
	ended bool // the reader has returned
	// changed is closed at the next change, then cleared. settle creates it
	// and waits on it; without a settle waiting it stays nil, so the reader
	// (two changes per Read) pays nothing for this rare wait.
	changed chan struct{}
}

func newKeystrokes() *keystrokes { return &keystrokes{} }

func (k *keystrokes) set(f func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f()
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
}

// reading records that the reader enters (true) or leaves (false) Read.
func (k *keystrokes) reading(in bool) { k.set(func() { k.in = in }) }

// done records that the reader has returned.
func (k *keystrokes) done() { k.set(func() { k.ended = true }) }

// settle waits until the reader has stayed in one Read for idle (or has
// ended), or until max has passed.
func (k *keystrokes) settle(idle, max time.Duration) {
	deadline := time.Now().Add(max)
	for {
		k.mu.Lock()
		if k.changed == nil {
			k.changed = make(chan struct{})
		}
		in, ended, changed := k.in, k.ended, k.changed
		k.mu.Unlock()
		wait := time.Until(deadline)
		if ended || wait <= 0 {
			return
		}
		if in {
			wait = min(wait, idle)
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
			return // idle in Read, or out of time
		}
	}
}
