//go:build unix

package daemon

import "syscall"

// openFileLimit is the process's soft RLIMIT_NOFILE (cmd/obmd raises it to
// the hard limit first), or 1024 if it cannot be read.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return r.Cur
}
