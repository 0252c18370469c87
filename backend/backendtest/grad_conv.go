package backendtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Finite-difference checks of the gradient rules of the convolutions, the
// pools and Resize/Upsample (graph/grad_conv.go), plus float32 runs compared
// with float64 (the float32 paths go through gemm.Sgemm), tie-breaking as
// PyTorch does it, and reproducibility of the parallel weight gradient.

// convGCInts makes an ints attribute.
func convGCInts(name string, v ...int64) *graph.Attr { return graph.IntsAttr(name, v...) }

func (kc checker) gradConvConv(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -1, 1, shape...) }
	ints, i, s := convGCInts, graph.IntAttr, graph.StringAttr
	cases := []gradCase{
		{name: "2D bias", op: "Conv", inputs: []*graph.Tensor{x(2, 3, 5, 5), x(4, 3, 3, 3), x(4)}, wrt: []int{0, 1, 2}},
		{name: "2D no bias pads", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 5, 4), x(3, 2, 3, 2)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{ints("pads", 1, 0, 1, 1)}},
		{name: "2D strides asymmetric pads", op: "Conv", inputs: []*graph.Tensor{x(2, 2, 7, 6), x(3, 2, 3, 3), x(3)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("strides", 2, 3), ints("pads", 0, 2, 1, 1)}},
		{name: "2D stride larger than kernel", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 7, 7), x(2, 2, 2, 2)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{ints("strides", 3, 3)}},
		{name: "2D dilations", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 7, 7), x(2, 2, 3, 2), x(2)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("dilations", 2, 3), ints("pads", 1, 1, 1, 1)}},
		{name: "2D groups", op: "Conv", inputs: []*graph.Tensor{x(2, 4, 5, 5), x(6, 2, 3, 3), x(6)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{i("group", 2), ints("pads", 1, 1, 1, 1)}},
		{name: "2D depthwise", op: "Conv", inputs: []*graph.Tensor{x(2, 3, 5, 5), x(3, 1, 3, 3), x(3)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{i("group", 3), ints("pads", 1, 1, 1, 1), ints("strides", 2, 2)}},
		{name: "2D depthwise dilated asymmetric pads", op: "Conv", inputs: []*graph.Tensor{x(2, 2, 6, 7), x(2, 1, 2, 3), x(2)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{i("group", 2), ints("pads", 0, 2, 1, 1), ints("dilations", 2, 2), ints("strides", 1, 2)}},
		{name: "2D depthwise multiplier", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 4, 4), x(4, 1, 2, 2)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{i("group", 2)}},
		{name: "2D pointwise", op: "Conv", inputs: []*graph.Tensor{x(2, 3, 3, 4), x(5, 3, 1, 1), x(5)}, wrt: []int{0, 1, 2}},
		{name: "2D pointwise groups", op: "Conv", inputs: []*graph.Tensor{x(2, 4, 3, 3), x(4, 2, 1, 1)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{i("group", 2)}},
		{name: "2D 1x1 stride 2", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 5, 5), x(3, 2, 1, 1)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{ints("strides", 2, 2)}},
		{name: "2D auto_pad SAME_UPPER", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 5, 6), x(2, 2, 4, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{s("auto_pad", "SAME_UPPER"), ints("strides", 2, 2)}},
		{name: "2D auto_pad SAME_LOWER", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 5, 5), x(2, 2, 4, 2)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{s("auto_pad", "SAME_LOWER")}},
		{name: "2D auto_pad VALID", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 6, 5), x(2, 2, 3, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{s("auto_pad", "VALID"), ints("strides", 2, 1)}},
		{name: "2D kernel_shape attribute", op: "Conv", inputs: []*graph.Tensor{x(1, 1, 4, 4), x(2, 1, 2, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{ints("kernel_shape", 2, 3)}},
		{name: "1D", op: "Conv", inputs: []*graph.Tensor{x(2, 3, 9), x(4, 3, 3), x(4)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("strides", 2), ints("pads", 2, 1)}},
		{name: "1D dilated groups", op: "Conv", inputs: []*graph.Tensor{x(1, 4, 10), x(2, 2, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{ints("dilations", 3), i("group", 2)}},
		{name: "1D depthwise", op: "Conv", inputs: []*graph.Tensor{x(2, 3, 6), x(3, 1, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{i("group", 3), ints("pads", 1, 1)}},
		{name: "3D", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 4, 4, 3), x(3, 2, 2, 3, 2), x(3)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("pads", 1, 0, 1, 0, 1, 0), ints("strides", 1, 2, 1)}},
		{name: "3D groups dilations", op: "Conv", inputs: []*graph.Tensor{x(1, 2, 5, 4, 4), x(2, 1, 2, 2, 2)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{i("group", 2), ints("dilations", 2, 1, 2)}},
		{name: "weight only", op: "Conv", inputs: []*graph.Tensor{x(2, 2, 4, 4), x(3, 2, 3, 3), x(3)}, wrt: []int{1}},
		{name: "input only", op: "Conv", inputs: []*graph.Tensor{x(2, 2, 4, 4), x(3, 2, 3, 3), x(3)}, wrt: []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc.runGradCheck(t, c)
			kc.convGCCompareFloat32(t, c)
		})
	}
}

func (kc checker) gradConvTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -1, 1, shape...) }
	ints, i, s := convGCInts, graph.IntAttr, graph.StringAttr
	cases := []gradCase{
		{name: "2D bias", op: "ConvTranspose", inputs: []*graph.Tensor{x(2, 3, 3, 3), x(3, 2, 3, 3), x(2)}, wrt: []int{0, 1, 2}},
		{name: "2D strides pads output_padding", op: "ConvTranspose", inputs: []*graph.Tensor{x(1, 2, 3, 4), x(2, 3, 3, 3), x(3)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("strides", 2, 2), ints("pads", 1, 0, 1, 1), ints("output_padding", 1, 0)}},
		{name: "2D groups", op: "ConvTranspose", inputs: []*graph.Tensor{x(2, 4, 3, 3), x(4, 3, 2, 2), x(6)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{i("group", 2), ints("strides", 2, 1)}},
		{name: "2D depthwise", op: "ConvTranspose", inputs: []*graph.Tensor{x(1, 3, 3, 3), x(3, 1, 3, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{i("group", 3), ints("strides", 2, 2), ints("pads", 1, 1, 1, 1)}},
		{name: "2D dilations", op: "ConvTranspose", inputs: []*graph.Tensor{x(1, 2, 3, 3), x(2, 2, 2, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{ints("dilations", 2, 2)}},
		{name: "2D output_shape", op: "ConvTranspose", inputs: []*graph.Tensor{x(1, 2, 3, 3), x(2, 2, 3, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{ints("strides", 2, 2), ints("output_shape", 8, 7)}},
		{name: "2D auto_pad SAME_UPPER", op: "ConvTranspose", inputs: []*graph.Tensor{x(1, 2, 3, 3), x(2, 1, 3, 2)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{s("auto_pad", "SAME_UPPER"), ints("strides", 2, 2)}},
		{name: "2D auto_pad SAME_LOWER", op: "ConvTranspose", inputs: []*graph.Tensor{x(1, 2, 3, 3), x(2, 1, 3, 2)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{s("auto_pad", "SAME_LOWER"), ints("strides", 2, 2)}},
		{name: "2D pointwise", op: "ConvTranspose", inputs: []*graph.Tensor{x(2, 3, 3, 2), x(3, 4, 1, 1), x(4)}, wrt: []int{0, 1, 2}},
		{name: "1D", op: "ConvTranspose", inputs: []*graph.Tensor{x(2, 2, 5), x(2, 3, 3), x(3)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("strides", 3), ints("pads", 1, 2)}},
		{name: "3D", op: "ConvTranspose", inputs: []*graph.Tensor{x(1, 2, 2, 3, 2), x(2, 2, 2, 2, 2), x(2)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("strides", 2, 1, 2)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc.runGradCheck(t, c)
			kc.convGCCompareFloat32(t, c)
		})
	}
}

func (kc checker) gradConvPool(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	ints, i, s := convGCInts, graph.IntAttr, graph.StringAttr
	k := func(v ...int64) *graph.Attr { return ints("kernel_shape", v...) }
	cases := []gradCase{
		{name: "MaxPool 2D", op: "MaxPool", inputs: []*graph.Tensor{x(2, 2, 4, 4)}, wrt: []int{0},
			attrs: []*graph.Attr{k(2, 2), ints("strides", 2, 2)}},
		{name: "MaxPool 2D overlapping", op: "MaxPool", inputs: []*graph.Tensor{x(1, 2, 5, 5)}, wrt: []int{0},
			attrs: []*graph.Attr{k(3, 3)}},
		{name: "MaxPool 2D pads ceil_mode", op: "MaxPool", inputs: []*graph.Tensor{x(1, 2, 6, 5)}, wrt: []int{0},
			attrs: []*graph.Attr{k(3, 3), ints("strides", 2, 2), ints("pads", 1, 1, 1, 1), i("ceil_mode", 1)}},
		{name: "MaxPool 2D dilations", op: "MaxPool", inputs: []*graph.Tensor{x(1, 1, 7, 7)}, wrt: []int{0},
			attrs: []*graph.Attr{k(2, 3), ints("dilations", 2, 2), ints("strides", 1, 2)}},
		{name: "MaxPool 2D SAME_UPPER", op: "MaxPool", inputs: []*graph.Tensor{x(1, 2, 5, 5)}, wrt: []int{0},
			attrs: []*graph.Attr{k(2, 2), ints("strides", 2, 2), s("auto_pad", "SAME_UPPER")}},
		{name: "MaxPool 1D", op: "MaxPool", inputs: []*graph.Tensor{x(2, 3, 9)}, wrt: []int{0},
			attrs: []*graph.Attr{k(3), ints("strides", 2), ints("pads", 1, 1)}},
		{name: "MaxPool 3D", op: "MaxPool", inputs: []*graph.Tensor{x(1, 2, 4, 4, 4)}, wrt: []int{0},
			attrs: []*graph.Attr{k(2, 2, 2), ints("strides", 2, 1, 2)}},
		{name: "MaxPool Indices", op: "MaxPool", inputs: []*graph.Tensor{x(2, 2, 5, 5)}, wrt: []int{0}, outputs: 2,
			attrs: []*graph.Attr{k(3, 3), ints("strides", 2, 2), ints("pads", 1, 1, 1, 1)}},
		{name: "MaxPool Indices storage_order", op: "MaxPool", inputs: []*graph.Tensor{x(2, 2, 5, 4)}, wrt: []int{0}, outputs: 2,
			attrs: []*graph.Attr{k(2, 2), i("storage_order", 1), ints("pads", 0, 0, 1, 1)}},
		{name: "MaxPool Indices 3D ceil_mode", op: "MaxPool", inputs: []*graph.Tensor{x(1, 2, 3, 5, 4)}, wrt: []int{0}, outputs: 2,
			attrs: []*graph.Attr{k(2, 2, 2), ints("strides", 2, 2, 2), i("ceil_mode", 1), i("storage_order", 1)}},

		{name: "AveragePool 2D", op: "AveragePool", inputs: []*graph.Tensor{x(2, 2, 4, 4)}, wrt: []int{0},
			attrs: []*graph.Attr{k(2, 2), ints("strides", 2, 2)}},
		{name: "AveragePool 2D pads exclude", op: "AveragePool", inputs: []*graph.Tensor{x(1, 2, 5, 5)}, wrt: []int{0},
			attrs: []*graph.Attr{k(3, 3), ints("strides", 2, 2), ints("pads", 1, 1, 1, 1)}},
		{name: "AveragePool 2D pads include", op: "AveragePool", inputs: []*graph.Tensor{x(1, 2, 5, 5)}, wrt: []int{0},
			attrs: []*graph.Attr{k(3, 3), ints("strides", 2, 2), ints("pads", 1, 1, 1, 1), i("count_include_pad", 1)}},
		{name: "AveragePool ceil_mode include", op: "AveragePool", inputs: []*graph.Tensor{x(1, 1, 6, 6)}, wrt: []int{0},
			attrs: []*graph.Attr{k(3, 3), ints("strides", 2, 2), ints("pads", 1, 1, 1, 1), i("ceil_mode", 1), i("count_include_pad", 1)}},
		{name: "AveragePool ceil_mode exclude", op: "AveragePool", inputs: []*graph.Tensor{x(1, 1, 6, 7)}, wrt: []int{0},
			attrs: []*graph.Attr{k(3, 2), ints("strides", 2, 2), i("ceil_mode", 1)}},
		{name: "AveragePool SAME_LOWER", op: "AveragePool", inputs: []*graph.Tensor{x(1, 2, 5, 5)}, wrt: []int{0},
			attrs: []*graph.Attr{k(2, 3), s("auto_pad", "SAME_LOWER"), i("count_include_pad", 1)}},
		{name: "AveragePool 1D", op: "AveragePool", inputs: []*graph.Tensor{x(2, 2, 7)}, wrt: []int{0},
			attrs: []*graph.Attr{k(3), ints("pads", 2, 1)}},
		{name: "AveragePool 3D", op: "AveragePool", inputs: []*graph.Tensor{x(1, 2, 4, 3, 4)}, wrt: []int{0},
			attrs: []*graph.Attr{k(2, 2, 2), ints("strides", 2, 1, 2), ints("pads", 1, 0, 0, 0, 1, 1)}},
		{name: "AveragePool dilations", op: "AveragePool", inputs: []*graph.Tensor{x(1, 1, 7, 7)}, wrt: []int{0}, opset: 19,
			attrs: []*graph.Attr{k(2, 2), ints("dilations", 2, 3)}},

		{name: "GlobalAveragePool 2D", op: "GlobalAveragePool", inputs: []*graph.Tensor{x(2, 3, 4, 5)}, wrt: []int{0}},
		{name: "GlobalAveragePool 1D", op: "GlobalAveragePool", inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}},
		{name: "GlobalMaxPool 2D", op: "GlobalMaxPool", inputs: []*graph.Tensor{x(2, 3, 4, 5)}, wrt: []int{0}},
		{name: "GlobalMaxPool 3D", op: "GlobalMaxPool", inputs: []*graph.Tensor{x(1, 2, 2, 3, 2)}, wrt: []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc.runGradCheck(t, c)
			kc.convGCCompareFloat32(t, c)
		})
	}
}

func (kc checker) gradConvResize(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	sc := func(v ...float32) *graph.Tensor { return graph.FromFloat32(v, len(v)) }
	sz := func(v ...int64) *graph.Tensor { return graph.FromInt64(v, len(v)) }
	emptyRoi := graph.FromFloat32(nil, 0)
	str, f, i := graph.StringAttr, graph.FloatAttr, graph.IntAttr
	mode := func(m, coord string, more ...*graph.Attr) []*graph.Attr {
		return append([]*graph.Attr{str("mode", m), str("coordinate_transformation_mode", coord)}, more...)
	}
	cases := []gradCase{
		// F.interpolate(mode="nearest") exports asymmetric + floor.
		{name: "nearest asymmetric floor x2", op: "Resize", inputs: []*graph.Tensor{x(1, 2, 3, 3), nil, sc(1, 1, 2, 2)}, wrt: []int{0},
			attrs: mode("nearest", "asymmetric", str("nearest_mode", "floor"))},
		{name: "nearest asymmetric floor sizes", op: "Resize", inputs: []*graph.Tensor{x(2, 1, 3, 4), nil, nil, sz(2, 1, 5, 7)}, wrt: []int{0},
			attrs: mode("nearest", "asymmetric", str("nearest_mode", "floor"))},
		{name: "nearest half_pixel round_prefer_floor", op: "Resize", inputs: []*graph.Tensor{x(1, 2, 4, 3), nil, sc(1, 1, 1.5, 2.5)}, wrt: []int{0},
			attrs: mode("nearest", "half_pixel")},
		{name: "nearest round_prefer_ceil downsample", op: "Resize", inputs: []*graph.Tensor{x(1, 1, 6, 5), nil, nil, sz(1, 1, 4, 2)}, wrt: []int{0},
			attrs: mode("nearest", "asymmetric", str("nearest_mode", "round_prefer_ceil"))},
		{name: "nearest align_corners ceil", op: "Resize", inputs: []*graph.Tensor{x(1, 1, 3, 4), nil, nil, sz(1, 1, 5, 6)}, wrt: []int{0},
			attrs: mode("nearest", "align_corners", str("nearest_mode", "ceil"))},
		{name: "linear half_pixel x2", op: "Resize", inputs: []*graph.Tensor{x(1, 2, 3, 3), nil, sc(1, 1, 2, 2)}, wrt: []int{0},
			attrs: mode("linear", "half_pixel")},
		{name: "linear pytorch_half_pixel sizes", op: "Resize", inputs: []*graph.Tensor{x(2, 1, 4, 3), nil, nil, sz(2, 1, 7, 1)}, wrt: []int{0},
			attrs: mode("linear", "pytorch_half_pixel")},
		{name: "linear align_corners", op: "Resize", inputs: []*graph.Tensor{x(1, 2, 3, 4), nil, nil, sz(1, 2, 5, 7)}, wrt: []int{0},
			attrs: mode("linear", "align_corners")},
		{name: "linear asymmetric fractional", op: "Resize", inputs: []*graph.Tensor{x(1, 1, 4, 5), nil, sc(1, 1, 1.7, 0.6)}, wrt: []int{0},
			attrs: mode("linear", "asymmetric")},
		{name: "linear half_pixel downsample", op: "Resize", inputs: []*graph.Tensor{x(1, 2, 7, 6), nil, nil, sz(1, 2, 3, 4)}, wrt: []int{0},
			attrs: mode("linear", "half_pixel")},
		{name: "linear opset 11 empty roi", op: "Resize", inputs: []*graph.Tensor{x(1, 1, 3, 3), emptyRoi, sc(1, 1, 2, 1.5)}, wrt: []int{0}, opset: 11,
			attrs: mode("linear", "align_corners")},
		{name: "cubic align_corners", op: "Resize", inputs: []*graph.Tensor{x(1, 1, 4, 4), nil, nil, sz(1, 1, 6, 7)}, wrt: []int{0},
			attrs: mode("cubic", "align_corners")},
		{name: "cubic half_pixel exclude_outside", op: "Resize", inputs: []*graph.Tensor{x(1, 1, 4, 5), nil, sc(1, 1, 1.5, 2)}, wrt: []int{0},
			attrs: mode("cubic", "half_pixel", i("exclude_outside", 1), f("cubic_coeff_a", -0.5))},
		{name: "linear antialias", op: "Resize", inputs: []*graph.Tensor{x(1, 1, 8, 7), nil, nil, sz(1, 1, 3, 4)}, wrt: []int{0}, opset: 18,
			attrs: mode("linear", "half_pixel", i("antialias", 1))},
		{name: "linear axes", op: "Resize", inputs: []*graph.Tensor{x(1, 2, 3, 4), nil, sc(2, 0.5)}, wrt: []int{0}, opset: 18,
			attrs: mode("linear", "half_pixel", graph.IntsAttr("axes", -2, 3))},
		{name: "tf_crop_and_resize", op: "Resize", inputs: []*graph.Tensor{x(1, 1, 4, 4), sc(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3), nil, sz(1, 1, 5, 5)}, wrt: []int{0},
			attrs: mode("linear", "tf_crop_and_resize", f("extrapolation_value", 3))},
		{name: "Resize opset 10 nearest", op: "Resize", inputs: []*graph.Tensor{x(1, 2, 3, 3), sc(1, 1, 2, 1.5)}, wrt: []int{0}, opset: 10,
			attrs: []*graph.Attr{str("mode", "nearest")}},
		{name: "Resize opset 10 linear", op: "Resize", inputs: []*graph.Tensor{x(1, 2, 3, 3), sc(1, 1, 2, 0.7)}, wrt: []int{0}, opset: 10,
			attrs: []*graph.Attr{str("mode", "linear")}},
		{name: "Upsample opset 9 nearest", op: "Upsample", inputs: []*graph.Tensor{x(1, 2, 3, 2), sc(1, 1, 2, 3)}, wrt: []int{0}, opset: 9},
		{name: "Upsample opset 9 linear", op: "Upsample", inputs: []*graph.Tensor{x(1, 2, 3, 2), sc(1, 1, 2, 2.5)}, wrt: []int{0}, opset: 9,
			attrs: []*graph.Attr{str("mode", "linear")}},
		{name: "Upsample opset 7 attribute", op: "Upsample", inputs: []*graph.Tensor{x(1, 1, 2, 3)}, wrt: []int{0}, opset: 7,
			attrs: []*graph.Attr{str("mode", "bilinear"), &graph.Attr{Name: "scales", Type: graph.AttrFloats, Floats: []float32{1, 1, 2, 2}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc.runGradCheck(t, c)
			kc.convGCCompareFloat32(t, c)
		})
	}
}

// gradConvGridSample checks GridSample's gradients with respect to its
// input and its grid, which autodiff takes through the op's lowering.
func (kc checker) gradConvGridSample(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	grid := func(shape ...int) *graph.Tensor { return Rand64(r, -1.3, 1.3, shape...) }
	str, i := graph.StringAttr, graph.IntAttr
	cases := []gradCase{
		{name: "linear zeros", inputs: []*graph.Tensor{x(2, 2, 3, 4), grid(2, 3, 2, 2)}, attrs: []*graph.Attr{str("mode", "linear")}},
		{name: "linear border align_corners", inputs: []*graph.Tensor{x(1, 2, 4, 3), grid(1, 2, 3, 2)}, attrs: []*graph.Attr{str("mode", "linear"), str("padding_mode", "border"), i("align_corners", 1)}},
		{name: "cubic reflection", inputs: []*graph.Tensor{x(1, 1, 4, 5), grid(1, 3, 3, 2)}, attrs: []*graph.Attr{str("mode", "cubic"), str("padding_mode", "reflection")}},
		{name: "nearest zeros", inputs: []*graph.Tensor{x(1, 2, 3, 3), grid(1, 2, 2, 2)}, attrs: []*graph.Attr{str("mode", "nearest")}},
		{name: "linear reflection 3-D", inputs: []*graph.Tensor{x(1, 1, 2, 3, 4), grid(1, 2, 2, 1, 3)}, attrs: []*graph.Attr{str("mode", "linear"), str("padding_mode", "reflection")}},
	}
	for _, c := range cases {
		c.op, c.wrt, c.opset, c.lower = "GridSample", []int{0, 1}, 20, true
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

// gradConvRoiAlign checks RoiAlign's gradients (sampling_ratio > 0) with
// respect to its input and its regions, taken through the op's lowering.
func (kc checker) gradConvRoiAlign(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	x := Rand64(r, -2, 2, 2, 2, 5, 6)
	rois := graph.FromFloat64([]float64{0.3, 0.6, 4.2, 3.7, -1.4, 1.1, 2.8, 5.9, 2.2, 0.4, 5.6, 2.9}, 3, 4)
	bi := graph.FromInt64([]int64{1, 0, 1}, 3)
	str, i := graph.StringAttr, graph.IntAttr
	for _, mode := range []string{"avg", "max"} {
		c := gradCase{name: mode, op: "RoiAlign", inputs: []*graph.Tensor{x, rois, bi}, wrt: []int{0, 1}, opset: 16, lower: true,
			attrs: []*graph.Attr{str("mode", mode), i("sampling_ratio", 2), i("output_height", 2), i("output_width", 3), graph.FloatAttr("spatial_scale", 0.9)}}
		t.Run(mode, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

// gradConvMaxPoolTies checks that a window's gradient goes to its
// first maximum, as PyTorch's max_pool backward does: on a constant input
// every 2x2 window (stride 1) picks its top-left element.
func (kc checker) gradConvMaxPoolTies(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("indices=%v", named), func(t *testing.T) {
			x := graph.Zeros(graph.Float64, 1, 1, 3, 4)
			for i := range x.Float64s() {
				x.Float64s()[i] = 1
			}
			outputs := 1
			if named {
				outputs = 2
			}
			c := gradCase{name: "ties", op: "MaxPool", inputs: []*graph.Tensor{x}, wrt: []int{0}, outputs: outputs,
				attrs: []*graph.Attr{convGCInts("kernel_shape", 2, 2)}}
			grads := kc.convGCGrads(t, c, graph.Float64, false)
			want := []float64{
				1, 1, 1, 0,
				1, 1, 1, 0,
				0, 0, 0, 0,
			}
			assert.Equal(t, want, grads[0].Float64s())
		})
	}
	t.Run("GlobalMaxPool", func(t *testing.T) {
		x := graph.FromFloat64([]float64{0, 2, 1, 2, 2, -1}, 1, 1, 2, 3)
		c := gradCase{name: "global ties", op: "GlobalMaxPool", inputs: []*graph.Tensor{x}, wrt: []int{0}}
		grads := kc.convGCGrads(t, c, graph.Float64, false)
		assert.Equal(t, []float64{0, 1, 0, 0, 0, 0}, grads[0].Float64s())
	})
}

// gradConvLarge runs Conv and ConvTranspose gradients big enough for the
// kernels to tile their im2col buffers and spread images over goroutines:
// in float32 against float64, with finite differences on the weights of the
// cases whose weight gradient sums per-goroutine partials, and checking that
// repeated float32 runs agree bit for bit.
func (kc checker) gradConvLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -1, 1, shape...) }
	ints, i := convGCInts, graph.IntAttr
	cases := []struct {
		gradCase
		checkWeights bool
	}{
		{gradCase{name: "Conv tiled", op: "Conv", inputs: []*graph.Tensor{x(2, 64, 32, 32), x(8, 64, 3, 3), x(8)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("pads", 1, 1, 1, 1)}}, false},
		{gradCase{name: "Conv batch parallel", op: "Conv", inputs: []*graph.Tensor{x(8, 8, 12, 12), x(6, 8, 3, 3), x(6)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("pads", 1, 1, 1, 1), ints("strides", 1, 2)}}, true},
		{gradCase{name: "Conv depthwise parallel", op: "Conv", inputs: []*graph.Tensor{x(8, 16, 12, 12), x(16, 1, 3, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{i("group", 16), ints("pads", 1, 1, 1, 1)}}, true},
		{gradCase{name: "Conv pointwise parallel", op: "Conv", inputs: []*graph.Tensor{x(8, 16, 8, 8), x(24, 16, 1, 1)}, wrt: []int{0, 1}}, true},
		{gradCase{name: "ConvTranspose parallel", op: "ConvTranspose", inputs: []*graph.Tensor{x(8, 8, 8, 8), x(8, 4, 4, 4), x(4)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{ints("strides", 2, 2), ints("pads", 1, 1, 1, 1)}}, true},
		{gradCase{name: "ConvTranspose tiled", op: "ConvTranspose", inputs: []*graph.Tensor{x(2, 16, 64, 64), x(16, 32, 3, 3)}, wrt: []int{0, 1},
			attrs: []*graph.Attr{ints("pads", 1, 1, 1, 1)}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc.convGCCompareFloat32(t, c.gradCase)
			if c.checkWeights {
				w := c.gradCase
				w.wrt = []int{1}
				kc.runGradCheck(t, w)
			}
			a := kc.convGCGrads(t, c.gradCase, graph.Float32, false)
			b := kc.convGCGrads(t, c.gradCase, graph.Float32, false)
			for k := range a {
				assert.Equal(t, a[k].Float32s(), b[k].Float32s(), "gradient %d differs between runs", k)
			}
		})
	}
}

// gradConvErrors checks that the backward kernels reject a gradient of
// the wrong shape with an error naming the node.
func (kc checker) gradConvErrors(t *testing.T) {
	g := graph.NewGraph("bad")
	g.Inputs = []*graph.ValueInfo{{Name: "dy"}}
	g.Initializers["w"] = graph.Zeros(graph.Float32, 2, 1, 3, 3)
	g.Initializers["xs"] = graph.FromInt64([]int64{1, 1, 5, 5}, 4)
	g.Nodes = []*graph.Node{{Name: "bwd", OpType: "ConvBackwardData", Domain: graph.InternalDomain,
		Inputs: []string{"dy", "w", "xs"}, Outputs: []string{"dx"}}}
	g.Outputs = []*graph.ValueInfo{{Name: "dx"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
	b, err := backend.Open(kc.backend)
	require.NoError(t, err)
	exe, err := b.Compile(m, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	_, err = exe.Run(context.Background(), map[string]*graph.Tensor{"dy": graph.Zeros(graph.Float32, 1, 2, 4, 4)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bwd")
	assert.Contains(t, err.Error(), "[1 2 3 3]")
}

// convGCGrads builds out = op(inputs), loss = Σ out·R (R fixed random, one
// per loss output) in dtype d and returns the gradients of the wrt inputs.
// With fixedR the weights R are random values exactly representable in
// float32 (so float32 and float64 runs see the same loss); otherwise ones.
func (kc checker) convGCGrads(t *testing.T, c gradCase, d graph.DType, fixedR bool) []*graph.Tensor {
	t.Helper()
	r := rand.New(rand.NewPCG(31, 32))
	opset := c.opset
	if opset == 0 {
		opset = 17
	}
	g := graph.NewGraph(c.name)
	node := &graph.Node{Name: "op", OpType: c.op}
	for _, a := range c.attrs {
		node.SetAttr(a)
	}
	feeds := map[string]*graph.Tensor{}
	conv := func(in *graph.Tensor) *graph.Tensor {
		if in.DType != graph.Float64 || d == graph.Float64 {
			return in
		}
		out := graph.Zeros(d, in.Shape...)
		for i, v := range in.Float64s() {
			out.SetFloat(i, v)
		}
		return out
	}
	var xs []string
	for i, in := range c.inputs {
		if in == nil {
			node.Inputs = append(node.Inputs, "")
			continue
		}
		name := fmt.Sprintf("in%d", i)
		node.Inputs = append(node.Inputs, name)
		wrt := false
		for _, w := range c.wrt {
			wrt = wrt || w == i
		}
		if wrt {
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: d}})
			feeds[name] = conv(in)
			xs = append(xs, name)
		} else {
			g.Initializers[name] = conv(in)
		}
	}
	nout := max(c.outputs, 1)
	for k := 0; k < nout; k++ {
		node.Outputs = append(node.Outputs, fmt.Sprintf("out%d", k))
	}
	g.Nodes = append(g.Nodes, node)
	g.Outputs = []*graph.ValueInfo{{Name: "out0"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": opset}, Graph: g}
	b, err := backend.Open(kc.backend)
	require.NoError(t, err)
	exe, err := b.Compile(m, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	outs, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	shape := outs["out0"].Shape
	rk := graph.Zeros(d, shape...)
	for i := 0; i < rk.Size(); i++ {
		v := float64(float32(r.Float64()*2 - 1))
		if !fixedR {
			v = 1
		}
		rk.SetFloat(i, v)
	}
	g.Initializers["R"] = rk
	g.Nodes = append(g.Nodes,
		&graph.Node{Name: "prod", OpType: "Mul", Inputs: []string{"out0", "R"}, Outputs: []string{"prod"}},
		&graph.Node{Name: "loss", OpType: "ReduceSum", Inputs: []string{"prod"}, Outputs: []string{"loss"},
			Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}})
	grads, err := graph.Gradients(g, "loss", xs, "", opset)
	require.NoError(t, err)
	g.Outputs = nil
	for i, gname := range grads {
		name := fmt.Sprintf("grad%d", i)
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: name})
		g.Nodes = append(g.Nodes, &graph.Node{Name: "id" + name, OpType: "Identity", Inputs: []string{gname}, Outputs: []string{name}})
	}
	exe, err = b.Compile(m, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	res, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	out := make([]*graph.Tensor, len(grads))
	for i := range grads {
		out[i] = res[fmt.Sprintf("grad%d", i)]
		require.Equal(t, d, out[i].DType)
	}
	return out
}

// convGCCompareFloat32 computes a case's gradients in float32 and float64
// and checks that they agree to float32 accuracy.
func (kc checker) convGCCompareFloat32(t *testing.T, c gradCase) {
	t.Helper()
	want := kc.convGCGrads(t, c, graph.Float64, true)
	got := kc.convGCGrads(t, c, graph.Float32, true)
	require.Len(t, got, len(want))
	for k := range want {
		require.Equal(t, want[k].Shape, got[k].Shape)
		scale := 0.0
		for i := 0; i < want[k].Size(); i++ {
			scale = math.Max(scale, math.Abs(want[k].Float(i)))
		}
		bad := 0
		for i := 0; i < want[k].Size(); i++ {
			if d := math.Abs(got[k].Float(i) - want[k].Float(i)); d > 1e-4*(1+scale) {
				if bad < 5 {
					t.Errorf("%s: float32 gradient %d[%d] = %g, float64 %g", c.name, k, i, got[k].Float(i), want[k].Float(i))
				}
				bad++
			}
		}
	}
}
