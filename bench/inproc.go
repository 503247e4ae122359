package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
)

// inproc is a whole obmd in this process, for the sections that drive the
// simulator (Inject, SetDelay) through the daemon's Lab.
type inproc struct {
	*daemon.Daemon
	cancel context.CancelFunc
	done   chan error
	logf   *os.File
}

// startInproc starts a daemon on SQLite in a fresh directory, logging at
// info level to a file (as the binary would), with no session limits and
// the per-source auth limit raised (every client comes from 127.0.0.1).
func startInproc(cfg benchConfig, name string) (*inproc, error) {
	dir, err := os.MkdirTemp(cfg.tmp, name+"-")
	if err != nil {
		return nil, err
	}
	token, err := randomHex(24)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "obmd.log"))
	if err != nil {
		return nil, err
	}
	log := logrus.New()
	log.SetOutput(logf)
	log.SetFormatter(&logrus.JSONFormatter{})
	log.SetLevel(logrus.InfoLevel)
	dcfg := daemon.Config{Version: "bench", AuthLimits: authlimit.Config{PerSource: benchPerSource}}
	dcfg.SSH.Addr, dcfg.Admin.Addr, dcfg.Daemon.StateDir = "127.0.0.1:0", "127.0.0.1:0", filepath.Join(dir, "state")
	dcfg.Admin.Token, dcfg.Sessions.MaxPerNode, dcfg.Sessions.MaxPerSource, dcfg.SSH.MaxConnsPerSource = token, -1, -1, -1
	d, err := daemon.New(dcfg, log)
	if err != nil {
		logf.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		cancel()
		logf.Close()
		return nil, err
	}
	p := &inproc{Daemon: d, cancel: cancel, done: make(chan error, 1), logf: logf}
	go func() { p.done <- d.Run(ctx) }() // waited for by Stop
	return p, nil
}

func (p *inproc) admin() admin {
	return admin{p.AdminAddr(), p.AdminToken(), &http.Client{Timeout: 30 * time.Second}}
}

// Stop shuts the daemon down and waits (bounded).
func (p *inproc) Stop() error {
	p.cancel()
	defer p.logf.Close()
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("daemon did not stop within 30 s")
	}
}
