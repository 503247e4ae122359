//go:build race

package main

// raceEnabled builds the obmd binary under test with -race too.
const raceEnabled = true
