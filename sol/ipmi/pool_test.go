package ipmi

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/command/app"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// keptConfig keeps sessions for linger in a fresh pool, closed with the
// test. A kept session that answers later than AttemptTimeout is taken for
// dead: 1 s (the default), not fastConfig's 200 ms, so that a loaded machine
// does not turn a slow answer into a reopened session the test did not ask for.
func keptConfig(t *testing.T, linger time.Duration) Config {
	p := NewSessions()
	t.Cleanup(p.Close)
	cfg := fastConfig
	cfg.SessionLinger, cfg.Sessions, cfg.AttemptTimeout = linger, p, time.Second
	return cfg
}

// keptSim starts an ipmi_sim and a driver for it keeping sessions for linger.
func keptSim(t *testing.T, linger time.Duration) (*ipmisim.Sim, *BMC, Config) {
	s := ipmisim.Start(t)
	cfg := keptConfig(t, linger)
	return s, newBMC(t, s.Info(), cfg), cfg
}

func wantStatus(t *testing.T, b *BMC, want string) {
	t.Helper()
	got, err := b.PowerStatus(context.Background())
	if err != nil {
		t.Fatalf("PowerStatus: %v", err)
	}
	if got != want {
		t.Fatalf("PowerStatus = %q, want %q", got, want)
	}
}

// TestKeptSessionReused: against ipmi_sim, the status calls after the
// first run on the kept session, and each reads the BMC (a power change
// made between them shows at once: no result is kept).
func TestKeptSessionReused(t *testing.T) {
	s, b, cfg := keptSim(t, 5*time.Second)
	ctx := context.Background()
	wantStatus(t, b, sol.PowerOn)
	if err := b.PowerOff(ctx, false); err != nil { // a fresh session; one is kept already
		t.Fatalf("PowerOff: %v", err)
	}
	wantStatus(t, b, sol.PowerOff)
	if err := b.SetBootDevice(ctx, sol.BootPXE, false); err != nil {
		t.Fatalf("SetBootDevice: %v", err)
	}
	if err := b.PowerOn(ctx); err != nil {
		t.Fatalf("PowerOn: %v", err)
	}
	wantStatus(t, b, sol.PowerOn)
	// A driver built anew for the next call (as the resolver does) shares the pool.
	wantStatus(t, newBMC(t, s.Info(), cfg), sol.PowerOn)
	st := cfg.Sessions.Stats()
	if st.Reused != 4 || st.Reopened != 0 || st.Idle != 1 {
		t.Fatalf("stats %+v, want 4 reused (3 status, 1 boot device), none reopened, 1 idle", st)
	}
	// Another registration of the node (a changed password) never meets it.
	other := s.Info()
	other.Pass = "not-the-password"
	if _, err := newBMC(t, other, cfg).PowerStatus(ctx); err == nil {
		t.Fatalf("PowerStatus with a wrong password succeeded: the kept session was used")
	}
	if got := cfg.Sessions.Stats().Reused; got != 4 {
		t.Fatalf("reused %d after a call with other credentials, want 4", got)
	}
}

// TestKeptSessionRoundTrips counts the requests a power status sends: seven
// on a new session (Get Channel Authentication Capabilities, Open Session,
// RAKP 1, RAKP 3, Set Session Privilege Level, Get Chassis Status, Close
// Session), one on a kept session.
func TestKeptSessionRoundTrips(t *testing.T) {
	relay, info := simBehindRelay(t)
	cfg := keptConfig(t, 5*time.Second)
	b := newBMC(t, info, cfg)
	count := func() int64 {
		before := relay.sent.Load()
		wantStatus(t, b, sol.PowerOn)
		return relay.sent.Load() - before
	}
	if n := count(); n != 6 { // no Close Session: it is kept
		t.Fatalf("first status sent %d requests, want 6", n)
	}
	if n := count(); n != 1 {
		t.Fatalf("status on the kept session sent %d requests, want 1", n)
	}
	cfg.SessionLinger = -1
	b = newBMC(t, info, cfg)
	if n := count(); n != 7 {
		t.Fatalf("status without keeping sent %d requests, want 7", n)
	}
}

// TestKeptSessionBMCRestart: the kept session dies with the BMC; the next
// call notices within one attempt_timeout and runs on a new session, once.
// With the BMC gone for good, the call fails as without a kept session.
func TestKeptSessionBMCRestart(t *testing.T) {
	s, b, cfg := keptSim(t, 30*time.Second)
	wantStatus(t, b, sol.PowerOn)
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatalf("restart ipmi_sim: %v", err)
	}
	wantStatus(t, b, sol.PowerOn)
	if st := cfg.Sessions.Stats(); st.Reopened != 1 || st.Idle != 1 {
		t.Fatalf("stats %+v after the restart, want 1 reopened, 1 idle", st)
	}
	wantStatus(t, b, sol.PowerOn) // on the new session
	if st := cfg.Sessions.Stats(); st.Reused != 1 || st.Reopened != 1 {
		t.Fatalf("stats %+v, want the new session reused", st)
	}
	s.Kill()
	_, err := b.PowerStatus(context.Background())
	var se *sol.Error
	if !errors.As(err, &se) || (se.Fault != sol.FaultUnreachable && se.Fault != sol.FaultNoAnswer) {
		t.Fatalf("PowerStatus with the BMC gone: %v, want unreachable or no answer", err)
	}
	if st := cfg.Sessions.Stats(); st.Reopened != 2 || st.Idle != 0 {
		t.Fatalf("stats %+v with the BMC gone, want 2 reopened, none idle", st)
	}
}

// TestKeptSessionExpires: a kept session is closed once it lingered, and
// none is kept with a negative linger or after Close.
func TestKeptSessionExpires(t *testing.T) {
	s, b, cfg := keptSim(t, 100*time.Millisecond)
	wantStatus(t, b, sol.PowerOn)
	deadline := time.Now().Add(5 * time.Second)
	for cfg.Sessions.Stats().Idle != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the kept session outlived its linger")
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantStatus(t, b, sol.PowerOn)
	if st := cfg.Sessions.Stats(); st.Reused != 0 {
		t.Fatalf("stats %+v: an expired session was reused", st)
	}
	off := cfg
	off.SessionLinger = -1
	wantStatus(t, newBMC(t, s.Info(), off), sol.PowerOn)
	cfg.Sessions.Close()
	if st := cfg.Sessions.Stats(); st.Idle != 0 {
		t.Fatalf("stats %+v after Close, want none idle", st)
	}
	wantStatus(t, b, sol.PowerOn)
	if st := cfg.Sessions.Stats(); st.Idle != 0 || st.Reused != 0 {
		t.Fatalf("stats %+v: a session was kept or reused after Close", st)
	}
}

// TestKeptSessionConcurrent: many calls on one node at once each run on a
// session of their own (the kept one goes to one of them), all succeed,
// and one session is kept (go test -race).
func TestKeptSessionConcurrent(t *testing.T) {
	s := ipmisim.Start(t)
	cfg := keptConfig(t, 5*time.Second)
	cfg.CallTimeout = 20 * time.Second // 2 shared cores
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 8 {
		wg.Add(1)
		go func() { // owned by the test: waited for below
			defer wg.Done()
			b := newBMC(t, s.Info(), cfg)
			for range 5 {
				if _, err := b.PowerStatus(context.Background()); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("PowerStatus: %v", err)
	}
	st := cfg.Sessions.Stats()
	if st.Idle != 1 || st.Reused == 0 {
		t.Fatalf("stats %+v, want 1 idle, some reused", st)
	}
}

// TestKeptSessionDroppedByBMC: another session closes the kept one at the
// BMC (as a BMC drops an idle session); the next call notices and runs on
// a new session, and the BMC then counts one session of obmd's, not two.
func TestKeptSessionDroppedByBMC(t *testing.T) {
	relay, info := simBehindRelay(t)
	direct := info
	direct.Port = relay.target.Port
	cfg := keptConfig(t, 30*time.Second)
	b := newBMC(t, info, cfg)
	ctx := context.Background()
	wantStatus(t, b, sol.PowerOn)
	id := relay.session.Load() // the kept session's, from its last request
	other, err := newBMC(t, direct, fastConfig).dial(ctx)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if _, err := other.c.CloseSession(ctx, &app.CloseSessionRequest{SessionID: id}); err != nil {
		t.Fatalf("close the kept session from another: %v", err)
	}
	other.close(ctx)
	wantStatus(t, b, sol.PowerOn)
	if st := cfg.Sessions.Stats(); st.Reopened != 1 || st.Idle != 1 {
		t.Fatalf("stats %+v after the BMC dropped the session, want 1 reopened, 1 idle", st)
	}
	kept := cfg.Sessions.take(b.poolKey())
	defer kept.close(ctx)
	si, err := kept.c.GetCurrentSessionInfo(ctx)
	if err != nil {
		t.Fatalf("GetCurrentSessionInfo on the new session: %v", err)
	}
	if si.CurrentActiveSessions != 1 {
		t.Fatalf("the BMC has %d active sessions, want 1 (the kept one)", si.CurrentActiveSessions)
	}
}

// activeSessions asks ipmi_sim at info (not through a relay) how many
// sessions it has open, counting the one that asks.
func activeSessions(t *testing.T, info sol.Info) int {
	t.Helper()
	ctx := context.Background()
	s, err := newBMC(t, info, fastConfig).dial(ctx)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer s.close(ctx)
	si, err := s.c.GetCurrentSessionInfo(ctx)
	if err != nil {
		t.Fatalf("GetCurrentSessionInfo: %v", err)
	}
	return int(si.CurrentActiveSessions)
}

// TestSessionClosedWhenCallerGivesUp: the caller gives up (its context is
// cancelled) while the BMC is slow to answer a call, on the kept session
// or on a new one. The session is still closed at the BMC (Close Session
// under its own bound), not left holding one of the BMC's few session slots
// until the BMC times it out.
func TestSessionClosedWhenCallerGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		linger time.Duration
		skip   int64 // requests answered on time: the new session's setup
	}{
		{"kept session", 30 * time.Second, 0},
		{"new session", -1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relay, info := simBehindRelay(t)
			direct := info
			direct.Port = relay.target.Port
			cfg := keptConfig(t, tc.linger)
			b := newBMC(t, info, cfg)
			want := 1 // the session asking
			if tc.linger > 0 {
				wantStatus(t, b, sol.PowerOn)
				want = 2 // and the kept one
			}
			if n := activeSessions(t, direct); n != want {
				t.Fatalf("%d sessions open at the BMC before the call, want %d", n, want)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			relay.setLag(300*time.Millisecond, tc.skip, cancel) // less than AttemptTimeout
			_, err := b.PowerStatus(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("PowerStatus given up on: %v, want context.Canceled", err)
			}
			if st := cfg.Sessions.Stats(); st.Idle != 0 || st.Reopened != 0 || st.Reused != int64(want-1) {
				t.Fatalf("stats %+v, want none idle or reopened, %d reused", st, want-1)
			}
			relay.setLag(0, 0, nil)
			if n := activeSessions(t, direct); n != 1 {
				t.Fatalf("%d sessions open at the BMC after the call, want 1 (the one asking): the call's was not closed", n)
			}
		})
	}
}

// TestDuplicateAnswers: a BMC that answers each request twice, as it
// answers a request sent again after a timeout (go-ipmi retries; on a
// loaded machine both answers come), never has the second answer taken for
// the answer to the next request. go-ipmi reads the session setup's
// answers (Open Session, RAKP 2 and 4) unmatched: the duplicate answer to
// Get Channel Authentication Capabilities was read as the Open Session
// answer ("RMCP+ status 0x97", its authentication-types byte) and the call
// failed as the BMC refusing obmd's credentials.
func TestDuplicateAnswers(t *testing.T) {
	relay, info := simBehindRelay(t)
	relay.dup.Store(true)
	b := newBMC(t, info, fastConfig) // no kept session: each call sets one up
	for range 3 {
		wantStatus(t, b, sol.PowerOn)
	}
}
