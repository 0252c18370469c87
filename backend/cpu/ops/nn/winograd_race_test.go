//go:build race

package nn

// winoRaceEnabled reports whether the race detector is on (it changes
// allocation behaviour).
const winoRaceEnabled = true
