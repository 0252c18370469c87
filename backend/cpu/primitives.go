package cpu

import (
	"sort"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// disableFusedKeeps are the ops DisableFused still runs with their own
// kernel although they have a lowering: the primitive set before the
// primitive-only mode existed, so that DisableFused keeps comparing fused
// kernels with the same decompositions it always did.
var disableFusedKeeps = map[string]bool{
	"Neg": true, "Abs": true, "Reciprocal": true, "Sigmoid": true, "Relu": true, "Not": true,
	"And": true, "Or": true, "Greater": true, "Ceil": true, "ReduceMean": true, "ReduceMin": true,
	"Softmax": true, "LogSoftmax": true, "Sqrt": true, "Tanh": true, "Erf": true, "Sin": true,
	"Cos": true, "Floor": true, "Identity": true,
}

// lowerToPrimitives lowers every node that is not in the primitive or the
// extended set (CompileOptions.PrimitivesOnly). A node with no lowering,
// or whose lowering refuses its variant, keeps its kernel and is recorded
// as a gap (PrimitiveGaps).
//
// The general plan (record false) may keep nodes whose lowering needs
// static shapes: they are lowered in the plans specialised to input shapes,
// which record their gaps.
func (e *Executable) lowerToPrimitives(g *graph.Graph, record bool) error {
	return graph.LowerGraphFallback(g, e.opset, func(n *graph.Node) bool {
		if _, ok := kern.Lookup(n.Domain, n.OpType, e.opset); !ok {
			return false
		}
		return graph.IsPrimitive(n.Domain, n.OpType) || graph.IsExtended(n.Domain, n.OpType)
	}, func(n *graph.Node, _ error) bool {
		if _, ok := kern.Lookup(n.Domain, n.OpType, e.opset); !ok {
			return false
		}
		if n.Domain == "ai.onnx.preview.training" && n.OpType == "Gradient" {
			return false
		}
		if !record {
			return true
		}
		e.gapMu.Lock()
		if e.gaps == nil {
			e.gaps = map[string]bool{}
		}
		e.gaps[opKey(n)] = true
		e.gapMu.Unlock()
		return true
	})
}

func opKey(n *graph.Node) string {
	if n.Domain == "" || n.Domain == "ai.onnx" {
		return n.OpType
	}
	return n.Domain + ":" + n.OpType
}

// PrimitiveGaps lists the ops that, compiled with PrimitivesOnly, still
// run with a kernel outside the primitive and extended sets because their
// lowering is missing or does not cover the node's variant (domain:op
// outside ai.onnx), sorted.
func (e *Executable) PrimitiveGaps() []string {
	e.gapMu.Lock()
	defer e.gapMu.Unlock()
	out := make([]string, 0, len(e.gaps))
	for k := range e.gaps {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// generalPlan is the plan for inputs whose shapes could not be specialised.
// Under PrimitivesOnly, the nodes it kept because their lowering needs
// static shapes become gaps now that it runs.
func (e *Executable) generalPlan() *plan {
	if e.opts.PrimitivesOnly {
		e.gapMu.Lock()
		if e.gaps == nil {
			e.gaps = map[string]bool{}
		}
		for _, st := range e.main.steps {
			n := st.node
			if !graph.IsPrimitive(n.Domain, n.OpType) && !graph.IsExtended(n.Domain, n.OpType) {
				e.gaps[opKey(n)] = true
			}
		}
		e.gapMu.Unlock()
	}
	return e.main
}
