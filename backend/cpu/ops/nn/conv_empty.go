package nn

// convWithoutProducts handles a Conv with nothing to multiply: an empty
// output, or no input channels (or an empty kernel), where every output
// element is its channel's bias (zero without one). It reports whether it
// did; otherwise the products run as usual. y must be zero-filled.
func convWithoutProducts[T float32 | float64](cs *convShape, x, w, b, y []T) bool {
	if len(y) != 0 && len(x) != 0 && len(w) != 0 {
		return false
	}
	if len(b) == 0 || len(y) == 0 {
		return true
	}
	per := len(y) / (cs.n * cs.m) // output elements per (image, channel)
	for i := 0; i < cs.n; i++ {
		for m := 0; m < cs.m; m++ {
			row := y[(i*cs.m+m)*per : (i*cs.m+m+1)*per]
			for j := range row {
				row[j] = b[m]
			}
		}
	}
	return true
}
