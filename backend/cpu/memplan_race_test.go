//go:build race

package cpu

// RaceEnabled is true under the race detector, which changes allocation
// behaviour (sync.Pool drops items), so allocation counts are not checked.
const RaceEnabled = true
