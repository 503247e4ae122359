package ipmi

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/sirupsen/logrus"
)

// SOL operation and status bits (IPMI v2.0 table 15-2, byte 4).
const (
	opNACK          = 1 << 6 // both directions
	opBreak         = 1 << 4 // console -> BMC: generate a serial break
	stUnavailable   = 1 << 5 // BMC -> console: character transfer unavailable
	stDeactivating  = 1 << 4 // BMC -> console: SOL is being deactivated
	stOverrun       = 1 << 3 // BMC -> console: output was lost
	seqSpace        = 15     // data sequence numbers run 1..15
	maxNoProgressMs = 100    // cap of the back-off when the BMC accepts nothing
)

// solState is the SOL protocol state. Only the owner goroutine touches it.
type solState struct {
	nextSeq uint8 // sequence number of the next new data packet (1..15)

	// Input: the current Write and the packet in flight (stop-and-wait:
	// with partial acceptance, two packets in flight could reorder input).
	cur      *writeReq
	pending  []byte // what cur still has to get accepted
	inflight *outPacket
	retries  int       // resends of inflight
	resumeAt time.Time // after a refusal, wait until then
	refusals int       // consecutive packets with nothing accepted
	stuck    time.Time // when the BMC started accepting nothing

	// Output: the last data packet received (a retransmission reuses its
	// sequence number and may carry more data).
	haveRecv bool
	recvSeq  uint8
	recvLen  int

	lastRx   time.Time // anything received from the BMC
	probeErr int       // consecutive failed keepalive probes
}

// outPacket is a data or break packet waiting for its acknowledgement.
type outPacket struct {
	seq  uint8
	data []byte
	op   uint8
	sent time.Time
	brk  bool
}

// seqProbe works around ipmi_sim (OpenIPMI lanserv/sol.c), which keeps the
// sequence number of the last input packet across activations and drops a
// new session's first packet if it reuses that number (it only
// re-acknowledges it). Right after activation we send an empty packet with
// sequence number 1. OpenIPMI 2.0.33 acknowledges every empty packet and
// records its number; older versions answer only if 1 is the recorded
// number. Either way an answer means data must start at 2, and no answer
// within a short window means 1 is safe. Other BMCs may answer any empty
// packet; starting at 2 does them no harm.
type seqProbe struct {
	until time.Time // data waits for the answer until then; zero once settled
	fresh bool      // no data sent yet: a late answer still moves the start to 2
}

// startSeqProbe sends the probe; called before the owner starts.
func (c *Console) startSeqProbe(rtt time.Duration) error {
	win := min(max(4*rtt, 20*time.Millisecond), 250*time.Millisecond)
	c.seqWin = seqProbe{until: time.Now().Add(win), fresh: true}
	return c.sendRaw(&types.SOLPayloadPacket{SequenceNumber: 1})
}

// loop runs the protocol until Close, a dead link or a lost payload.
func (c *Console) loop() error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if !c.seqWin.until.IsZero() && !time.Now().Before(c.seqWin.until) {
			c.seqWin.until = time.Time{} // no answer: sequence number 1 is safe
		}
		if err := c.pump(); err != nil {
			return err
		}
		resetTimer(timer, time.Until(c.nextWake()))
		var writes chan *writeReq
		if c.st.cur == nil {
			writes = c.writes
		}
		var breaks chan chan error
		if c.st.inflight == nil && c.seqWin.until.IsZero() {
			breaks = c.breaks
		}
		select {
		case <-c.ctx.Done():
			return context.Cause(c.ctx)
		case p := <-c.conn.sol:
			if err := c.receive(p); err != nil {
				return err
			}
		case <-c.conn.done:
			return &deadError{fmt.Errorf("BMC socket: %w", c.conn.readErr)}
		case req := <-writes:
			c.st.cur, c.st.pending = req, req.data
		case req := <-breaks:
			err := c.sendBreak()
			req <- err
			if err != nil {
				return err
			}
		case <-timer.C:
			if err := c.onTimer(); err != nil {
				return err
			}
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(max(d, 0))
}

// nextWake is the earliest deadline: a resend, the end of a back-off or of
// the sequence probe, or the keepalive.
func (c *Console) nextWake() time.Time {
	st := &c.st
	if st.inflight != nil {
		return st.inflight.sent.Add(c.b.cfg.Retransmit)
	}
	wake := st.lastRx.Add(c.b.cfg.Keepalive)
	if !c.seqWin.until.IsZero() {
		wake = earliest(wake, c.seqWin.until)
	}
	if len(st.pending) > 0 && st.resumeAt.After(time.Now()) {
		wake = earliest(wake, st.resumeAt)
	}
	return wake
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// pump sends the next data packet when nothing is in flight.
func (c *Console) pump() error {
	st := &c.st
	if st.inflight != nil || len(st.pending) == 0 {
		return nil
	}
	now := time.Now()
	if now.Before(st.resumeAt) || !c.seqWin.until.IsZero() {
		return nil
	}
	n := min(len(st.pending), c.chunk)
	return c.sendData(st.pending[:n], 0, false)
}

// sendData sends a new data (or break) packet with a fresh sequence number
// and makes it the packet in flight.
func (c *Console) sendData(data []byte, op uint8, brk bool) error {
	st := &c.st
	seq := st.nextSeq
	st.nextSeq = seq%seqSpace + 1
	c.seqWin.fresh = false
	st.inflight = &outPacket{seq: seq, data: data, op: op, brk: brk, sent: time.Now()}
	st.retries = 0
	return c.sendRaw(&types.SOLPayloadPacket{SequenceNumber: seq, ControlByte: op, CharacterData: data})
}

// sendBreak sends a packet with the break bit and no data. It is not
// resent (a second break is worse than a lost one) and its answer is not
// awaited beyond the resend interval: not every BMC answers an empty packet
// (older ipmi_sim versions do not).
func (c *Console) sendBreak() error {
	return c.sendData(nil, opBreak, true)
}

// sendRaw sends a packet that expects no answer (acks, the sequence probe).
func (c *Console) sendRaw(pkt *types.SOLPayloadPacket) error {
	raw, err := c.encode(pkt)
	if err != nil {
		return err
	}
	return c.write(raw, pkt)
}

func (c *Console) encode(pkt *types.SOLPayloadPacket) ([]byte, error) {
	rmcp, err := c.s.c.BuildRmcpRequest(c.ctx, &types.SOLPayloadRequest{SOLPayloadPacket: *pkt})
	if err != nil {
		return nil, fmt.Errorf("build SOL packet: %w", err)
	}
	return rmcp.Pack(), nil
}

func (c *Console) write(raw []byte, pkt *types.SOLPayloadPacket) error {
	if c.debug {
		c.log.WithFields(logrus.Fields{"seq": pkt.SequenceNumber, "ack": pkt.AckedSequenceNumber,
			"count": pkt.AcceptedCharacterCount, "op": pkt.ControlByte, "len": len(pkt.CharacterData)}).Debug("sol_tx")
	}
	if _, err := c.conn.Write(raw); err != nil {
		return &deadError{fmt.Errorf("send SOL packet: %w", err)}
	}
	return nil
}

// receive handles one datagram from the SOL queue.
func (c *Console) receive(p packet) error {
	if p.err != nil {
		if errors.Is(p.err, syscall.ECONNREFUSED) {
			return &deadError{fmt.Errorf("BMC refused the connection (IPMI service gone): %w", p.err)}
		}
		return &deadError{p.err}
	}
	pkt, err := c.decode(p.data)
	if err != nil {
		c.log.WithError(err).Debug("sol_rx_bad")
		return nil
	}
	c.st.lastRx = time.Now()
	c.st.probeErr = 0
	if c.debug {
		c.log.WithFields(logrus.Fields{"seq": pkt.SequenceNumber, "ack": pkt.AckedSequenceNumber,
			"count": pkt.AcceptedCharacterCount, "status": pkt.ControlByte, "len": len(pkt.CharacterData)}).Debug("sol_rx")
	}
	if pkt.ControlByte&stDeactivating != 0 {
		return errLost
	}
	if pkt.ControlByte&stOverrun != 0 {
		c.log.Debug("sol_bmc_overrun")
	}
	if pkt.AckedSequenceNumber != 0 {
		c.onAck(pkt)
	}
	if pkt.SequenceNumber != 0 {
		return c.onData(pkt)
	}
	return nil
}

// decode decrypts and parses a SOL datagram. go-ipmi can panic on a
// malformed one; a panic here becomes an error (the datagram is dropped).
func (c *Console) decode(raw []byte) (pkt *types.SOLPayloadPacket, err error) {
	defer func() {
		if r := recover(); r != nil {
			pkt, err = nil, fmt.Errorf("malformed SOL datagram: %v", r)
		}
	}()
	var res types.SOLPayloadResponse
	if err := c.s.c.ParseRmcpResponse(c.ctx, raw, types.CommandSOLPayload, &res); err != nil {
		return nil, err
	}
	return &res.SOLPayloadPacket, nil
}

// onAck handles the acknowledgement part of a packet.
func (c *Console) onAck(pkt *types.SOLPayloadPacket) {
	st := &c.st
	ack := pkt.AckedSequenceNumber
	if c.seqWin.fresh && ack == 1 && st.inflight == nil {
		// The sequence probe was answered: start at 2.
		c.seqWin = seqProbe{}
		st.nextSeq = 2
		return
	}
	in := st.inflight
	if in == nil || ack != in.seq {
		return // stale or duplicate
	}
	st.inflight = nil
	if in.brk {
		return
	}
	n := min(int(pkt.AcceptedCharacterCount), len(in.data))
	st.pending = st.pending[n:]
	st.cur.accepted += n
	now := time.Now()
	hold := pkt.NACK || pkt.ControlByte&stUnavailable != 0
	switch {
	case n > 0:
		// Progress. The rest (if any) goes at once, or after a short pause
		// if the BMC said its buffer is full.
		st.refusals = 0
		if hold && n < len(in.data) {
			st.resumeAt = now.Add(time.Millisecond)
		}
	default:
		// Nothing accepted: back off (2 ms doubling to 100 ms), and give
		// up on this Write after CallTimeout without progress.
		if st.refusals == 0 {
			st.stuck = now
		}
		st.refusals++
		st.resumeAt = now.Add(time.Duration(min(1<<min(st.refusals, 10), maxNoProgressMs)) * time.Millisecond)
		if now.Sub(st.stuck) > c.b.cfg.CallTimeout {
			c.finishWrite(fmt.Errorf("write to console of %s: BMC accepted no input for %v", c.b.label, c.b.cfg.CallTimeout))
			return
		}
	}
	if len(st.pending) == 0 {
		c.finishWrite(nil)
	}
}

// finishWrite answers the current Write, if any.
func (c *Console) finishWrite(err error) {
	st := &c.st
	if st.cur == nil {
		return
	}
	st.cur.done <- err
	st.cur, st.pending, st.refusals = nil, nil, 0
}

// onData handles the character data part of a packet: deliver what is new,
// then acknowledge all of it.
func (c *Console) onData(pkt *types.SOLPayloadPacket) error {
	st := &c.st
	seq, data := pkt.SequenceNumber, pkt.CharacterData
	fresh := data
	if st.haveRecv {
		switch dist := (int(seq) - int(st.recvSeq) + seqSpace) % seqSpace; {
		case dist == 0: // retransmission, maybe with more data appended
			fresh = nil
			if len(data) > st.recvLen {
				fresh = data[st.recvLen:]
			}
		case dist > seqSpace/2: // a late duplicate of an older packet
			return nil
		}
	}
	if !c.deliver(fresh) {
		return nil // Read is behind: no ack, the BMC will resend
	}
	if st.haveRecv && seq == st.recvSeq {
		st.recvLen = max(st.recvLen, len(data))
	} else {
		st.haveRecv, st.recvSeq, st.recvLen = true, seq, len(data)
	}
	// All of this packet's characters are now accepted (delivered now or
	// before).
	return c.sendRaw(&types.SOLPayloadPacket{AckedSequenceNumber: seq, AcceptedCharacterCount: uint8(len(data))})
}

// onTimer resends an unacknowledged packet, ends the sequence probe, and
// probes the BMC when it has been silent for Keepalive.
func (c *Console) onTimer() error {
	st := &c.st
	now := time.Now()
	if in := st.inflight; in != nil && !now.Before(in.sent.Add(c.b.cfg.Retransmit)) {
		switch {
		case in.brk:
			st.inflight = nil
		case st.retries >= maxRetransmits:
			return &deadError{fmt.Errorf("BMC did not acknowledge SOL packet %d after %d resends", in.seq, st.retries)}
		default:
			// Same SOL sequence number and data, new session sequence
			// number (the BMC may reject a replayed one).
			st.retries++
			in.sent = now
			if err := c.sendRaw(&types.SOLPayloadPacket{SequenceNumber: in.seq, ControlByte: in.op, CharacterData: in.data}); err != nil {
				return err
			}
		}
	}
	if st.inflight == nil && !now.Before(st.lastRx.Add(c.b.cfg.Keepalive)) {
		return c.keepalive()
	}
	return nil
}

// keepalive asks the BMC about the SOL payload: an answer proves the
// session alive, and another owner (or none) means we lost the payload.
// (Not Get Channel Payload Support: it crashes ipmi_sim.)
func (c *Console) keepalive() error {
	ctx, cancel := context.WithTimeout(c.ctx, min(c.b.cfg.CallTimeout, 2*c.b.cfg.AttemptTimeout+time.Second))
	defer cancel()
	lost, err := c.probe(ctx)
	if c.ctx.Err() != nil {
		return context.Cause(c.ctx)
	}
	st := &c.st
	if _, isCC := completionCode(err); err != nil && !isCC {
		st.probeErr++
		c.log.WithError(err).WithField("failures", st.probeErr).Debug("sol_probe_failed")
		if st.probeErr >= probeFailures || errors.Is(err, syscall.ECONNREFUSED) {
			return &deadError{fmt.Errorf("BMC stopped answering: %w", err)}
		}
		st.lastRx = time.Now().Add(-c.b.cfg.Keepalive + c.b.cfg.AttemptTimeout) // retry soon
		return nil
	}
	st.probeErr = 0
	st.lastRx = time.Now()
	if lost {
		return errLost
	}
	return nil
}

// probe reports whether the payload is no longer ours: by owner session if
// the BMC told us at activation, else by whether instance 1 is active at
// all. A completion-code error means the BMC answered but cannot tell.
func (c *Console) probe(ctx context.Context) (lost bool, err error) {
	if c.ownerID != 0 {
		info, err := c.s.c.GetPayloadInstanceInfo(ctx, types.PayloadTypeSOL, solInstance)
		if err != nil {
			return false, err
		}
		return info.SessionID != c.ownerID, nil
	}
	st, err := c.s.c.GetPayloadActivationStatus(ctx, types.PayloadTypeSOL)
	if err != nil {
		return false, err
	}
	return !st.Instance01Activated, nil
}
