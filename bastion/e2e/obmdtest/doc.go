// Package obmdtest is the end-to-end tests' harness: an obmd to start, its clients, console buffers and waits.
//
// Start runs a whole obmd in the test's process on 127.0.0.1:0 and
// returns a Daemon that talks to it through its admin HTTP API,
// golang.org/x/crypto/ssh and the real OpenSSH client (SSHPTY, OpenSSH,
// SSHNoPTY). Buffer and End follow what a client shows and when it ends;
// WaitUntil and PrintUntilSeen wait within Timeout. Binary builds cmd/obmd
// once per test binary for the tests that run it as a process
// (StartReplica, Cluster); Main, called by each e2e package's TestMain,
// removes it when the tests end.
package obmdtest
