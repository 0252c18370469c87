package graph

import "math"

// AllFinite reports whether every element of a float tensor is finite. A
// float initializer that is not (a causal attention mask of 0 and -inf,
// which PyTorch registers as a buffer and the export writes as an
// initializer like any parameter) is a constant, not a parameter: a
// gradient step would move its finite entries and leave -inf + anything =
// -inf, and PyTorch does not train it. The training program (one process)
// and the pipeline's partitioner both leave such initializers untrained.
func (t *Tensor) AllFinite() bool {
	switch d := t.Data.(type) {
	case []float32:
		for _, v := range d {
			if math.IsInf(float64(v), 0) || v != v {
				return false
			}
		}
	case []float64:
		for _, v := range d {
			if math.IsInf(v, 0) || v != v {
				return false
			}
		}
	default:
		for i := 0; i < t.Size(); i++ {
			if v := t.Float(i); math.IsInf(v, 0) || math.IsNaN(v) {
				return false
			}
		}
	}
	return true
}
