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
	if forward < 0 || forward > len(g.Nodes) {
		return RecomputeStats{}, fmt.Errorf("graph: recompute: %d forward nodes, but the graph has %d nodes", forward, len(g.Nodes))
	}
	if opts.MaxNodes <= 0 {
		opts.MaxNodes = 4
	}
	r := &recomputePass{g: g, opset: opset, opts: opts, fwd: g.Nodes[:forward], bwd: g.Nodes[forward:]}
	if err := r.indexForward(); err != nil {
		return r.st, err
	}
	r.rewriteMetadataReads()
	read := r.backwardReads()
	r.chooseRecomputed(read)
	group, groupOf := r.groupByFirstReader()
	g.Nodes = r.emit(group, groupOf)
	return r.st, nil
}

// recomputePass is the state Recompute's steps share.
type recomputePass struct {
	g     *Graph
	opset int64
	opts  RecomputeOptions
	st    RecomputeStats

	fwd, bwd  []*Node
	producer  map[string]int     // forward value -> index in fwd
	consumers map[string][]*Node // forward value -> the forward nodes reading it
	isOutput  map[string]bool    // graph outputs
	hoist     map[int][]*Node    // forward index -> CastLike nodes to run after it
	// keep: forward values that stay alive until backward reads them;
	// recomputed: those backward reads as copies, each with its chain of
	// forward nodes (indices in fwd) to run again.
	keep, recomputed map[string]bool
	chains           map[string]map[int]bool
}

// indexForward finds the producer of every forward value, refuses a
// backward pass that redefines one, and counts the values backward reads
// before the pass (Stats.Saved).
func (r *recomputePass) indexForward() error {
	r.producer = map[string]int{}
	r.consumers = map[string][]*Node{}
	for i, n := range r.fwd {
		for _, o := range n.Outputs {
			if o != "" {
				r.producer[o] = i
			}
		}
		for _, in := range n.Inputs {
			r.consumers[in] = append(r.consumers[in], n)
		}
	}
	for _, n := range r.bwd {
		for _, o := range n.Outputs {
			if _, dup := r.producer[o]; dup && o != "" {
				return n.Errorf("recompute: backward node redefines forward value %q", o)
			}
		}
	}
	r.isOutput = map[string]bool{}
	for _, o := range r.g.Outputs {
		r.isOutput[o.Name] = true
	}
	before := map[string]bool{}
	for _, n := range r.bwd {
		for _, in := range n.Inputs {
			if _, ok := r.producer[in]; ok {
				before[in] = true
			}
		}
	}
	r.st.Saved = len(before)
	return nil
}

// rewriteMetadataReads removes backward reads of forward values that need
// only their dtype or shape, or that another kept value answers: CastLike
// of a constant moves into the forward pass, SumToShape that cannot
// broadcast becomes Identity, and a Relu mask reads the Relu's output.
func (r *recomputePass) rewriteMetadataReads() {
	// Shape inference types the forward values.
	types, _ := InferShapes(r.g, r.opset, nil)
	reluOf := map[string]string{} // Relu input -> its output
	for _, n := range r.fwd {
		if n.OpType == "Relu" && (n.Domain == "" || n.Domain == "ai.onnx") && len(n.Inputs) == 1 && len(n.Outputs) == 1 && n.Outputs[0] != "" {
			reluOf[n.Inputs[0]] = n.Outputs[0]
		}
	}
	r.hoist = map[int][]*Node{}
	kept := make([]*Node, 0, len(r.bwd))
	backwardOut := map[string]*Node{}
	for _, n := range r.bwd {
		if len(n.Inputs) == 2 && metadataRead(n, 1) {
			like := n.Inputs[1]
			p, fromFwd := r.producer[like]
			switch {
			case !fromFwd:
			case n.OpType == "CastLike" && isConstant(r.g, n.Inputs[0]):
				r.hoist[p] = append(r.hoist[p], n)
				r.st.Hoisted++
				for _, o := range n.Outputs {
					backwardOut[o] = n
				}
				continue
			case n.OpType == "SumToShape" && (sameStaticShape(types[n.Inputs[0]], types[like]) || noBroadcastFrom(like, r.consumers[like], types)):
				n = &Node{Name: n.Name, OpType: "Identity", Inputs: []string{n.Inputs[0]}, Outputs: n.Outputs}
				r.st.ShapeReads++
			}
		}
		if y, ok := reluMaskOf(n, reluOf, backwardOut, r.g); ok {
			// Greater(x, 0) for x = Relu's input is Greater(Relu(x), 0):
			// read the output, which the next layer's gradient keeps.
			c := *n
			c.Inputs = []string{y, n.Inputs[1]}
			n = &c
			r.st.ReluMasks++
		}
		for _, o := range n.Outputs {
			backwardOut[o] = n
		}
		kept = append(kept, n)
	}
	r.bwd = kept
}

// backwardReads returns the forward values backward reads; values that
// subgraphs capture by name are kept as they are.
func (r *recomputePass) backwardReads() map[string]bool {
	read := map[string]bool{}
	r.keep = map[string]bool{}
	for _, n := range r.bwd {
		for _, in := range n.Inputs {
			if _, ok := r.producer[in]; ok {
				read[in] = true
			}
		}
		for _, sg := range n.Subgraphs() {
			for _, name := range sg.OuterScopeNames() {
				if _, ok := r.producer[name]; ok {
					// Subgraphs read by name: keep what they capture.
					read[name], r.keep[name] = true, true
				}
			}
		}
	}
	return read
}

// cheap reports whether forward node n may run again in backward.
func (r *recomputePass) cheap(n *Node) bool {
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return false
	}
	if !recomputeCheap[n.OpType] || len(n.Subgraphs()) > 0 {
		return false
	}
	if n.OpType == "BatchNormalization" && r.opset > 0 && r.opset < 14 {
		// Before opset 14 the mode follows from which outputs are
		// named; keep such nodes as they are.
		return false
	}
	return true
}

// chainOf collects the forward nodes that recompute v from kept values,
// inputs and initializers; false when v cannot be recomputed cheaply
// (an expensive or output root, or more than MaxNodes nodes).
func (r *recomputePass) chainOf(v string) (map[int]bool, bool) {
	acc := map[int]bool{}
	var walk func(v string) bool
	walk = func(v string) bool {
		p, ok := r.producer[v]
		if !ok || r.keep[v] {
			return true // input, initializer or kept value
		}
		n := r.fwd[p]
		if !r.cheap(n) || r.isOutput[v] {
			return false // a root that would live longer than it does now
		}
		if acc[p] {
			return true
		}
		acc[p] = true
		if len(acc) > r.opts.MaxNodes {
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

// chooseRecomputed decides, in forward order, which read values are
// recomputed. A value's copies form a private chain back to kept values:
// values recomputed for another reader are recomputed again rather than
// shared, so no copy outlives the backward node that first needs it.
func (r *recomputePass) chooseRecomputed(read map[string]bool) {
	r.recomputed = map[string]bool{}
	r.chains = map[string]map[int]bool{}
	fixed := r.constantValues()
	gelu := r.geluIntermediates(fixed)
	for _, n := range r.fwd {
		for _, v := range n.Outputs {
			if !read[v] || r.keep[v] {
				continue
			}
			if fixed[v] || gelu[v] {
				r.keep[v] = true
				continue
			}
			if acc, ok := r.chainOf(v); !r.opts.ReadsOnly && ok && !r.isOutput[v] && r.cheap(n) {
				r.recomputed[v] = true
				r.chains[v] = acc
				r.st.Recomputed++
			} else {
				r.keep[v] = true
			}
		}
	}
}

// constantValues returns the forward values computed from constants
// alone (Constant nodes, initializers that are not graph inputs, and
// nodes over them): a copy would read the same constants and free
// nothing, and backward reading a copy under another name hides from the
// backends' fusions that it reads the forward's constant (the exact
// GELU's gradient, graph.FuseGeluErfGrad and RecomputeGeluErfGrad, checks
// that its scalars are the forward's: with copies of them ViT-B/16's step
// kept X, the GELU's output and its 1+erf, 534 MB of activations at batch
// 4 against 459 without --recompute).
func (r *recomputePass) constantValues() map[string]bool {
	out := map[string]bool{}
	for _, n := range r.fwd {
		if len(n.Subgraphs()) > 0 || nondeterministic[n.OpType] {
			continue
		}
		all := true
		for _, in := range n.Inputs {
			if in != "" && !isConstant(r.g, in) && !out[in] {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		for _, o := range n.Outputs {
			if o != "" {
				out[o] = true
			}
		}
	}
	return out
}

// geluIntermediates returns the intermediates of the forward pass's exact
// GELUs that their gradient reads, D = X/c (or X·c), Erf(D) and A =
// Erf(D) + c' for constants c, c' (fixed: the constant values): the
// backends' GELU fusions compute them again from X inside the gradient's
// kernel (graph.RecomputeGeluErfGrad), which copies of them in backward
// would keep from matching (ViT-B/16 with --recompute: the GELU and its
// gradient unfused).
func (r *recomputePass) geluIntermediates(fixed map[string]bool) map[string]bool {
	out := map[string]bool{}
	constant := func(name string) bool { return isConstant(r.g, name) || fixed[name] }
	plain := func(n *Node, op string) bool {
		return isPlain(n) && n.OpType == op && len(n.Outputs) == 1 && n.Outputs[0] != ""
	}
	for _, e := range r.fwd {
		if !plain(e, "Erf") || len(e.Inputs) != 1 {
			continue
		}
		i, ok := r.producer[e.Inputs[0]]
		if !ok {
			continue
		}
		d := r.fwd[i]
		if !(plain(d, "Div") || plain(d, "Mul")) || len(d.Inputs) != 2 || !constant(d.Inputs[1]) {
			continue
		}
		out[d.Outputs[0]], out[e.Outputs[0]] = true, true
		for _, a := range r.consumers[e.Outputs[0]] {
			if plain(a, "Add") && len(a.Inputs) == 2 && (constant(a.Inputs[0]) || constant(a.Inputs[1])) {
				out[a.Outputs[0]] = true
			}
		}
	}
	return out
}

// groupByFirstReader groups the recomputed values by the backward node
// that first reads them: the values one node reads first share one set of
// copies, emitted just before it. (Sharing copies across nearby readers
// too saves a few nodes but keeps the copies alive longer, which raised
// the planned peak of cifar_resnet's training step.) It returns the forward
// nodes to copy per emission point (backward index) and each value's
// emission point.
func (r *recomputePass) groupByFirstReader() (map[int]map[int]bool, map[string]int) {
	group := map[int]map[int]bool{}
	groupOf := map[string]int{}
	for i, n := range r.bwd {
		for _, in := range n.Inputs {
			if !r.recomputed[in] {
				continue
			}
			if _, seen := groupOf[in]; seen {
				continue
			}
			groupOf[in] = i
			if group[i] == nil {
				group[i] = map[int]bool{}
			}
			for p := range r.chains[in] {
				group[i][p] = true
			}
		}
	}
	return group, groupOf
}

// emit returns the new node list: forward (with hoisted CastLikes), then
// backward with each group's copies, in forward order, before its first
// reader, and backward reads renamed to the copies.
func (r *recomputePass) emit(group map[int]map[int]bool, groupOf map[string]int) []*Node {
	copyName := func(v string, point int) string { return fmt.Sprintf("%s/recomputed%d", v, point) }
	out := make([]*Node, 0, len(r.g.Nodes)+len(r.recomputed))
	for i, n := range r.fwd {
		out = append(out, n)
		out = append(out, r.hoist[i]...)
	}
	for i, n := range r.bwd {
		if nodes, ok := group[i]; ok {
			ps := make([]int, 0, len(nodes))
			for p := range nodes {
				ps = append(ps, p)
			}
			slices.Sort(ps)
			copied := map[string]bool{}
			for _, p := range ps {
				f := r.fwd[p]
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
				r.st.Copies++
			}
		}
		renamed := false
		for _, in := range n.Inputs {
			renamed = renamed || r.recomputed[in]
		}
		if renamed {
			c := *n
			c.Inputs = slices.Clone(n.Inputs)
			for j, in := range c.Inputs {
				if r.recomputed[in] {
					c.Inputs[j] = copyName(in, groupOf[in])
				}
			}
			n = &c
		}
		out = append(out, n)
	}
	return out
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
