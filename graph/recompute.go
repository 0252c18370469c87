package graph

import (
	"fmt"
	"slices"
)

// Activation recomputation.
//
// A training graph (forward, loss, backward in one node list) keeps every
// forward value the backward pass reads alive from the moment forward
// computes it to its use in backward, which is where a training step's
// memory peaks. Recompute trades time for that memory: a forward value that
// a few cheap nodes (elementwise ops, activations, normalisations, views)
// compute from values that stay alive anyway is computed a second time, by
// copies of those nodes placed just before its first use in backward, and
// backward reads the copy. The original then dies at its last forward use.
//
// What stays alive anyway (the roots a copy may read): graph inputs and
// initializers, outputs of nodes that are not cheap (Conv, MatMul, Gemm,
// pooling, random ops such as Dropout, whose outputs are never computed
// again, so a recomputed value downstream of a Dropout sees the same mask),
// graph outputs, and forward values that backward reads and that this pass
// decided to keep. A value is recomputed only when its copies read roots
// that backward reads anyway, so no root lives longer than without
// recomputation, and when the copies it needs number at most
// RecomputeOptions.MaxNodes. Each backward node that first reads recomputed
// values gets its own copies (a value recomputed for an earlier reader is
// recomputed again rather than kept alive in between), so a copy lives no
// longer than the values it stands for would in backward.
//
// Besides, reads that do not need a value stop keeping it alive:
// CastLike(constant, x) nodes of the backward pass (dtype only) move into
// the forward pass, right after x is made; SumToShape(g, x) (shape only)
// becomes Identity(g) when shape inference shows that g is shaped like x
// (x's forward consumers are elementwise ops that do not broadcast it); and
// Relu's gradient mask Greater(x, 0) reads Relu(x) > 0, the same mask from
// the output the next layer's gradient keeps anyway, instead of x.
//
// The copies run the same kernels on the same inputs as the originals, so
// losses and gradients are bit-identical with and without recomputation.

// RecomputeOptions tunes Recompute.
type RecomputeOptions struct {
	// MaxNodes bounds the copies one recomputed value needs (its private
	// chain of cheap nodes back to kept values); 0 means 4, which on
	// cifar_resnet, vit_tiny and resnet18_small gave within 3% of the
	// planned peak of 8 or 16, with fewer copies.
	MaxNodes int
	// ReadsOnly makes only the rewrites of reads that need no value (the
	// CastLike, SumToShape and Relu-mask rewrites below): nothing is
	// computed twice, so they cost no time. Training always applies them.
	ReadsOnly bool
}

// RecomputeStats says what Recompute did.
type RecomputeStats struct {
	// Saved is the number of forward values backward read before the
	// pass; Recomputed how many of them backward now reads as copies.
	Saved, Recomputed int
	// Copies is the number of nodes added to recompute them.
	Copies int
	// Hoisted counts CastLike nodes moved into the forward pass,
	// ShapeReads SumToShape nodes replaced by Identity, and ReluMasks Relu
	// gradients that now read the Relu's output instead of its input.
	Hoisted, ShapeReads, ReluMasks int
}

// broadcastElementwise lists the ops whose gradient rules reduce a gradient
// shaped like the op's output to an input's shape with SumToShape.
var broadcastElementwise = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true,
	"Where": true, "Max": true, "Min": true,
}

// noBroadcastFrom reports whether every forward consumer of v is a
// broadcasting elementwise op whose outputs have v's static shape: then
// each SumToShape(g, v) their gradients emit gets g already shaped like v.
func noBroadcastFrom(v string, consumers []*Node, types map[string]*Type) bool {
	if len(consumers) == 0 {
		return false
	}
	for _, n := range consumers {
		if (n.Domain != "" && n.Domain != "ai.onnx") || !broadcastElementwise[n.OpType] {
			return false
		}
		for _, o := range n.Outputs {
			if o != "" && !sameStaticShape(types[o], types[v]) {
				return false
			}
		}
	}
	return true
}

// reluMaskOf recognises the mask of Relu's gradient, Greater(x, zero) with x
// the input of a forward Relu (reluOf maps it to the output) and zero a
// CastLike (made maps the backward values to their nodes) of a constant
// scalar 0, or the constant itself; it returns the Relu's output.
func reluMaskOf(n *Node, reluOf map[string]string, made map[string]*Node, g *Graph) (string, bool) {
	if n.OpType != "Greater" || (n.Domain != "" && n.Domain != "ai.onnx") || len(n.Inputs) != 2 {
		return "", false
	}
	zero := n.Inputs[1]
	if c := made[zero]; c != nil && c.OpType == "CastLike" && len(c.Inputs) == 2 {
		zero = c.Inputs[0]
	}
	t, ok := g.Initializers[zero]
	if !ok || !isConstant(g, zero) || t.Size() != 1 || t.Float(0) != 0 {
		return "", false
	}
	y, ok := reluOf[n.Inputs[0]]
	return y, ok
}

// recomputeCheap lists the ops whose outputs are cheap to compute again
// (memory-bound, linear in their input size) and deterministic.
var recomputeCheap = map[string]bool{
	// Elementwise and activations.
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Neg": true, "Abs": true,
	"Sqrt": true, "Reciprocal": true, "Pow": true, "Exp": true, "Log": true,
	"Relu": true, "LeakyRelu": true, "PRelu": true, "Elu": true, "Selu": true, "Celu": true,
	"Sigmoid": true, "HardSigmoid": true, "HardSwish": true, "Tanh": true, "Erf": true,
	"Gelu": true, "Softplus": true, "Softsign": true, "Mish": true, "Clip": true,
	"Max": true, "Min": true, "Where": true, "Cast": true, "CastLike": true,
	// Normalisations (one pass over the input to normalise, statistics
	// included) and softmax.
	"BatchNormalization": true, "LayerNormalization": true, "Softmax": true,
	// Views and data movement.
	"Identity": true, "Reshape": true, "Flatten": true, "Squeeze": true,
	"Unsqueeze": true, "Transpose": true,
}

// recomputeWindow is how many backward nodes apart the first readers of two
// recomputed values may be for their copies to be shared. Measured on
// cifar_resnet at batch 16 (planned peak of a training step, before the
// Relu and SumToShape rewrites): sharing across 8 or 64 nodes saves a few
// copies but keeps them alive longer, 4.2 and 7.3 MiB against 4.0 MiB with
// no sharing beyond one reader.
const recomputeWindow = 0

// metadataRead reports whether input i of backward node n is read only for
// its dtype or shape.
func metadataRead(n *Node, i int) bool {
	switch {
	case n.OpType == "CastLike" && (n.Domain == "" || n.Domain == "ai.onnx"):
		return i == 1
	case n.OpType == "SumToShape" && n.Domain == InternalDomain:
		return i == 1
	}
	return false
}

// Recompute rewrites a training graph whose first forward nodes are the
// forward pass and loss and whose remaining nodes are the backward pass
// (as Gradients appends them), in that order. See the comment above for
// what it does. The node list stays topologically sorted, with every copy
// just before the backward node that first reads it.
func Recompute(g *Graph, forward int, opset int64, opts RecomputeOptions) (RecomputeStats, error) {
	var st RecomputeStats
	if forward < 0 || forward > len(g.Nodes) {
		return st, fmt.Errorf("graph: recompute: %d forward nodes, but the graph has %d nodes", forward, len(g.Nodes))
	}
	if opts.MaxNodes <= 0 {
		opts.MaxNodes = 4
	}
	fwd, bwd := g.Nodes[:forward], g.Nodes[forward:]
	producer := map[string]int{} // forward value -> index in fwd
	for i, n := range fwd {
		for _, o := range n.Outputs {
			if o != "" {
				producer[o] = i
			}
		}
	}
	for _, n := range bwd {
		for _, o := range n.Outputs {
			if _, dup := producer[o]; dup && o != "" {
				return st, n.Errorf("recompute: backward node redefines forward value %q", o)
			}
		}
	}
	isOutput := map[string]bool{}
	for _, o := range g.Outputs {
		isOutput[o.Name] = true
	}
	before := map[string]bool{}
	for _, n := range bwd {
		for _, in := range n.Inputs {
			if _, ok := producer[in]; ok {
				before[in] = true
			}
		}
	}
	st.Saved = len(before)

	// Metadata-only reads. Shape inference types the forward values.
	types, _ := InferShapes(g, opset, nil)
	consumers := map[string][]*Node{}
	reluOf := map[string]string{} // Relu input -> its output
	for _, n := range fwd {
		for _, in := range n.Inputs {
			consumers[in] = append(consumers[in], n)
		}
		if n.OpType == "Relu" && (n.Domain == "" || n.Domain == "ai.onnx") && len(n.Inputs) == 1 && len(n.Outputs) == 1 && n.Outputs[0] != "" {
			reluOf[n.Inputs[0]] = n.Outputs[0]
		}
	}
	hoist := map[int][]*Node{} // forward index -> CastLike nodes to run after it
	kept := make([]*Node, 0, len(bwd))
	backwardOut := map[string]*Node{}
	for _, n := range bwd {
		if len(n.Inputs) == 2 && metadataRead(n, 1) {
			like := n.Inputs[1]
			p, fromFwd := producer[like]
			switch {
			case !fromFwd:
			case n.OpType == "CastLike" && isConstant(g, n.Inputs[0]):
				hoist[p] = append(hoist[p], n)
				st.Hoisted++
				for _, o := range n.Outputs {
					backwardOut[o] = n
				}
				continue
			case n.OpType == "SumToShape" && (sameStaticShape(types[n.Inputs[0]], types[like]) || noBroadcastFrom(like, consumers[like], types)):
				n = &Node{Name: n.Name, OpType: "Identity", Inputs: []string{n.Inputs[0]}, Outputs: n.Outputs}
				st.ShapeReads++
			}
		}
		if y, ok := reluMaskOf(n, reluOf, backwardOut, g); ok {
			// Greater(x, 0) for x = Relu's input is Greater(Relu(x), 0):
			// read the output, which the next layer's gradient keeps.
			c := *n
			c.Inputs = []string{y, n.Inputs[1]}
			n = &c
			st.ReluMasks++
		}
		for _, o := range n.Outputs {
			backwardOut[o] = n
		}
		kept = append(kept, n)
	}
	bwd = kept

	// The forward values backward reads, in forward order.
	read := map[string]bool{}
	keep := map[string]bool{} // forward values that stay alive until backward reads them
	for _, n := range bwd {
		for _, in := range n.Inputs {
			if _, ok := producer[in]; ok {
				read[in] = true
			}
		}
		for _, sg := range n.Subgraphs() {
			for _, name := range sg.OuterScopeNames() {
				if _, ok := producer[name]; ok {
					// Subgraphs read by name: keep what they capture.
					read[name], keep[name] = true, true
				}
			}
		}
	}

	cheap := func(n *Node) bool {
		if n.Domain != "" && n.Domain != "ai.onnx" {
			return false
		}
		if !recomputeCheap[n.OpType] || len(n.Subgraphs()) > 0 {
			return false
		}
		if n.OpType == "BatchNormalization" && opset > 0 && opset < 14 {
			// Before opset 14 the mode follows from which outputs are
			// named; keep such nodes as they are.
			return false
		}
		return true
	}
	// Decide, in forward order, which read values are recomputed. A
	// value's copies form a private chain back to kept values: values
	// recomputed for another reader are recomputed again rather than
	// shared, so no copy outlives the backward node that first needs it.
	recomputed := map[string]bool{}
	chainOf := func(v string) (map[int]bool, bool) {
		acc := map[int]bool{}
		var walk func(v string) bool
		walk = func(v string) bool {
			p, ok := producer[v]
			if !ok || keep[v] {
				return true // input, initializer or kept value
			}
			n := fwd[p]
			if !cheap(n) || isOutput[v] {
				return false // a root that would live longer than it does now
			}
			if acc[p] {
				return true
			}
			acc[p] = true
			if len(acc) > opts.MaxNodes {
				return false
			}
			for _, in := range n.Inputs {
				if in != "" && !walk(in) {
					return false
				}
			}
			return true
		}
		return acc, walk(v)
	}
	chains := map[string]map[int]bool{}
	for _, n := range fwd {
		for _, v := range n.Outputs {
			if !read[v] || keep[v] {
				continue
			}
			if acc, ok := chainOf(v); !opts.ReadsOnly && ok && !isOutput[v] && cheap(n) {
				recomputed[v] = true
				chains[v] = acc
				st.Recomputed++
			} else {
				keep[v] = true
			}
		}
	}

	// Group the recomputed values by where backward first reads them:
	// values first read within recomputeWindow nodes of each other share
	// one set of copies, emitted before the first of those readers.
	firstUse := map[string]int{}
	for i, n := range bwd {
		for _, in := range n.Inputs {
			if _, seen := firstUse[in]; !seen && recomputed[in] {
				firstUse[in] = i
			}
		}
	}
	group := map[int]map[int]bool{} // emission point (backward index) -> forward nodes to copy
	groupOf := map[string]int{}     // recomputed value -> its emission point
	start := -1
	for i, n := range bwd {
		for _, in := range n.Inputs {
			if !recomputed[in] || firstUse[in] != i {
				continue
			}
			if start < 0 || i-start > recomputeWindow {
				start = i
				group[start] = map[int]bool{}
			}
			groupOf[in] = start
			for p := range chains[in] {
				group[start][p] = true
			}
		}
	}

	// Emit: forward (with hoisted CastLikes), then backward with each
	// group's copies, in forward order, before its first reader.
	copyName := func(v string, point int) string { return fmt.Sprintf("%s/recomputed%d", v, point) }
	out := make([]*Node, 0, len(g.Nodes)+len(recomputed))
	for i, n := range fwd {
		out = append(out, n)
		out = append(out, hoist[i]...)
	}
	for i, n := range bwd {
		if nodes, ok := group[i]; ok {
			ps := make([]int, 0, len(nodes))
			for p := range nodes {
				ps = append(ps, p)
			}
			slices.Sort(ps)
			copied := map[string]bool{}
			for _, p := range ps {
				f := fwd[p]
				c := *f
				c.Name = fmt.Sprintf("%s/recomputed%d", f.Label(), i)
				c.Inputs = slices.Clone(f.Inputs)
				for j, in := range c.Inputs {
					if copied[in] {
						c.Inputs[j] = copyName(in, i)
					}
				}
				c.Outputs = slices.Clone(f.Outputs)
				for j, o := range c.Outputs {
					if o != "" {
						copied[o] = true
						c.Outputs[j] = copyName(o, i)
					}
				}
				out = append(out, &c)
				st.Copies++
			}
		}
		renamed := false
		for _, in := range n.Inputs {
			renamed = renamed || recomputed[in]
		}
		if renamed {
			c := *n
			c.Inputs = slices.Clone(n.Inputs)
			for j, in := range c.Inputs {
				if recomputed[in] {
					c.Inputs[j] = copyName(in, groupOf[in])
				}
			}
			n = &c
		}
		out = append(out, n)
	}
	g.Nodes = out
	return st, nil
}

// isConstant reports whether name is an initializer that is not a graph
// input (its value cannot change between runs), or an omitted input.
func isConstant(g *Graph, name string) bool {
	if name == "" {
		return true
	}
	if _, ok := g.Initializers[name]; !ok {
		return false
	}
	for _, in := range g.Inputs {
		if in.Name == name {
			return false
		}
	}
	return true
}

// sameStaticShape reports whether a and b are known to have the same shape:
// equal ranks, and per dim the same fixed size or the same symbolic name.
func sameStaticShape(a, b *Type) bool {
	if a == nil || b == nil || !a.HasShape || !b.HasShape || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		da, db := a.Shape[i], b.Shape[i]
		switch {
		case da.Known && db.Known && da.Value == db.Value:
		case !da.Known && !db.Known && da.Param != "" && da.Param == db.Param:
		default:
			return false
		}
	}
	return true
}
