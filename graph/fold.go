package graph

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"slices"
)

// Evaluator computes one node's outputs from constant inputs. Backends
// provide it to FoldConstants, so graph stays free of kernels.
type Evaluator func(n *Node, in []*Tensor) ([]*Tensor, error)

// nondeterministic ops must never be folded.
var nondeterministic = map[string]bool{
	"RandomNormal": true, "RandomUniform": true, "RandomNormalLike": true,
	"RandomUniformLike": true, "Multinomial": true, "Bernoulli": true, "Dropout": true,
}

// FoldConstants evaluates every node whose inputs are all constants
// (initializers that are not graph inputs, or outputs of folded nodes) and
// turns its outputs into initializers. Nodes with subgraphs and random ops
// are left alone. Nodes the evaluator fails on are kept as they are: folding
// is an optimisation, and the error will surface at run time if it is real.
// Equal results of shareMinBytes or more are one tensor under their names
// (sharedResults). It returns the number of nodes folded.
func FoldConstants(g *Graph, eval Evaluator) int {
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	constant := func(name string) bool {
		if name == "" {
			return true
		}
		_, ok := g.Initializers[name]
		return ok && !isInput[name]
	}
	folded := 0
	var same sharedResults
	kept := g.Nodes[:0]
	for _, n := range g.Nodes {
		ok := !nondeterministic[n.OpType] && len(n.Subgraphs()) == 0 && n.Domain == ""
		for _, in := range n.Inputs {
			if !constant(in) {
				ok = false
				break
			}
		}
		if !ok {
			kept = append(kept, n)
			continue
		}
		in := make([]*Tensor, len(n.Inputs))
		for i, name := range n.Inputs {
			if name != "" {
				in[i] = g.Initializers[name]
			}
		}
		out, err := safeEval(eval, n, in)
		if err != nil || len(out) < countNamed(n.Outputs) {
			kept = append(kept, n)
			continue
		}
		for i, name := range n.Outputs {
			if name != "" && i < len(out) && out[i] != nil {
				g.Initializers[name] = same.share(out[i])
			}
		}
		folded++
	}
	g.Nodes = kept
	return folded
}

// shareMinBytes is the size from which FoldConstants keeps one tensor for
// equal results: a PyTorch export repeats a causal mask's arithmetic in
// every layer (the GPT of models/gpt at T = 1024: twelve equal 4 MiB
// masks, kept by each compiled program).
const shareMinBytes = 64 << 10

// sharedResults finds, among the tensors a FoldConstants call has made,
// one equal to a new result: the same dtype, shape and bytes.
type sharedResults map[uint64][]*Tensor

// share returns a tensor folded before that equals t (bit for bit), or t
// (remembered) when there is none or t is under shareMinBytes.
func (s *sharedResults) share(t *Tensor) *Tensor {
	b := ElementBytes(t.Data)
	if len(b) < shareMinBytes || t.IsContainer() {
		return t
	}
	key := maphash.Bytes(foldSeed, b) // results of other dtypes or shapes told apart below
	if *s == nil {
		*s = sharedResults{}
	}
	for _, u := range (*s)[key] {
		if u.DType == t.DType && slices.Equal(u.Shape, t.Shape) && bytes.Equal(ElementBytes(u.Data), b) {
			return u
		}
	}
	(*s)[key] = append((*s)[key], t)
	return t
}

var foldSeed = maphash.MakeSeed()

func countNamed(names []string) int {
	c := 0
	for i, n := range names {
		if n != "" {
			c = i + 1
		}
	}
	return c
}

func safeEval(eval Evaluator, n *Node, in []*Tensor) (out []*Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return eval(n, in)
}
