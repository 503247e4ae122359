package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
	"github.com/obmd/obmd/sol/screen/screentest"
	"github.com/obmd/obmd/sol/sim"
)

// waitScreen waits until hub's screen of n1 is want.
func waitScreen(t *testing.T, what string, hub *sol.Manager, want string) {
	t.Helper()
	var got string
	waitFor(t, what, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := hub.Screen(ctx, "n1")
		got = s.Text()
		return err == nil && got == want
	})
}

// TestRelayScreen: a replica that relays a node's console shows the
// holder's screen, a BIOS menu that the relay's seed (the holder's last
// 16 KiB) no longer draws, and live output draws on both.
func TestRelayScreen(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		r0 := startReplica(t, "r0", openStore(t, dsn), lab, key)
		r1 := startReplica(t, "r1", openStore(t, dsn), lab, key)
		attach(t, r0, "n1", "alice")
		waitFor(t, "the holder's link", func() bool { return r0.hub.Stats().LinksUp == 1 })
		bios := screentest.BIOSSetup(10000)
		for p := bios.Output; len(p) > 0; p = p[min(len(p), 4<<10):] {
			b.Inject(p[:min(len(p), 4<<10)])
		}
		waitScreen(t, "the holder's menu", r0.hub, bios.Screen)
		if strings.Contains(string(r0.hub.Scrollback("n1")), bios.Menu[0]) {
			t.Fatal("the holder's scrollback (the relay's seed) holds the menu: the test proves nothing")
		}
		attach(t, r1, "n1", "bob")
		waitFor(t, "the relay", func() bool { return r1.hub.LinkUp("n1") })
		waitScreen(t, "the relayed menu", r1.hub, bios.Screen)
		b.Inject([]byte("\x1b[24;3Hchanged"))
		want := strings.Replace(bios.Screen, "  ><: Sel", "  changed", 1)
		waitScreen(t, "live output on the holder", r0.hub, want)
		waitScreen(t, "live output on the relay", r1.hub, want)
	})
}

// TestSeedAcrossVersions: the screen goes with the seed only in protocol
// 2; in protocol 1 (a holder or a relaying replica of v0.9.0) relays go on
// without it. A build that probed for the screen (a seed wanting a reply)
// gets a refusal, and so sends none.
func TestSeedAcrossVersions(t *testing.T) {
	term, _ := screen.New(screen.Size{})
	term.Write([]byte("the holder's screen"))
	seed := sol.Chunk{Data: []byte("seed"), Replay: true, Screen: term.ANSI()}
	c := &Cluster{cfg: Config{DialTimeout: 5 * time.Second}}

	t.Run("protocol 2", func(t *testing.T) {
		holder, relay, reqs := channelPair(t)
		go sendSeed(holder, seed, 2)
		got, scr, err := c.awaitSeed(context.Background(), reqs, 2)
		if err != nil || string(got) != "seed" || string(scr) != string(seed.Screen) {
			t.Fatalf("seed %q, screen %d bytes, %v", got, len(scr), err)
		}
		readData(t, holder, relay)
	})
	t.Run("protocol 1", func(t *testing.T) {
		holder, relay, reqs := channelPair(t)
		go sendSeed(holder, seed, 1)
		got, scr, err := c.awaitSeed(context.Background(), reqs, 1)
		if err != nil || string(got) != "seed" || scr != nil {
			t.Fatalf("seed %q, screen %q, %v; want the seed, no screen", got, scr, err)
		}
		readData(t, holder, relay)
	})
	t.Run("a holder that probes", func(t *testing.T) {
		holder, relay, reqs := channelPair(t)
		probed := make(chan bool, 1)
		go func() {
			wants, _ := holder.SendRequest(seedRequest, true, seed.Data)
			probed <- wants
		}()
		got, scr, err := c.awaitSeed(context.Background(), reqs, 1)
		if err != nil || string(got) != "seed" || scr != nil {
			t.Fatalf("seed %q, screen %q, %v; want the seed, no screen", got, scr, err)
		}
		if <-probed {
			t.Error("the probe for a screen: got true, want false in protocol 1")
		}
		readData(t, holder, relay)
	})
	t.Run("protocol 1 sends nothing after the seed", func(t *testing.T) {
		holder, relay, reqs := channelPair(t)
		if _, err := sendSeed(holder, seed, 1); err != nil {
			t.Fatal(err)
		}
		if r := <-reqs; r.Type != seedRequest || r.WantReply {
			t.Fatalf("first request %q (want reply %v), want the seed without reply", r.Type, r.WantReply)
		}
		go func() {
			for r := range reqs {
				t.Errorf("a request after the seed: %q", r.Type)
			}
		}()
		readData(t, holder, relay)
	})
}

// TestSeedScreenTooLarge: a screen whose redraw would not fit in one SSH
// packet (the tenant draws every cell of a 200x100 screen in its own
// colours) goes as none: the relaying replica's screen starts from the
// seed's bytes, and the channel (and the peer connection under it) lives.
func TestSeedScreenTooLarge(t *testing.T) {
	term, _ := screen.New(screen.Size{Cols: screen.MaxCols, Rows: screen.MaxRows})
	var out strings.Builder
	for i := range screen.MaxCols * screen.MaxRows {
		fmt.Fprintf(&out, "\x1b[1;3;4;9;38;2;%d;%d;1;48;2;1;%d;%dmx", i%256, i/256, i%256, i/256)
	}
	term.Write([]byte(out.String()))
	seed := sol.Chunk{Data: []byte("seed"), Replay: true, Screen: term.ANSI()}
	if len(seed.Screen) <= maxSeedScreen {
		t.Fatalf("a redraw of %d bytes fits: the test proves nothing", len(seed.Screen))
	}
	c := &Cluster{cfg: Config{DialTimeout: 5 * time.Second}}
	holder, relay, reqs := channelPair(t)
	sent := make(chan error, 1)
	go func() { _, err := sendSeed(holder, seed, 2); sent <- err }()
	got, scr, err := c.awaitSeed(context.Background(), reqs, 2)
	if err != nil || string(got) != "seed" || len(scr) != 0 {
		t.Fatalf("seed %q, screen %d bytes, %v; want the seed and no screen", got, len(scr), err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	readData(t, holder, relay)
}

// readData checks that console bytes the holder writes after the seed
// reach the relaying replica.
func readData(t *testing.T, holder, relay gossh.Channel) {
	t.Helper()
	go holder.Write([]byte("live"))
	buf := make([]byte, 4)
	if _, err := relay.Read(buf); err != nil || string(buf) != "live" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// channelPair connects an SSH client and server on loopback and returns
// a channel's two ends: the holder's (the server's) and the relaying
// replica's, with the requests the holder sends on it.
func channelPair(t *testing.T) (holder, relay gossh.Channel, reqs <-chan *gossh.Request) {
	t.Helper()
	key := newHostKey(t)
	l, err := net.Listen("tcp", "127.0.0.1:0") // (net.Pipe deadlocks SSH's version exchange)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	scfg := &gossh.ServerConfig{NoClientAuth: true}
	scfg.AddHostKey(key)
	type server struct {
		ch  gossh.Channel
		err error
	}
	srv := make(chan server, 1)
	go func() {
		_, chans, greqs, err := gossh.NewServerConn(a, scfg)
		if err != nil {
			srv <- server{err: err}
			return
		}
		go gossh.DiscardRequests(greqs)
		nc := <-chans
		ch, creqs, err := nc.Accept()
		go gossh.DiscardRequests(creqs)
		srv <- server{ch, err}
	}()
	cc, chans, greqs, err := gossh.NewClientConn(b, "holder", &gossh.ClientConfig{HostKeyCallback: gossh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	client := gossh.NewClient(cc, chans, greqs)
	t.Cleanup(func() { client.Close() })
	relay, creqs, err := client.OpenChannel(consoleChannel, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := <-srv
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.ch, relay, creqs
}
