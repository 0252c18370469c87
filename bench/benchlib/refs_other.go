//go:build !linux

package benchlib

// newRefBuffers allocates the references' storage on the Go heap: release
// cannot hand it back, so the run's peak RSS includes it.
func newRefBuffers(gemmElems, triadElems int) (*refBuffers, error) {
	return &refBuffers{
		a: make([]float32, gemmElems), b: make([]float32, gemmElems), c: make([]float32, gemmElems),
		x: make([]float64, triadElems), y: make([]float64, triadElems), z: make([]float64, triadElems),
		release: func() {}, free: func() {},
	}, nil
}

// resetPeakRSS cannot reset the peak here.
func resetPeakRSS() bool { return false }
