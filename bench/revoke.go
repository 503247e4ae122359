package main

import (
	"fmt"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// revocation is section 5.
func revocation(cfg benchConfig) *section {
	s := &section{Title: "5. Revocation: POST /node/x/token until every live console session of x has ended"}
	const sessions, rounds = 100, 3
	measure := fmt.Sprintf("%d live console sessions, until the last one ended (client-observed)", sessions)
	p, err := startInproc(cfg, "revoke")
	if err != nil {
		s.skip(measure, err)
		return s
	}
	defer p.Stop()
	a := p.admin()
	type result struct{ admin, client time.Duration }
	run := func(label string, n int) ([]result, error) {
		token, err := a.addNode(label, "sim", simInfo)
		if err != nil {
			return nil, err
		}
		var out []result
		for range rounds {
			auth := gossh.Password(token)
			vs, err := openViewers(n, 8, p.SSHAddr(), func(int) string { return label },
				func(int) gossh.AuthMethod { return auth }, time.Minute)
			if err != nil {
				return nil, err
			}
			for _, v := range vs {
				v.discard()
			}
			time.Sleep(200 * time.Millisecond)
			t0 := time.Now()
			token, err = a.rotate(label)
			took := time.Since(t0)
			if err != nil {
				closeViewers(vs)
				return nil, err
			}
			var last time.Time
			deadline := time.After(10 * time.Second)
			for _, v := range vs {
				select {
				case <-v.done:
				case <-deadline:
					closeViewers(vs)
					return nil, fmt.Errorf("a session of %s was still live 10 s after the rotation", label)
				}
				if e := time.Unix(0, v.ended.Load()); e.After(last) {
					last = e
				}
			}
			told := 0
			for _, v := range vs {
				// Not just "obmd: ": every banner has it.
				if strings.Contains(v.stderr.String(), "was revoked") {
					told++
				}
			}
			closeViewers(vs)
			if told < n {
				return nil, fmt.Errorf("only %d of %d cut sessions were told why", told, n)
			}
			out = append(out, result{admin: took, client: last.Sub(t0)})
		}
		return out, nil
	}
	cfg.logf("revocation: %d rounds of %d sessions and of 1", rounds, sessions)
	many, err := run("rev-many", sessions)
	if err != nil {
		s.skip(measure, err)
		return s
	}
	one, err := run("rev-one", 1)
	if err != nil {
		s.skip(measure, err)
		return s
	}
	pick := func(rs []result, f func(result) time.Duration) time.Duration {
		var ds []time.Duration
		for _, r := range rs {
			ds = append(ds, f(r))
		}
		return median(ds)
	}
	clientMany, clientOne := pick(many, func(r result) time.Duration { return r.client }), pick(one, func(r result) time.Duration { return r.client })
	adminMany, adminOne := pick(many, func(r result) time.Duration { return r.admin }), pick(one, func(r result) time.Duration { return r.admin })
	worst := time.Duration(0)
	for _, r := range many {
		worst = max(worst, r.client)
	}
	s.add(row{Measure: measure, Figure: ms(clientMany), Ref: "1 session: " + ms(clientOne), Ratio: ratio(float64(clientMany), float64(clientOne)),
		Goal: "< 100 ms, every round", Status: verdict(clientMany < 100*time.Millisecond && worst < 100*time.Millisecond)})
	s.add(row{Measure: fmt.Sprintf("%d live console sessions, the admin call's own duration", sessions), Figure: ms(adminMany),
		Ref: "1 session: " + ms(adminOne), Ratio: ratio(float64(adminMany), float64(adminOne)), Status: statusNone})
	s.note("Where the time goes: each cut session writes its session.end audit row before its channel closes; the cut sessions' rows share commits (group commit in db), so 100 sessions cost a few synced SQLite transactions, not 100 (1 session: %s).", ms(clientOne))
	s.note("obmd in-process on SQLite; %d console sessions (x/crypto, pty + shell, reading) on one sim node; t0 = the admin request sent; client-observed = the last session's end seen by its client; every cut session was told why on stderr. Median of %d rounds (worst: %s).",
		sessions, rounds, ms(worst))
	return s
}
