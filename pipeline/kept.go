package pipeline

import (
	"fmt"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// What a stage keeps per micro-batch, from its own training graph.
//
// The partitioner's search counts every output of a stage's nodes as an
// activation (the cost model). What a micro-batch's forward pass really
// leaves for the backward is narrower and wider at once: only the values
// the backward reads (after recomputation and the fused weight
// transposes), but also the activations received from the previous stage,
// the data and what is sent on. keptBytes builds the stage's training graph
// as BuildStage does, without compiling it, and sums the bytes of exactly
// the values the forward pass hands over: the runner's Env after Forward.

// keptBytes is the bytes one micro-batch's forward pass of stage s keeps
// until its backward pass, under cfg (the loss, Recompute, SplitBackward
// and AutoCast shape the graph; Eval is ignored), and the most bytes one
// of its passes holds at once beside that (its values from first write to
// last read, in node order, outputs included: what a pass's memory plan
// places).
func (p *Plan) keptBytes(s int, cfg StageConfig) (kept, pass int64, err error) {
	cfg.Eval = false
	sg, err := buildStageGraph(p, s, cfg, nil, true)
	if err != nil {
		return 0, 0, err
	}
	g, sp := sg.g, sg.sp
	// The forward pass's outputs (compilePhases's): its targets and what
	// the later passes read of it.
	keep := handedOn(g, sg.phases)[0]
	produced := map[string]bool{}
	for _, i := range sg.phases[0] {
		for _, o := range g.Nodes[i].Outputs {
			produced[o] = true
		}
	}
	for _, v := range sg.phaseOuts[0] {
		if produced[v] {
			keep[v] = true
		}
	}
	// What the runner puts in beside them: received activations, data,
	// labels (the loss scale's 4 bytes are not counted).
	for _, v := range sp.Inputs {
		keep[v] = true
	}
	for _, v := range sp.DataInputs {
		keep[v] = true
	}
	if sp.Labels != "" {
		keep[sp.Labels] = true
	}

	known := map[string]*graph.Type{}
	for _, in := range g.Inputs {
		switch {
		case p.types[in.Name] != nil:
			known[in.Name] = p.types[in.Name]
		case p.known[in.Name] != nil:
			known[in.Name] = p.known[in.Name]
		case strings.HasPrefix(in.Name, gradOfPrefix) && p.types[strings.TrimPrefix(in.Name, gradOfPrefix)] != nil:
			known[in.Name] = p.types[strings.TrimPrefix(in.Name, gradOfPrefix)] // an output's gradient
		case in.Type != nil && in.Type.Kind == graph.KindTensor && in.Type.HasShape:
			known[in.Name] = shapeType(in.Type.DType, boundShape(in.Type, p.opts.BatchSize))
		case in.Type != nil:
			known[in.Name] = in.Type
		}
	}
	types, err := graph.InferShapes(g, p.model.Opset(), known)
	if err != nil {
		return 0, 0, err
	}
	// sizeOf: the whole model's inference knows a value the stage graph
	// cannot size (a Reshape whose shape is computed before the cut).
	sizeOf := func(v string) (int64, bool) {
		n, ok := typeBytes(p.types[v])
		if !ok {
			n, ok = typeBytes(types[v])
		}
		if !ok {
			n, ok = typeBytes(known[v])
		}
		return n, ok
	}
	for v := range keep {
		n, ok := sizeOf(v)
		if !ok && v == sp.Labels { // an appended loss's labels: one per example
			n, ok = int64(p.opts.BatchSize*max(sp.labelDType.Size(), 1)), true
		}
		if !ok {
			return 0, 0, fmt.Errorf("no shape for %q", v)
		}
		kept += n
	}
	inPlace := map[string]bool{} // the gradient sums' updates: their state's buffer, counted with the parameters
	for _, st := range sg.sumState {
		inPlace[st.UpdatedBy] = true
	}
	for k, idx := range sg.phases {
		outs := map[string]bool{}
		for _, v := range sg.phaseOuts[k] {
			outs[v] = true
		}
		last := map[string]int{} // value -> position of its last reader in the pass
		for j, i := range idx {
			for _, in := range nodeReads(g.Nodes[i]) {
				last[in] = j
			}
		}
		var live, most int64
		size := map[string]int64{}
		for j, i := range idx {
			for _, o := range g.Nodes[i].Outputs {
				if o == "" || inPlace[o] {
					continue
				}
				n, _ := sizeOf(o) // an unsized value (a shape, a scalar) counts nothing
				size[o] = n
				live += n
			}
			most = max(most, live)
			for _, in := range nodeReads(g.Nodes[i]) {
				if n, mine := size[in]; mine && last[in] == j && !outs[in] && !keep[in] {
					live -= n
					delete(size, in)
				}
			}
			for _, o := range g.Nodes[i].Outputs { // never read
				if n, mine := size[o]; mine && o != "" && !outs[o] && !keep[o] {
					if _, read := last[o]; !read {
						live -= n
						delete(size, o)
					}
				}
			}
		}
		pass = max(pass, most)
	}
	return kept, pass, nil
}

// typeBytes is the size of a tensor of type t (false when its shape is
// not fully known).
func typeBytes(t *graph.Type) (int64, bool) {
	if t == nil || t.Kind != graph.KindTensor || !t.HasShape {
		return 0, false
	}
	s := knownShape(t)
	if s == nil && len(t.Shape) > 0 {
		return 0, false
	}
	n := int64(1)
	for _, d := range s {
		n *= int64(d)
	}
	return n * int64(max(t.DType.Size(), 1)), true
}

// RefineMemory replaces each stage's activation estimate by what its
// training graph under cfg keeps per micro-batch, and its estimate of a
// pass's transient memory (one micro-batch's activations) by the largest
// pass's (keptBytes); EstMemoryBytes follows, and checks PartitionOptions.StageMemory
// again. A stage whose graph cannot be sized keeps the cost model's figure.
func (p *Plan) RefineMemory(cfg StageConfig) error {
	for s, st := range p.Stages {
		kept, pass, err := p.keptBytes(s, cfg)
		if err != nil {
			continue
		}
		st.EstMemoryBytes += (kept-st.ActivationBytes)*int64(p.inflight(s)) + pass - st.ActivationBytes
		st.ActivationBytes, st.PassBytes = kept, pass
		if p.opts.StageMemory > 0 && st.EstMemoryBytes > p.opts.StageMemory {
			return fmt.Errorf("pipeline: %w: stage %d needs about %d bytes, over --stage-memory %d", ErrPartition, s, st.EstMemoryBytes, p.opts.StageMemory)
		}
	}
	return nil
}

// inflight is the number of micro-batches stage s holds at once (the
// plan's InFlight, else 1F1B's S-s).
func (p *Plan) inflight(s int) int {
	if p.opts.InFlight != nil {
		return p.opts.InFlight(s, len(p.Stages))
	}
	return len(p.Stages) - s
}
