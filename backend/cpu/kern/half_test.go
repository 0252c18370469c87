package kern

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/graph"
)

// The bulk conversions agree bit for bit with graph's one-value
// conversions (round to nearest even, subnormals, infinities, NaN,
// overflow), over random bits and the special values.
func TestHalfConversionsMatchGraph(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65520, 1e-8, 6e-8, -3e-5, 1e38, 3.4e38,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000)}
	for i := 0; i < 5000; i++ {
		f = append(f, math.Float32frombits(rng.Uint32()))
	}
	// Every float16 value, the midpoints (ties) between neighbours and
	// values just off them, on both signs: every rounding case of float16.
	for h := 0; h < 0x7c00; h++ {
		lo, hi := float64(graph.Float16ToFloat32(uint16(h))), float64(graph.Float16ToFloat32(uint16(h+1)))
		mid := float32((lo + hi) / 2)
		for _, v := range []float32{float32(lo), mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1)} {
			f = append(f, v, -v)
		}
	}
	h := make([]uint16, 0, 70000)
	for i := 0; i < 65536; i++ {
		h = append(h, uint16(i))
	}

	bf := make([]uint16, len(f))
	Float32sToBFloat16s(bf, f)
	fp := make([]uint16, len(f))
	Float32sToFloat16s(fp, f)
	for i, v := range f {
		assert.Equal(t, graph.Float32ToBFloat16(v), bf[i], "bfloat16 of %v (%#x)", v, math.Float32bits(v))
		assert.Equal(t, graph.Float32ToFloat16(v), fp[i], "float16 of %v", v)
		assert.Equal(t, bf[i], Float32ToHalfAt(graph.BFloat16, v))
		assert.Equal(t, fp[i], Float32ToHalfAt(graph.Float16, v))
	}
	wb := make([]float32, len(h))
	BFloat16sToFloat32s(wb, h)
	wf := make([]float32, len(h))
	Float16sToFloat32s(wf, h)
	for i, v := range h {
		assert.Equal(t, math.Float32bits(graph.BFloat16ToFloat32(v)), math.Float32bits(wb[i]), "bfloat16 %#x", v)
		assert.Equal(t, math.Float32bits(graph.Float16ToFloat32(v)), math.Float32bits(wf[i]), "float16 %#x", v)
		assert.Equal(t, math.Float32bits(wf[i]), math.Float32bits(HalfToFloat32At(graph.Float16, v)))
	}
}

// HalfAdapter converts half inputs for a float32 kernel and rounds its
// float32 outputs to the input's half type; without half inputs the kernel
// sees its inputs untouched.
func TestHalfAdapter(t *testing.T) {
	var seen []graph.DType
	double := HalfAdapter(func(_ *Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		seen = append(seen, in[0].DType)
		out := in[0].Clone()
		for i, v := range out.Float32s() {
			out.Float32s()[i] = 2 * v
		}
		return []*graph.Tensor{out, graph.FromInt64([]int64{7})}, nil
	})
	n := &graph.Node{Name: "double", OpType: "Double"}
	x := &graph.Tensor{DType: graph.BFloat16, Shape: []int{2}, Data: []uint16{graph.Float32ToBFloat16(1.5), graph.Float32ToBFloat16(-3)}}
	out, err := double(nil, n, []*graph.Tensor{x})
	assert.NoError(t, err)
	assert.Equal(t, []graph.DType{graph.Float32}, seen)
	assert.Equal(t, graph.BFloat16, out[0].DType)
	assert.Equal(t, []uint16{graph.Float32ToBFloat16(3), graph.Float32ToBFloat16(-6)}, out[0].Data)
	assert.Equal(t, graph.Int64, out[1].DType, "non-float outputs keep their type")
	out, err = double(nil, n, []*graph.Tensor{graph.FromFloat32([]float32{1})})
	assert.NoError(t, err)
	assert.Equal(t, []float32{2}, out[0].Float32s())

	_, err = HalfToFloat32(n, graph.FromFloat32([]float32{1}))
	assert.ErrorContains(t, err, "not float16 or bfloat16")
	_, err = Float32ToHalf(n, graph.FromFloat32([]float32{1}), graph.Int8)
	assert.ErrorContains(t, err, "cannot convert float32 to int8")
}

// Large tensors convert in parallel chunks, with the same bits.
func TestHalfConversionsInChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	n := 3<<15 + 7 // several chunks and a ragged end
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(rng.NormFloat64())
	}
	node := &graph.Node{Name: "convert"}
	for _, d := range []graph.DType{graph.BFloat16, graph.Float16} {
		h, err := Float32ToHalf(node, graph.FromFloat32(f, n), d)
		assert.NoError(t, err)
		back, err := HalfToFloat32(node, h)
		assert.NoError(t, err)
		for i, v := range f {
			if want := Float32ToHalfAt(d, v); h.Data.([]uint16)[i] != want || back.Float32s()[i] != HalfToFloat32At(d, want) {
				t.Fatalf("%v element %d: %#x/%v, want %#x", d, i, h.Data.([]uint16)[i], back.Float32s()[i], want)
			}
		}
	}
}
