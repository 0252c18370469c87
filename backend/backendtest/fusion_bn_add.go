package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedBatchNormAddRelu: the ends of ResNet blocks, with autodiff's
// gradients as train.Build leaves them. Four blocks in a row:
//
//	o0 = Relu(BN0(x) + p)            p of shape (1, C, 1, 1): broadcasts, stays unfused
//	o1 = Relu(BN1(o0) + o0)          identity residual
//	o2 = Relu(BN2(o1) + o1)          identity residual
//	o3 = Relu(BN3(o2) + BNd(o2))     downsample residual, BNd placed after BN3
//
// Where the backend declares them, the last three run as BatchNormAddRelu
// and the gradients into o0, o1 and o2 (each the sum of the identity
// path's, or the downsample branch's, and the next BatchNormalization's)
// as AddReluGrad, each with the gradient of the BatchNormalization that
// reads it as one BatchNormAddReluGrad; the broadcast block keeps its Add
// and Relu. The output, every gradient and the running
// statistics equal, bit for bit, those of the same graph with the sums and
// the gradient sums made graph outputs (which keeps every chain unfused),
// and o1 agrees with a float64 evaluation. Two shapes: a spatial size of
// 35 (rows through the vector loops and their tails) and of 9 (short
// rows, taken a block of channels at a time).
func (kc checker) fusedBatchNormAddRelu(t *testing.T) {
	for _, sh := range [][4]int64{{3, 4, 5, 7}, {2, 40, 3, 3}} {
		t.Run(fmt.Sprint(sh), func(t *testing.T) { kc.fusedBatchNormAddReluShape(t, sh) })
	}
}

func (kc checker) fusedBatchNormAddReluShape(t *testing.T, sh [4]int64) {
	n, c, h, w := sh[0], sh[1], sh[2], sh[3]
	build := func() (*graph.Model, []string) {
		g := graph.NewGraph("bnaddrelu")
		g.Inputs = []*graph.ValueInfo{{Name: "x", Type: F32Type(n, c, h, w)}, {Name: "p", Type: F32Type(1, c, 1, 1)},
			{Name: "dy", Type: F32Type(n, c, h, w)}}
		rng := rand.New(rand.NewPCG(71, 72))
		stat := func(base, spread float64) *graph.Tensor {
			v := make([]float32, c)
			for i := range v {
				v[i] = float32(base + spread*rng.NormFloat64())
			}
			return graph.FromFloat32(v, int(c))
		}
		wrt := []string{"x", "p"}
		bn := func(name, x, y string) *graph.Node {
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name + ".scale", Type: F32Type(c)}, &graph.ValueInfo{Name: name + ".bias", Type: F32Type(c)})
			wrt = append(wrt, name+".scale", name+".bias")
			g.Initializers[name+".mean"], g.Initializers[name+".var"] = stat(0, 0.1), stat(1, 0.1)
			return &graph.Node{Name: name, OpType: "BatchNormalization",
				Inputs:  []string{x, name + ".scale", name + ".bias", name + ".mean", name + ".var"},
				Outputs: []string{y, name + ".rm", name + ".rv"},
				Attrs: map[string]*graph.Attr{
					"training_mode": {Name: "training_mode", Type: graph.AttrInt, I: 1},
					"momentum":      {Name: "momentum", Type: graph.AttrFloat, F: 0.9},
					"epsilon":       {Name: "epsilon", Type: graph.AttrFloat, F: 1e-5},
				}}
		}
		end := func(i int, y, r string) []*graph.Node {
			s, o := fmt.Sprintf("s%d", i), fmt.Sprintf("o%d", i)
			return []*graph.Node{
				{Name: "add" + s, OpType: "Add", Inputs: []string{y, r}, Outputs: []string{s}},
				{Name: "relu" + s, OpType: "Relu", Inputs: []string{s}, Outputs: []string{o}},
			}
		}
		g.Nodes = append(g.Nodes, bn("bn0", "x", "y0"))
		g.Nodes = append(g.Nodes, end(0, "y0", "p")...)
		g.Nodes = append(g.Nodes, bn("bn1", "o0", "y1"))
		g.Nodes = append(g.Nodes, end(1, "y1", "o0")...)
		g.Nodes = append(g.Nodes, bn("bn2", "o1", "y2"))
		g.Nodes = append(g.Nodes, end(2, "y2", "o1")...)
		g.Nodes = append(g.Nodes, bn("bn3", "o2", "y3"), bn("bnd", "o2", "yd"))
		g.Nodes = append(g.Nodes, end(3, "y3", "yd")...)
		m, grads := trainingStepModel(t, g, "o3", wrt)
		for _, name := range []string{"bn1.rm", "bn1.rv", "bn3.rm", "bnd.rv"} {
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: name})
		}
		return m, grads
	}
	m, grads := build()
	ref, _ := build()
	// The reference keeps the chains: the sums, and the gradient sums that
	// Relu's gradient masks, are graph outputs.
	rg := ref.Graph
	for i := 0; i < 4; i++ {
		rg.Outputs = append(rg.Outputs, &graph.ValueInfo{Name: fmt.Sprintf("s%d", i)})
	}
	producer := map[string]*graph.Node{}
	for _, nd := range rg.Nodes {
		for _, o := range nd.Outputs {
			producer[o] = nd
		}
	}
	gradSums := 0
	for _, nd := range rg.Nodes {
		if nd.OpType == "Where" && len(nd.Inputs) == 3 {
			if p := producer[nd.Inputs[1]]; p != nil && p.OpType == "Add" {
				rg.Outputs = append(rg.Outputs, &graph.ValueInfo{Name: p.Outputs[0]})
				gradSums++
			}
		}
	}
	require.Equal(t, 3, gradSums, "the gradients into o0, o1 and o2 are sums that Relu's gradient masks")

	inputs := NormalInputs(m.Graph, rand.New(rand.NewPCG(73, 74)), 1)
	for i := range inputs["x"].Float32s() {
		inputs["x"].Float32s()[i] += 0.5 // a mean away from 0
	}
	fused, ops := kc.runPlanned(t, m, inputs, false)
	plain, plainOps := kc.runPlanned(t, ref, inputs, false)
	_, offOps := kc.runPlanned(t, m, inputs, true)
	for _, o := range []map[string]int{plainOps, offOps} {
		assert.Zero(t, o[graph.BatchNormAddRelu]+o[graph.AddReluGrad]+o[graph.BatchNormAddReluGrad], "%v", o)
	}
	if kc.fuses(false, graph.BatchNormAddRelu) {
		assert.Equal(t, 3, ops[graph.BatchNormAddRelu], "%v", ops)
		assert.Equal(t, 1+1, ops["BatchNormalization"]+ops[graph.BatchNormRelu], "bn0 and the downsample branch's: %v", ops)
		assert.Equal(t, 1, ops["Relu"]+ops[graph.BatchNormRelu], "block 0's Relu: %v", ops)
	} else {
		assert.Zero(t, ops[graph.BatchNormAddRelu], "%v", ops)
	}
	switch {
	case kc.fuses(false, graph.BatchNormAddReluGrad, graph.AddReluGrad, graph.ReluGrad):
		assert.Equal(t, 3, ops[graph.BatchNormAddReluGrad], "%v", ops)
		assert.Zero(t, ops[graph.AddReluGrad], "%v", ops)
		assert.Equal(t, 2, ops["BatchNormalizationGrad"], "block 3's two: %v", ops)
	case kc.fuses(false, graph.AddReluGrad, graph.ReluGrad):
		assert.Equal(t, 3, ops[graph.AddReluGrad], "%v", ops)
		assert.Zero(t, ops[graph.BatchNormAddReluGrad], "%v", ops)
	default:
		assert.Zero(t, ops[graph.AddReluGrad]+ops[graph.BatchNormAddReluGrad], "%v", ops)
	}
	for _, name := range append([]string{"o3", "bn1.rm", "bn1.rv", "bn3.rm", "bnd.rv"}, grads...) {
		require.NotNil(t, fused[name], name)
		assert.True(t, sameBits(plain[name], fused[name]), "%s: fused and unfused differ", name)
	}
	// The Relu did something, and every gradient is not zero.
	zeros := 0
	for _, v := range fused["o3"].Float32s() {
		if v == 0 {
			zeros++
		}
	}
	size := int(n * c * h * w)
	assert.Greater(t, zeros, size/10)
	assert.Less(t, zeros, size*9/10)
	for _, name := range grads {
		nonzero := false
		for _, v := range fused[name].Float32s() {
			nonzero = nonzero || v != 0
		}
		assert.True(t, nonzero, "%s is all zeros", name)
	}
	// The sum of block 1, BN1(o0) + o0, in float64 from the reference's
	// o0 = Relu(s0) (the fused outputs above are its bits).
	require.NotNil(t, plain["s0"])
	o0 := make([]float64, size)
	for i, v := range plain["s0"].Float32s() {
		o0[i] = math.Max(float64(v), 0)
	}
	sc, bi := inputs["bn1.scale"].Float32s(), inputs["bn1.bias"].Float32s()
	spatial := int(h * w)
	s1 := plain["s1"].Float32s()
	for ch := 0; ch < int(c); ch++ {
		var sum, sq float64
		cnt := float64(int(n) * spatial)
		for b := 0; b < int(n); b++ {
			for i := 0; i < spatial; i++ {
				sum += o0[(b*int(c)+ch)*spatial+i]
			}
		}
		mean := sum / cnt
		for b := 0; b < int(n); b++ {
			for i := 0; i < spatial; i++ {
				d := o0[(b*int(c)+ch)*spatial+i] - mean
				sq += d * d
			}
		}
		inv := 1 / math.Sqrt(sq/cnt+1e-5)
		for b := 0; b < int(n); b++ {
			for i := 0; i < spatial; i++ {
				k := (b*int(c)+ch)*spatial + i
				want := (o0[k]-mean)*inv*float64(sc[ch]) + float64(bi[ch]) + o0[k]
				assert.InDelta(t, want, float64(s1[k]), 1e-4*math.Max(1, math.Abs(want)), "s1[%d]", k)
			}
		}
	}
}
