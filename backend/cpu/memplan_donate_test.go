package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// overCalls records, per node name, whether the last OverOne call wrote
// over its input.
var overCalls sync.Map // string -> bool

func init() {
	// OverOne: y = x + 1 over x when x is donated (else into kern.New's
	// storage); with a second input it adds that too. It records which.
	kern.RegisterSpec(testDomain, "OverOne", kern.Spec{Overwrites: []int{0}, Fn: func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		over := ctx.MayOverwrite(0)
		overCalls.Store(n.Name, over)
		out := in[0]
		if !over {
			var err error
			if out, err = kern.New(n, graph.Float32, in[0].Shape); err != nil {
				return nil, err
			}
		}
		x, y := in[0].Float32s(), out.Float32s()
		for i := range y {
			v := x[i] + 1
			if len(in) > 1 {
				v += in[1].Float32s()[i]
			}
			y[i] = v
		}
		return []*graph.Tensor{out}, nil
	}})
}

// donateModel builds a graph of test nodes over inputs a and b
// (float32[size]) with the given outputs.
func donateModel(size int, outs []string, nodes ...*graph.Node) *graph.Model {
	g := graph.NewGraph("donate")
	g.Inputs = []*graph.ValueInfo{{Name: "a", Type: vecType(size)}, {Name: "b", Type: vecType(size)}}
	for _, n := range nodes {
		if n.Domain == "" && n.OpType != "Reshape" {
			n.Domain = testDomain
		}
	}
	g.Nodes = nodes
	for _, o := range outs {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: o})
	}
	g.Initializers["shape"] = graph.FromInt64([]int64{2, int64(size / 2)}, 2)
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, testDomain: 1}, Graph: g}
}

func node(name, op string, in ...string) *graph.Node {
	return &graph.Node{Name: name, OpType: op, Inputs: in, Outputs: []string{name}}
}

// TestDonatedInputs: the executor hands a step an input's storage only
// when nothing the run reads later lies in it, and the values stay right
// on the recording run and the planned runs after it.
func TestDonatedInputs(t *testing.T) {
	const size = 64
	cases := []struct {
		name   string
		outs   []string
		nodes  []*graph.Node
		donate bool
		want   map[string]float32 // output -> value - a's value
	}{
		{"last reader", []string{"y"}, []*graph.Node{node("r", "AddOne", "a"), node("y", "OverOne", "r")}, true,
			map[string]float32{"y": 2}},
		{"read again later", []string{"y", "z"}, []*graph.Node{node("r", "AddOne", "a"), node("y", "OverOne", "r"), node("z", "AddOne", "r")}, false,
			map[string]float32{"y": 2, "z": 2}},
		{"a graph output", []string{"y", "r"}, []*graph.Node{node("r", "AddOne", "a"), node("y", "OverOne", "r")}, false,
			map[string]float32{"y": 2, "r": 1}},
		{"a graph input", []string{"y"}, []*graph.Node{node("y", "OverOne", "a")}, false,
			map[string]float32{"y": 1}},
		{"a view read later", []string{"y", "z"}, []*graph.Node{node("r", "AddOne", "a"), node("v", "Reshape", "r", "shape"),
			node("y", "OverOne", "v"), node("z", "AddOne", "r")}, false,
			map[string]float32{"y": 2, "z": 2}},
		{"a view, its base dead", []string{"y"}, []*graph.Node{node("r", "AddOne", "a"), node("v", "Reshape", "r", "shape"),
			node("y", "OverOne", "v")}, true,
			map[string]float32{"y": 2}},
		{"the same value twice", []string{"y"}, []*graph.Node{node("r", "AddOne", "a"), node("y", "OverOne", "r", "r")}, false,
			map[string]float32{"y": 3}}, // (a+1)+1+(a+1) = 2a+3: checked below
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			exe := compileTest(t, donateModel(size, c.outs, c.nodes...))
			a := ramp(size, 0.5)
			for run := 0; run < 3; run++ {
				out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"a": a, "b": ramp(size, 0)})
				require.NoError(t, err)
				over, _ := overCalls.Load("y")
				assert.Equal(t, c.donate, over, "run %d: written over its input", run)
				for name, d := range c.want {
					got := out[name].Float32s()
					for i, v := range a.Float32s() {
						want := v + d
						if c.name == "the same value twice" {
							want = 2*v + d
						}
						require.Equal(t, want, got[i], "run %d, %s[%d]", run, name, i)
					}
				}
			}
			assert.Zero(t, exe.MemoryStats().Rescues)
			assert.Zero(t, exe.MemoryStats().Misses)
		})
	}
}

// TestKernelsWriteOverDonatedInputs: the kernels that take a donated
// input (LayerNormGradAdd's R, the norm and softmax gradients' dY,
// BatchNormAddReluGrad's A, the scores under their loss gradient, an
// elementwise operand of the result's shape) write their output over it when the input is
// made by the run and read last by the node, with the same bits as into
// fresh storage (the memory plan off), on the recording run and after.
func TestKernelsWriteOverDonatedInputs(t *testing.T) {
	const n, c, hw, rows, width = 2, 5, 49, 37, 96
	x4 := []int64{n, c, 7, 7}
	vec := []int64{c}
	bnAttrs := map[string]*graph.Attr{"epsilon": graph.FloatAttr("epsilon", 1e-5), "training_mode": graph.IntAttr("training_mode", 1)}
	cases := []struct {
		op, domain string
		attrs      map[string]*graph.Attr
		inputs     [][]int64 // shapes; the donated one is made by an Add of two graph inputs
		donated    int
		outs       int
		labels     []int // inputs that hold int64 labels in [0, the last dim of the donated input)
		fresh      bool  // the output must not go over the donated input (it broadcasts; a general path)
		f64        bool  // float64 operands (float32 otherwise)
	}{
		{graph.LayerNormGradAdd, graph.FusedDomain, map[string]*graph.Attr{"axis": graph.IntAttr("axis", -1), "epsilon": graph.FloatAttr("epsilon", 1e-5)},
			[][]int64{{rows, width}, {rows, width}, {width}, {rows, width}}, 3, 3, nil, false, false},
		{"LayerNormalizationGrad", graph.InternalDomain, map[string]*graph.Attr{"axis": graph.IntAttr("axis", -1), "epsilon": graph.FloatAttr("epsilon", 1e-5)},
			[][]int64{{rows, width}, {rows, width}, {width}}, 0, 3, nil, false, false},
		{"BatchNormalizationGrad", graph.InternalDomain, bnAttrs, [][]int64{x4, x4, vec, vec, vec}, 0, 5, nil, false, false},
		{graph.BatchNormReluGrad, graph.FusedDomain, bnAttrs, [][]int64{x4, x4, x4, vec, vec, vec}, 0, 5, nil, false, false},
		{graph.BatchNormAddReluGrad, graph.FusedDomain, bnAttrs, [][]int64{x4, x4, x4, x4, vec, vec, vec}, 0, 6, nil, false, false},
		{"SoftmaxGrad", graph.InternalDomain, map[string]*graph.Attr{"axis": graph.IntAttr("axis", -1)}, [][]int64{{rows, width}, {rows, width}}, 0, 1, nil, false, false},
		{"SoftmaxGrad", graph.InternalDomain, map[string]*graph.Attr{"axis": graph.IntAttr("axis", 1)}, [][]int64{x4, x4}, 0, 1, nil, false, false},
		{"LogSoftmaxGrad", graph.InternalDomain, map[string]*graph.Attr{"axis": graph.IntAttr("axis", -1)}, [][]int64{{rows, width}, {rows, width}}, 0, 1, nil, false, false},
		{"Add", "", nil, [][]int64{{rows, width}, {rows, width}}, 0, 1, nil, false, false},
		{"Mul", "", nil, [][]int64{{width}, {rows, width}}, 1, 1, nil, false, false},
		{"Sub", "", nil, [][]int64{{rows, width}, {1, width}}, 0, 1, nil, false, false},
		{"Add", "", nil, [][]int64{{1, width}, {rows, width}}, 0, 1, nil, true, false},
		// The general path (float64) runs AddReluGrad's kernel, then
		// BatchNormalizationGrad's on its result: A's donation is not
		// theirs to take.
		{graph.BatchNormAddReluGrad, graph.FusedDomain, bnAttrs, [][]int64{x4, x4, x4, x4, vec, vec, vec}, 0, 6, nil, true, true},
		{"SoftmaxCrossEntropyLossGrad", graph.InternalDomain, map[string]*graph.Attr{"reduction": graph.StringAttr("reduction", "mean")},
			[][]int64{{}, {rows, width}, {rows}}, 1, 1, []int{2}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.op+fmt.Sprint(tc.inputs[tc.donated]), func(t *testing.T) {
			g := graph.NewGraph("over")
			rng := rand.New(rand.NewPCG(5, 6))
			inputs := map[string]*graph.Tensor{}
			feed := func(name string, shape []int64) {
				dims := make([]graph.Dim, len(shape))
				ints := make([]int, len(shape))
				for i, d := range shape {
					dims[i], ints[i] = graph.Dim{Value: d, Known: true}, int(d)
				}
				dt := graph.Float32
				if tc.f64 {
					dt = graph.Float64
				}
				g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: dt, HasShape: true, Shape: dims}})
				v := graph.Zeros(dt, ints...)
				for i := 0; i < v.Size(); i++ {
					x := rng.NormFloat64() + 0.5
					if tc.f64 {
						v.Data.([]float64)[i] = x
					} else {
						v.Float32s()[i] = float32(x)
					}
				}
				inputs[name] = v
			}
			feedLabels := func(name string, shape []int64, classes int) {
				dims := make([]graph.Dim, len(shape))
				for i, d := range shape {
					dims[i] = graph.Dim{Value: d, Known: true}
				}
				g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Int64, HasShape: true, Shape: dims}})
				labels := make([]int64, shape[0])
				for i := range labels {
					labels[i] = rng.Int64N(int64(classes))
				}
				inputs[name] = graph.FromInt64(labels, int(shape[0]))
			}
			var names []string
			for i, shape := range tc.inputs {
				name := string(rune('a' + i))
				if slices.Contains(tc.labels, i) {
					feedLabels(string(rune('a'+i)), shape, int(tc.inputs[tc.donated][len(tc.inputs[tc.donated])-1]))
					names = append(names, string(rune('a'+i)))
					continue
				}
				if i == tc.donated {
					feed(name+"p", shape)
					feed(name+"q", shape)
					g.Nodes = append(g.Nodes, &graph.Node{Name: name, OpType: "Add", Inputs: []string{name + "p", name + "q"}, Outputs: []string{name}})
				} else {
					feed(name, shape)
				}
				names = append(names, name)
			}
			var outs []string
			for j := 0; j < tc.outs; j++ {
				outs = append(outs, "out"+string(rune('0'+j)))
				g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: outs[j]})
			}
			g.Nodes = append(g.Nodes, &graph.Node{Name: "op", OpType: tc.op, Domain: tc.domain, Inputs: names, Outputs: outs, Attrs: tc.attrs})
			m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.FusedDomain: 1, graph.InternalDomain: 1}, Graph: g}
			plain := compileTest(t, m)
			plain.SetMemoryPlan(false)
			want, err := plain.Run(context.Background(), inputs)
			require.NoError(t, err)
			exe := compileTest(t, m)
			for run := 0; run < 3; run++ {
				over := false
				ctx := backend.WithNodeCallTimer(context.Background(), func(nd *graph.Node, in, out []*graph.Tensor, _ time.Duration) {
					if nd.Name == "op" {
						over = dataAddr(out[0]) == dataAddr(in[tc.donated])
					}
				})
				got, err := exe.Run(ctx, inputs)
				require.NoError(t, err)
				assert.Equal(t, !tc.fresh, over, "run %d: output 0 written over input %d", run, tc.donated)
				for _, name := range outs {
					assert.Equal(t, want[name].Data, got[name].Data, "run %d: %s", run, name)
				}
			}
		})
	}
}

// dataAddr is the address of t's first element.
func dataAddr(t *graph.Tensor) uintptr {
	p, _ := dataRange(t)
	return p
}
