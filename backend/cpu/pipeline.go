package cpu

import (
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/graph/passes"
)

// buildPipelines makes the executable's pass pipelines (graph/passes):
// the standard compile-time passes for the main graph, the specialised
// passes for its copies specialised to input shapes, and lowering for
// subgraphs. Their order constraints are checked here.
func (e *Executable) buildPipelines() error {
	var err error
	if e.compilePipe, err = passes.New("compile", passes.CompilePasses()...); err != nil {
		return err
	}
	spec := passes.SpecialisedPasses()
	if keepIdentityArith.Load() {
		kept := spec[:0]
		for _, p := range spec {
			if p.Name != passes.DropIdentityArith {
				kept = append(kept, p)
			}
		}
		spec = kept
	}
	if e.specialisedPipe, err = passes.Continue(e.compilePipe, "specialise", spec...); err != nil {
		return err
	}
	e.subgraphPipe, err = passes.New("subgraph", passes.SubgraphPasses()...)
	return err
}

// keepIdentityArith leaves drop-identity-arithmetic out of the executables
// compiled while it is set: the tests compare the steps with and without
// it bit for bit.
var keepIdentityArith atomic.Bool

// passEnv is the environment of the pipelines: the main graph (top) folds
// its constants unless NoFold (where its inputs are known to be fed) and
// records no primitive gaps (its specialised copies do); fusions run where
// the backend declares their ops (none under DisableFused or
// PrimitivesOnly).
func (e *Executable) passEnv(top bool, funcs map[string]*graph.Function) *passes.Env {
	env := &passes.Env{Opset: e.opset, Functions: funcs, Fused: e.fused, Evaluate: e.evaluate, RecomputeAttention: e.opts.RecomputeAttention}
	if top && e.opts.NoFold {
		env.Evaluate = nil
	}
	record := !top || e.opts.NoFold
	env.Lower = func(g *graph.Graph) error { return e.lower(g, record) }
	return env
}

// lower lowers the ops of g that have no kernel here to primitives, with
// constants typed like their inputs: under DisableFused also every op with
// a lowering (but disableFusedKeeps), and under PrimitivesOnly every op
// outside the primitive and extended sets (lowerToPrimitives, which
// records gaps when record is set).
func (e *Executable) lower(g *graph.Graph, record bool) error {
	if e.opts.PrimitivesOnly {
		return e.lowerToPrimitives(g, record)
	}
	return graph.LowerGraph(g, e.opset, func(n *graph.Node) bool {
		if n.Domain == "ai.onnx.preview.training" && n.OpType == "Gradient" {
			return false
		}
		_, ok := kern.Lookup(n.Domain, n.OpType, e.opset)
		return ok && !(e.opts.DisableFused && graph.HasLowering(n.OpType) && !disableFusedKeeps[n.OpType])
	})
}
