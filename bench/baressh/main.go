// Command baressh runs bench/bare as its own process, for the
// connection-rate benchmark.
//
// The benchmark reads its CPU time from /proc like obmd's and sshd's.
//
// The password is read from BARESSH_PASSWORD (never argv). It prints
// "listening ADDR" on stdout once it accepts connections on 127.0.0.1, and
// serves until killed or until its stdin closes (so it never outlives the
// bench).
package main

import (
	"fmt"
	"io"
	"net"
	"os"

	"github.com/obmd/obmd/bench/bare"
)

func main() {
	srv, err := bare.New(os.Getenv("BARESSH_PASSWORD"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "baressh: %v (set BARESSH_PASSWORD)\n", err)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "baressh: listen: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("listening %s\n", l.Addr())
	go func() { // ends the process when the bench (our parent) goes away
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if err := srv.Serve(l); err != nil {
		fmt.Fprintf(os.Stderr, "baressh: %v\n", err)
		os.Exit(1)
	}
}
