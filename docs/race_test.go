//go:build race

package docs

// raceEnabled builds the obmd binary under test with -race too.
const raceEnabled = true
