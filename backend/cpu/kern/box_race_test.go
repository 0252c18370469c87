//go:build race

package kern

// raceEnabled reports whether the race detector is on (it changes
// allocation behaviour).
const raceEnabled = true
