//go:build !race

package client_test

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
