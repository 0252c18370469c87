//go:build !amd64 || purego

package optimizer

// fmaAxpy32 sets y[i] = fma32(alpha, x[i], y[i]) for every i < len(y)
// (len(x) >= len(y)).
func fmaAxpy32(alpha float32, x, y []float32) { fmaAxpy32Go(alpha, x[:len(y)], y) }

// adamVec is the vector Adam's constants (amd64 only).
type adamVec struct {
	b1, b2, omb1, omb2, eps, negStep, bc2, decay, wd float32
	signmask                                         uint32
}

// adamVector updates nothing here: the Go loop does every element.
func adamVector(p, g, m, v []float32, c *adamVec, mode int) int { return 0 }

// sgdVec is the vector SGD's constants (amd64 only).
type sgdVec struct {
	m, damp, negLR, wd float32
	signmask           uint32
}

// sgdVector updates nothing here: the Go loop does every element.
func sgdVector(p, g, b []float32, c *sgdVec, mode int) int { return 0 }
