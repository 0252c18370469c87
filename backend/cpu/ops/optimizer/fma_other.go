//go:build !amd64 || purego

package optimizer

// fmaAxpy32 sets y[i] = fma32(alpha, x[i], y[i]) for every i < len(y)
// (len(x) >= len(y)).
func fmaAxpy32(alpha float32, x, y []float32) { fmaAxpy32Go(alpha, x[:len(y)], y) }
