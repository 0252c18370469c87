package control

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// testScope is a value scope for testRunner, linked to its enclosing scope.
type testScope struct {
	values map[string]*graph.Tensor
	parent *testScope
}

func (s *testScope) lookup(name string) (*graph.Tensor, bool) {
	for ; s != nil; s = s.parent {
		if t, ok := s.values[name]; ok {
			return t, true
		}
	}
	return nil, false
}

// testRunner is a minimal kern.SubgraphRunner for the tests: it runs the
// nodes of a subgraph in order with the kernels registered in kern
// (this package's only, in these tests).
type testRunner struct {
	opset int64
	rnd   *rand.Rand
	scope *testScope
}

func (r *testRunner) ctx(scope *testScope) *kern.Context {
	return &kern.Context{Opset: r.opset, Rand: r.rnd, Sub: &testRunner{opset: r.opset, rnd: r.rnd, scope: scope}}
}

func (r *testRunner) RunSubgraph(g *graph.Graph, inputs []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(inputs) > len(g.Inputs) {
		return nil, fmt.Errorf("subgraph takes %d inputs, got %d", len(g.Inputs), len(inputs))
	}
	scope := &testScope{values: map[string]*graph.Tensor{}, parent: r.scope}
	for k, v := range g.Initializers {
		scope.values[k] = v
	}
	for i, t := range inputs {
		scope.values[g.Inputs[i].Name] = t
	}
	for _, n := range g.Nodes {
		spec, ok := kern.Lookup(n.Domain, n.OpType, r.opset)
		if !ok {
			return nil, fmt.Errorf("no kernel for %s", n.OpType)
		}
		in := make([]*graph.Tensor, len(n.Inputs))
		for i, name := range n.Inputs {
			if name == "" {
				continue
			}
			t, ok := scope.lookup(name)
			if !ok {
				return nil, fmt.Errorf("value %q is undefined", name)
			}
			in[i] = t
		}
		out, err := spec.Fn(r.ctx(scope), n, in)
		if err != nil {
			return nil, err
		}
		for i, name := range n.Outputs {
			if name != "" {
				scope.values[name] = out[i]
			}
		}
	}
	out := make([]*graph.Tensor, len(g.Outputs))
	for i, o := range g.Outputs {
		t, ok := scope.lookup(o.Name)
		if !ok {
			return nil, fmt.Errorf("output %q was not computed", o.Name)
		}
		out[i] = t
	}
	return out, nil
}

// node builds a node with the given attributes.
func node(op string, inputs, outputs []string, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{Name: op + "_test", OpType: op, Inputs: inputs, Outputs: outputs}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return n
}

// body builds a subgraph with the given input and output names.
func body(inputs, outputs []string, nodes ...*graph.Node) *graph.Graph {
	g := graph.NewGraph("body")
	for _, name := range inputs {
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name})
	}
	for _, name := range outputs {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: name})
	}
	g.Nodes = nodes
	return g
}

func graphAttr(name string, g *graph.Graph) *graph.Attr {
	return &graph.Attr{Name: name, Type: graph.AttrGraph, G: g}
}

// run calls the registered kernel of n at opset with outer-scope values.
func run(t *testing.T, opset int64, n *graph.Node, outer map[string]*graph.Tensor, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup("", n.OpType, opset)
	require.True(t, ok, "no kernel for %s", n.OpType)
	r := &testRunner{opset: opset, rnd: rand.New(rand.NewPCG(1, 2))}
	return spec.Fn(r.ctx(&testScope{values: outer}), n, in)
}

// mustRun is run that requires success.
func mustRun(t *testing.T, opset int64, n *graph.Node, in ...*graph.Tensor) []*graph.Tensor {
	t.Helper()
	out, err := run(t, opset, n, nil, in...)
	require.NoError(t, err)
	return out
}

func i64(v ...int64) *graph.Tensor { return graph.FromInt64(v, len(v)) }

func scalarBool(v bool) *graph.Tensor {
	return &graph.Tensor{DType: graph.Bool, Shape: []int{}, Data: []bool{v}}
}

func scalarI64(v int64) *graph.Tensor {
	return &graph.Tensor{DType: graph.Int64, Shape: []int{}, Data: []int64{v}}
}
