package backend

import "github.com/onnxtrain/onnxtrain/graph"

// FusedOpsDeclarer is implemented by a backend that has kernels for fused
// ops (domain graph.FusedDomain: graph.TransposedMatMul, graph.ReluGrad,
// ...). The pass pipeline (graph/passes) runs a fusion only when the
// backend declares every op the fusion makes, and keeps the rest of the
// graph decomposed; a backend that does not implement the interface
// declares none and runs the decomposed graph.
type FusedOpsDeclarer interface {
	// FusedOps lists the fused ops the backend has kernels for.
	FusedOps() []string
}

// DeclaredFusedOps returns the fused ops b declares, as a set (empty when
// it declares none). Under CompileOptions.DisableFused or PrimitivesOnly a
// backend uses none of them, whatever it declares.
func DeclaredFusedOps(b Backend, opts CompileOptions) map[string]bool {
	out := map[string]bool{}
	d, ok := b.(FusedOpsDeclarer)
	if !ok || opts.DisableFused || opts.PrimitivesOnly {
		return out
	}
	for _, op := range d.FusedOps() {
		out[op] = true
	}
	return out
}

// PeakReporter is implemented by executables whose memory plan knows its
// peak: the most bytes the latest Run's input shapes hold at once (0
// before their first run).
type PeakReporter interface {
	PeakBytes() int64
}

// PlanInspector is implemented by executables that show the nodes they
// run, after every compile-time pass. The backend test kit
// (backend/backendtest) reads it to check which fusions applied.
type PlanInspector interface {
	// CompiledNodes are the nodes of the compiled graph, in run order.
	CompiledNodes() []*graph.Node
	// LastRunNodes are the nodes the latest Run executed (for a backend
	// that specialises the graph to the fed shapes, the specialised
	// graph's), or nil before the first Run.
	LastRunNodes() []*graph.Node
}

// MemoryPlanReporter is implemented by executables that plan their memory
// (the CPU's arenas): MemoryPlanned reports whether the latest Run ran in
// the plan. The backend test kit checks that such runs give the unplanned
// runs' results bit for bit.
type MemoryPlanReporter interface {
	MemoryPlanned() bool
}
