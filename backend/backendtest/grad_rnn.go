package backendtest

import (
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Finite-difference checks of the recurrent layers' backward passes
// (backpropagation through time), over the attributes PyTorch exports
// (directions, layouts, initial states, biases) and the rest of the
// ONNX definitions (peepholes, input_forget, clip, sequence_lens, other
// activations, GRU's linear_before_reset).
func (kc checker) gradRecurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -1, 1, shape...) }
	const seq, batch, in, hid = 3, 2, 3, 2
	i, s := graph.IntAttr, graph.StringAttr
	hs := i("hidden_size", hid)
	bidi := s("direction", "bidirectional")
	lens := graph.FromInt32([]int32{3, 2}, batch)
	// inputs: X, W, R, B, sequence_lens, initial_h, initial_c, P
	lstm := func(dirs int, attrs ...*graph.Attr) gradCase {
		return gradCase{op: "LSTM", attrs: append([]*graph.Attr{hs}, attrs...), outputs: 3, lossOutputs: []int{0, 1, 2},
			inputs: []*graph.Tensor{x(seq, batch, in), x(dirs, 4*hid, in), x(dirs, 4*hid, hid), x(dirs, 8*hid), nil, x(dirs, batch, hid), x(dirs, batch, hid)},
			wrt:    []int{0, 1, 2, 3, 5, 6}}
	}
	gru := func(dirs int, attrs ...*graph.Attr) gradCase {
		return gradCase{op: "GRU", attrs: append([]*graph.Attr{hs}, attrs...), outputs: 2, lossOutputs: []int{0, 1},
			inputs: []*graph.Tensor{x(seq, batch, in), x(dirs, 3*hid, in), x(dirs, 3*hid, hid), x(dirs, 6*hid), nil, x(dirs, batch, hid)},
			wrt:    []int{0, 1, 2, 3, 5}}
	}
	rnn := func(dirs int, attrs ...*graph.Attr) gradCase {
		return gradCase{op: "RNN", attrs: append([]*graph.Attr{hs}, attrs...), outputs: 2, lossOutputs: []int{0, 1},
			inputs: []*graph.Tensor{x(seq, batch, in), x(dirs, hid, in), x(dirs, hid, hid), x(dirs, 2*hid), nil, x(dirs, batch, hid)},
			wrt:    []int{0, 1, 2, 3, 5}}
	}
	named := func(name string, c gradCase) gradCase { c.name = name; return c }
	withLens := func(c gradCase) gradCase { c.inputs[4] = lens; return c }
	cases := []gradCase{
		named("LSTM forward", lstm(1)),
		named("LSTM bidirectional", lstm(2, bidi)),
		named("LSTM reverse", lstm(1, s("direction", "reverse"))),
		named("LSTM sequence_lens bidirectional", withLens(lstm(2, bidi))),
		named("LSTM clip", lstm(1, graph.FloatAttr("clip", 0.7))),
		named("LSTM input_forget", lstm(1, i("input_forget", 1))),
		named("LSTM last state only", func() gradCase { c := lstm(1); c.lossOutputs = []int{1}; return c }()),
		named("GRU forward", gru(1)),
		named("GRU linear_before_reset bidirectional", gru(2, bidi, i("linear_before_reset", 1))),
		named("GRU sequence_lens", withLens(gru(1))),
		named("RNN tanh", rnn(1)),
		named("RNN relu reverse lens", withLens(rnn(1, s("direction", "reverse"), graph.StringsAttr("activations", "Relu")))),
	}
	// Peepholes (LSTM input 7).
	p := lstm(1)
	p.inputs = append(p.inputs, x(1, 3*hid))
	p.wrt = append(p.wrt, 7)
	cases = append(cases, named("LSTM peepholes", p))
	// Other activations with alphas and betas.
	cases = append(cases, named("LSTM other activations", lstm(1,
		graph.StringsAttr("activations", "HardSigmoid", "ScaledTanh", "Softsign"),
		graph.FloatsAttr("activation_alpha", 0.3, 0.9), graph.FloatsAttr("activation_beta", 0.4, 1.2))))
	cases = append(cases, named("GRU elu softplus", gru(1, graph.StringsAttr("activations", "Sigmoid", "Elu"))))
	// Layout 1 (batch first): X [batch, seq, in], states [batch, dirs, hid].
	l1 := gradCase{op: "LSTM", attrs: []*graph.Attr{hs, i("layout", 1), bidi}, outputs: 3, lossOutputs: []int{0, 1, 2},
		inputs: []*graph.Tensor{x(batch, seq, in), x(2, 4*hid, in), x(2, 4*hid, hid), x(2, 8*hid), nil, x(batch, 2, hid), x(batch, 2, hid)},
		wrt:    []int{0, 1, 2, 3, 5, 6}}
	cases = append(cases, named("LSTM layout 1", l1))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc.runGradCheck(t, c)
			kc.checkShapeGradsFloat32(t, c)
		})
	}
}
