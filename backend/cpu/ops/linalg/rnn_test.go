package linalg

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func sigm(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// refParams are one direction's weights, read from the node inputs.
type refParams struct {
	w, r     [][]float64 // [gates*hid][input], [gates*hid][hid]
	wb, rb   []float64   // [gates*hid]
	p        []float64   // [3*hid]
	lbr      bool
	inForget bool
	clip     float64
}

func clipped(v, c float64) float64 {
	if c > 0 {
		return math.Max(-c, math.Min(c, v))
	}
	return v
}

// refRecurrence runs one sequence forward with the default activations,
// straight from the equations in the ONNX spec.
func refRecurrence(kind rnnKind, p refParams, xs [][]float64, h, c []float64) (ys [][]float64, hOut, cOut []float64) {
	hid := len(h)
	h = append([]float64{}, h...)
	c = append([]float64{}, c...)
	row := func(m [][]float64, gate, j int, v []float64) float64 {
		s := 0.0
		for q, x := range v {
			s += m[gate*hid+j][q] * x
		}
		return s
	}
	for _, x := range xs {
		nh := make([]float64, hid)
		switch kind {
		case rnnPlain:
			for j := range nh {
				nh[j] = math.Tanh(clipped(row(p.w, 0, j, x)+row(p.r, 0, j, h)+p.wb[j]+p.rb[j], p.clip))
			}
		case rnnGRU:
			z, r := make([]float64, hid), make([]float64, hid)
			for j := 0; j < hid; j++ {
				z[j] = sigm(clipped(row(p.w, 0, j, x)+row(p.r, 0, j, h)+p.wb[j]+p.rb[j], p.clip))
				r[j] = sigm(clipped(row(p.w, 1, j, x)+row(p.r, 1, j, h)+p.wb[hid+j]+p.rb[hid+j], p.clip))
			}
			rh := make([]float64, hid)
			for j := range rh {
				rh[j] = r[j] * h[j]
			}
			for j := 0; j < hid; j++ {
				var pre float64
				if p.lbr {
					pre = row(p.w, 2, j, x) + r[j]*(row(p.r, 2, j, h)+p.rb[2*hid+j]) + p.wb[2*hid+j]
				} else {
					pre = row(p.w, 2, j, x) + row(p.r, 2, j, rh) + p.rb[2*hid+j] + p.wb[2*hid+j]
				}
				hh := math.Tanh(clipped(pre, p.clip))
				nh[j] = (1-z[j])*hh + z[j]*h[j]
			}
		case rnnLSTM:
			nc := make([]float64, hid)
			for j := 0; j < hid; j++ {
				pre := func(g int) float64 {
					return row(p.w, g, j, x) + row(p.r, g, j, h) + p.wb[g*hid+j] + p.rb[g*hid+j]
				}
				i := sigm(clipped(pre(0)+p.p[j]*c[j], p.clip))
				f := sigm(clipped(pre(2)+p.p[2*hid+j]*c[j], p.clip))
				if p.inForget {
					f = 1 - i
				}
				cc := math.Tanh(clipped(pre(3), p.clip))
				nc[j] = f*c[j] + i*cc
				o := sigm(clipped(pre(1)+p.p[hid+j]*nc[j], p.clip))
				nh[j] = o * math.Tanh(nc[j])
			}
			c = nc
		}
		h = nh
		ys = append(ys, h)
	}
	return ys, h, c
}

func TestRecurrentAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const seq, batch, input, hid = 4, 3, 3, 2
	lens := []int64{4, 2, 0}
	for _, kind := range []rnnKind{rnnPlain, rnnGRU, rnnLSTM} {
		for _, layout := range []int{0, 1} {
			for _, variant := range []int{0, 1} {
				op := [...]string{"RNN", "GRU", "LSTM"}[kind]
				g := kind.gates()
				const dirs = 2
				x := randF32(r, seq, batch, input)
				w, rr, b := randF32(r, dirs, g*hid, input), randF32(r, dirs, g*hid, hid), randF32(r, dirs, 2*g*hid)
				h0, c0, p := randF32(r, dirs, batch, hid), randF32(r, dirs, batch, hid), randF32(r, dirs, 3*hid)
				sl32, _ := graph.NewTensor(graph.Int32, []int{batch})
				for i, v := range lens {
					sl32.Data.([]int32)[i] = int32(v)
				}
				attrs := []*graph.Attr{
					graph.StringAttr("direction", "bidirectional"),
					graph.IntAttr("hidden_size", hid),
					graph.IntAttr("layout", int64(layout)),
				}
				clip := 0.0
				if variant == 1 {
					clip = 0.3
					attrs = append(attrs, graph.FloatAttr("clip", 0.3), graph.IntAttr("linear_before_reset", 1), graph.IntAttr("input_forget", 1))
				}
				xIn, h0In, c0In := x, h0, c0
				if layout == 1 {
					xIn = swapF32(x, seq, batch, input)
					h0In, c0In = swapF32(h0, dirs, batch, hid), swapF32(c0, dirs, batch, hid)
				}
				in := []*graph.Tensor{xIn, w, rr, b, sl32, h0In}
				if kind == rnnLSTM {
					in = append(in, c0In, p)
				}
				outs := run(t, recurrentKernel2(kind), node(op, attrs...), in...)
				y, yh := outs[0], outs[1]
				if layout == 1 {
					require.Equal(t, []int{batch, seq, dirs, hid}, y.Shape)
					require.Equal(t, []int{batch, dirs, hid}, yh.Shape)
				} else {
					require.Equal(t, []int{seq, dirs, batch, hid}, y.Shape)
					require.Equal(t, []int{dirs, batch, hid}, yh.Shape)
				}
				for d := 0; d < dirs; d++ {
					prm := refParams{
						w: mat(w, d, g*hid, input), r: mat(rr, d, g*hid, hid),
						wb: vec(b, d*2*g*hid, g*hid), rb: vec(b, (d*2+1)*g*hid, g*hid),
						p: vec(p, d*3*hid, 3*hid), lbr: variant == 1, inForget: variant == 1, clip: clip,
					}
					for bi := 0; bi < batch; bi++ {
						l := int(lens[bi])
						var xs [][]float64
						for s := 0; s < l; s++ {
							tt := s
							if d == 1 {
								tt = l - 1 - s
							}
							xs = append(xs, vec(x, (tt*batch+bi)*input, input))
						}
						hInit := vec(h0, (d*batch+bi)*hid, hid)
						cInit := vec(c0, (d*batch+bi)*hid, hid)
						ys, hEnd, cEnd := refRecurrence(kind, prm, xs, hInit, cInit)
						for tt := 0; tt < seq; tt++ {
							want := make([]float64, hid) // zero past the sequence
							if tt < l {
								s := tt
								if d == 1 {
									s = l - 1 - tt
								}
								want = ys[s]
							}
							for j := 0; j < hid; j++ {
								idx := ((tt*dirs+d)*batch+bi)*hid + j
								if layout == 1 {
									idx = ((bi*seq+tt)*dirs+d)*hid + j
								}
								assert.InDelta(t, want[j], float64(y.Float32s()[idx]), 1e-5, "%s layout %d variant %d Y t=%d d=%d b=%d", op, layout, variant, tt, d, bi)
							}
						}
						for j := 0; j < hid; j++ {
							idx := (d*batch+bi)*hid + j
							if layout == 1 {
								idx = (bi*dirs+d)*hid + j
							}
							assert.InDelta(t, hEnd[j], float64(yh.Float32s()[idx]), 1e-5, "%s Y_h", op)
							if kind == rnnLSTM {
								assert.InDelta(t, cEnd[j], float64(outs[2].Float32s()[idx]), 1e-5, "%s Y_c", op)
							}
						}
					}
				}
			}
		}
	}
}

func recurrentKernel2(kind rnnKind) kern.Kernel {
	return func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		return recurrentKernel(kind, n, in)
	}
}

func swapF32(t *graph.Tensor, d0, d1, rest int) *graph.Tensor {
	return graph.FromFloat32(rnnSwap01(t.Float32s(), d0, d1, rest), d1, d0, rest)
}

func mat(t *graph.Tensor, d, rows, cols int) [][]float64 {
	out := make([][]float64, rows)
	for i := range out {
		out[i] = vec(t, (d*rows+i)*cols, cols)
	}
	return out
}

func vec(t *graph.Tensor, off, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = t.Float(off + i)
	}
	return out
}

func TestRecurrentActivations(t *testing.T) {
	v := []float64{-2, -0.5, 0.5, 2}
	cases := []struct {
		name  string
		alpha []float32
		beta  []float32
		want  []float64
	}{
		{"Relu", nil, nil, []float64{0, 0, 0.5, 2}},
		{"LeakyRelu", nil, nil, []float64{-0.02, -0.005, 0.5, 2}},
		{"LeakyRelu", []float32{0.5}, nil, []float64{-1, -0.25, 0.5, 2}},
		{"ThresholdedRelu", []float32{0.7}, nil, []float64{0, 0, 0, 2}},
		{"HardSigmoid", nil, nil, []float64{0.1, 0.4, 0.6, 0.9}},
		{"Affine", []float32{2}, []float32{1}, []float64{-3, 0, 2, 5}},
		{"ScaledTanh", []float32{2}, []float32{0.5}, []float64{2 * math.Tanh(-1), 2 * math.Tanh(-0.25), 2 * math.Tanh(0.25), 2 * math.Tanh(1)}},
		{"Elu", nil, nil, []float64{math.Expm1(-2), math.Expm1(-0.5), 0.5, 2}},
		{"Softsign", nil, nil, []float64{-2.0 / 3, -0.5 / 1.5, 0.5 / 1.5, 2.0 / 3}},
		{"softplus", nil, nil, []float64{math.Log1p(math.Exp(-2)), math.Log1p(math.Exp(-0.5)), math.Log1p(math.Exp(0.5)), math.Log1p(math.Exp(2))}},
	}
	for _, c := range cases {
		attrs := []*graph.Attr{{Name: "activations", Type: graph.AttrStrings, Strings: []string{c.name}}}
		if c.alpha != nil {
			attrs = append(attrs, &graph.Attr{Name: "activation_alpha", Type: graph.AttrFloats, Floats: c.alpha})
		}
		if c.beta != nil {
			attrs = append(attrs, &graph.Attr{Name: "activation_beta", Type: graph.AttrFloats, Floats: c.beta})
		}
		acts, err := rnnActivations(node("RNN", attrs...), rnnPlain, 1)
		require.NoError(t, err)
		got := append([]float64{}, v...)
		rnnApply(acts[0], 0, got)
		for i := range got {
			assert.InDelta(t, c.want[i], got[i], 1e-12, "%s %d", c.name, i)
		}
	}
	// Alphas are consumed only by the functions that take one.
	acts, err := rnnActivations(node("LSTM",
		&graph.Attr{Name: "activations", Type: graph.AttrStrings, Strings: []string{"Sigmoid", "LeakyRelu", "Elu"}},
		&graph.Attr{Name: "activation_alpha", Type: graph.AttrFloats, Floats: []float32{0.1, 0.2}},
	), rnnLSTM, 1)
	require.NoError(t, err)
	assert.InDelta(t, 0.1, acts[1].alpha, 1e-7)
	assert.InDelta(t, 0.2, acts[2].alpha, 1e-7)

	_, err = rnnActivations(node("RNN", &graph.Attr{Name: "activations", Type: graph.AttrStrings, Strings: []string{"Gelu"}}), rnnPlain, 1)
	assert.ErrorContains(t, err, "unknown activation")
}

func TestRecurrentShapeErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := randF32(r, 2, 1, 3)
	_, err := recurrentKernel(rnnLSTM, node("LSTM", graph.IntAttr("hidden_size", 2)), []*graph.Tensor{x, randF32(r, 1, 8, 4), randF32(r, 1, 8, 2)})
	assert.ErrorContains(t, err, "W has shape")
	_, err = recurrentKernel(rnnGRU, node("GRU", graph.StringAttr("direction", "sideways")), []*graph.Tensor{x, randF32(r, 1, 6, 3), randF32(r, 1, 6, 2)})
	assert.ErrorContains(t, err, "direction")
}

func TestRecurrentFloat64MatchesFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	in32 := []*graph.Tensor{randF32(r, 3, 2, 4), randF32(r, 1, 8, 4), randF32(r, 1, 8, 2), randF32(r, 1, 16)}
	var in64 []*graph.Tensor
	for _, t32 := range in32 {
		in64 = append(in64, graph.FromFloat64(vec(t32, 0, t32.Size()), t32.Shape...))
	}
	n := node("LSTM", graph.IntAttr("hidden_size", 2))
	o32 := run(t, recurrentKernel2(rnnLSTM), n, in32...)
	o64 := run(t, recurrentKernel2(rnnLSTM), n, in64...)
	require.Len(t, o64, 3)
	for i, v := range o64[0].Float64s() {
		assert.InDelta(t, v, float64(o32[0].Float32s()[i]), 1e-5)
	}
}
