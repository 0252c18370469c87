package control

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

func TestQuantizeLinearRoundsHalfToEvenAndSaturates(t *testing.T) {
	x := graph.FromFloat32([]float32{2.5, 3.5, -2.5, 1000, -1000}, 5)
	scale := graph.Scalar(graph.Float32, 1)
	zp := &graph.Tensor{DType: graph.Int8, Shape: []int{}, Data: []int8{0}}
	out := mustRun(t, 13, node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}), x, scale, zp)
	assert.Equal(t, []int8{2, 4, -2, 127, -128}, out[0].Data)

	// No zero point: uint8.
	out = mustRun(t, 13, node("QuantizeLinear", []string{"x", "s"}, []string{"y"}), x, scale)
	assert.Equal(t, []uint8{2, 4, 0, 255, 0}, out[0].Data)
}

func TestQuantizeDequantizeBlocked(t *testing.T) {
	// x [2,4], blocks of 2 along axis 1: scale [2,2].
	x := graph.FromFloat32([]float32{1, 2, 30, 40, -1, -2, 3, 4}, 2, 4)
	scale := graph.FromFloat32([]float32{1, 10, 0.5, 2}, 2, 2)
	n := node("QuantizeLinear", []string{"x", "s"}, []string{"y"}, graph.IntAttr("axis", 1), graph.IntAttr("block_size", 2))
	n.SetAttr(graph.IntAttr("output_dtype", int64(graph.Int8)))
	out := mustRun(t, 21, n, x, scale)
	assert.Equal(t, []int8{1, 2, 3, 4, -2, -4, 2, 2}, out[0].Data)

	d := node("DequantizeLinear", []string{"x", "s"}, []string{"y"}, graph.IntAttr("axis", 1), graph.IntAttr("block_size", 2))
	back := mustRun(t, 21, d, out[0], scale)
	assert.Equal(t, []float32{1, 2, 30, 40, -1, -2, 4, 4}, back[0].Data)

	bad := graph.FromFloat32([]float32{1, 2, 3}, 3)
	_, err := run(t, 21, n, nil, x, bad)
	assert.ErrorContains(t, err, "blocked quantization")
}

func TestDequantizeLinearPerAxisHalfScale(t *testing.T) {
	x := &graph.Tensor{DType: graph.Uint8, Shape: []int{2, 2}, Data: []uint8{10, 20, 10, 20}}
	h := func(v float32) uint16 { return graph.Float32ToFloat16(v) }
	scale := &graph.Tensor{DType: graph.Float16, Shape: []int{2}, Data: []uint16{h(0.5), h(2)}}
	zp := &graph.Tensor{DType: graph.Uint8, Shape: []int{2}, Data: []uint8{10, 0}}
	out := mustRun(t, 19, node("DequantizeLinear", []string{"x", "s", "z"}, []string{"y"}, graph.IntAttr("axis", 0)), x, scale, zp)
	require.Equal(t, graph.Float16, out[0].DType, "the output takes the scale's dtype")
	got := make([]float64, 4)
	for i := range got {
		got[i] = out[0].Float(i)
	}
	assert.Equal(t, []float64{0, 5, 20, 40}, got)
}

// requantRef is saturate(round_half_even(v) + zp) for uint8.
func requantRef(v float64, zp int) uint8 {
	return uint8(math.Max(0, math.Min(255, math.RoundToEven(v)+float64(zp))))
}

func TestQLinearMatMulPerRowAndColumn(t *testing.T) {
	a := &graph.Tensor{DType: graph.Uint8, Shape: []int{2, 3}, Data: []uint8{10, 20, 30, 40, 50, 60}}
	b := &graph.Tensor{DType: graph.Uint8, Shape: []int{3, 2}, Data: []uint8{1, 2, 3, 4, 5, 6}}
	as := graph.FromFloat32([]float32{0.1, 0.2}, 2)
	azp := &graph.Tensor{DType: graph.Uint8, Shape: []int{2}, Data: []uint8{5, 7}}
	bs := graph.FromFloat32([]float32{0.5, 0.25}, 2)
	bzp := &graph.Tensor{DType: graph.Uint8, Shape: []int{2}, Data: []uint8{1, 0}}
	ys := graph.Scalar(graph.Float32, 0.3)
	yzp := &graph.Tensor{DType: graph.Uint8, Shape: []int{}, Data: []uint8{3}}
	out := mustRun(t, 21, node("QLinearMatMul", []string{"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, []string{"y"}), a, as, azp, b, bs, bzp, ys, yzp)
	av, bv := a.Data.([]uint8), b.Data.([]uint8)
	want := make([]uint8, 4)
	for i := 0; i < 2; i++ {
		for j := 0; j < 2; j++ {
			acc := 0
			for p := 0; p < 3; p++ {
				acc += (int(av[i*3+p]) - int(azp.Data.([]uint8)[i])) * (int(bv[p*2+j]) - int(bzp.Data.([]uint8)[j]))
			}
			mult := float64(as.Float32s()[i] * bs.Float32s()[j] / 0.3)
			want[i*2+j] = requantRef(float64(acc)*mult, 3)
		}
	}
	assert.Equal(t, []int{2, 2}, out[0].Shape)
	assert.Equal(t, want, out[0].Data)
}

func TestQLinearConvPaddedStridedGrouped(t *testing.T) {
	// x [1,2,4,4], w [2,1,3,3] with group 2, pads 1, strides 2.
	xv := make([]uint8, 32)
	for i := range xv {
		xv[i] = uint8(i * 7 % 50)
	}
	wv := make([]uint8, 18)
	for i := range wv {
		wv[i] = uint8(i*5%13 + 1)
	}
	x := &graph.Tensor{DType: graph.Uint8, Shape: []int{1, 2, 4, 4}, Data: xv}
	w := &graph.Tensor{DType: graph.Uint8, Shape: []int{2, 1, 3, 3}, Data: wv}
	xs, xzp := graph.Scalar(graph.Float32, 0.05), &graph.Tensor{DType: graph.Uint8, Shape: []int{}, Data: []uint8{4}}
	ws := graph.FromFloat32([]float32{0.1, 0.02}, 2)
	wzp := &graph.Tensor{DType: graph.Uint8, Shape: []int{2}, Data: []uint8{2, 3}}
	ys, yzp := graph.Scalar(graph.Float32, 0.04), &graph.Tensor{DType: graph.Uint8, Shape: []int{}, Data: []uint8{100}}
	bias := &graph.Tensor{DType: graph.Int32, Shape: []int{2}, Data: []int32{-50, 80}}
	n := node("QLinearConv", []string{"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, []string{"y"},
		graph.IntAttr("group", 2), graph.IntsAttr("pads", 1, 1, 1, 1), graph.IntsAttr("strides", 2, 2))
	out := mustRun(t, 10, n, x, xs, xzp, w, ws, wzp, ys, yzp, bias)
	require.Equal(t, []int{1, 2, 2, 2}, out[0].Shape)
	want := make([]uint8, 8)
	for m := 0; m < 2; m++ {
		for oy := 0; oy < 2; oy++ {
			for ox := 0; ox < 2; ox++ {
				acc := int(bias.Data.([]int32)[m])
				for ky := 0; ky < 3; ky++ {
					for kx := 0; kx < 3; kx++ {
						iy, ix := oy*2-1+ky, ox*2-1+kx
						if iy < 0 || iy >= 4 || ix < 0 || ix >= 4 {
							continue
						}
						acc += (int(xv[m*16+iy*4+ix]) - 4) * (int(wv[m*9+ky*3+kx]) - int(wzp.Data.([]uint8)[m]))
					}
				}
				mult := float64(float32(0.05) * ws.Float32s()[m] / float32(0.04))
				want[m*4+oy*2+ox] = requantRef(float64(acc)*mult, 100)
			}
		}
	}
	assert.Equal(t, want, out[0].Data)

	n.SetAttr(graph.IntAttr("group", 3))
	_, err := run(t, 10, n, nil, x, xs, xzp, w, ws, wzp, ys, yzp, bias)
	assert.ErrorContains(t, err, "group 3")
}

func TestDynamicQuantizeLinearAllZeros(t *testing.T) {
	out := mustRun(t, 11, node("DynamicQuantizeLinear", []string{"x"}, []string{"y", "s", "z"}), graph.FromFloat32([]float32{0, 0}, 2))
	assert.Equal(t, []uint8{0, 0}, out[0].Data)
	assert.False(t, math.IsNaN(out[1].Float(0)) || math.IsInf(out[1].Float(0), 0), "the scale stays finite")
}
