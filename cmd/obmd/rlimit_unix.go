//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// raiseOpenFileLimit raises the soft RLIMIT_NOFILE to the hard limit (the
// Go runtime does so too on most systems; this makes it explicit, and says
// what obmd got). The daemon sizes its connection caps from the result.
func raiseOpenFileLimit() (soft, hard, was uint64, err error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, 0, 0, fmt.Errorf("read the open-file limit: %w", err)
	}
	was = r.Cur
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return was, r.Max, was, fmt.Errorf("raise the open-file limit to %d: %w", r.Max, err)
		}
	}
	return r.Cur, r.Max, was, nil
}
