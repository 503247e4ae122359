//go:build !unix

package daemon

// openFileLimit is a conservative figure where RLIMIT_NOFILE does not exist.
func openFileLimit() uint64 { return 1024 }
