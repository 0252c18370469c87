package train

import "fmt"

// StepPlan is the memory of one training step planned from shapes alone
// (Program.PlanFromShapes), in bytes.
type StepPlan struct {
	// PeakBytes is the planned peak of the step besides its inputs and
	// parameters: activations, gradients, everything its kernels produce
	// (what PlannedBytes measures on a real step).
	PeakBytes int64
	// RecordingBytes is what the first step of a shape, which records the
	// backend's memory plan, holds instead of PeakBytes (the CPU
	// recorder's heap allocations).
	RecordingBytes int64
	// ScratchBytes is the kernels' scratch buffers the backend keeps
	// between steps (the CPU convolutions' free lists).
	ScratchBytes int64
	// Unsized names values shape inference could not size.
	Unsized []string
}

// shapePlanner is a compiled step that can plan its memory from shapes
// (the CPU backend's Executable.PlanShapes).
type shapePlanner interface {
	PlanShapes(shapes map[string][]int) (peak, recording, scratch int64, unsized []string, err error)
}

// PlanFromShapes plans the memory of one training step on a batch whose
// data inputs have the shapes in data and whose labels have shape labels
// (ignored when the loss takes none), without running the step or
// allocating the batch. The parameters' and buffers' shapes are the
// model's. Backends that cannot plan from shapes return an error.
func (p *Program) PlanFromShapes(data map[string][]int, labels []int) (StepPlan, error) {
	sp, ok := p.trainExe.(shapePlanner)
	if !ok {
		return StepPlan{}, fmt.Errorf("train: the %s backend does not plan memory from shapes", p.cfg.Backend)
	}
	shapes := make(map[string][]int, len(data)+len(p.Params)+len(p.Buffers)+2)
	for _, name := range p.DataInputs {
		s, ok := data[name]
		if !ok {
			return StepPlan{}, fmt.Errorf("train: planning from shapes: no shape for graph input %q", name)
		}
		shapes[name] = s
	}
	if p.NeedsLabels {
		shapes[labelsInput] = labels
	}
	shapes[lossScaleInput] = []int{}
	for _, prm := range p.Params {
		shapes[prm.Name] = prm.Value.Shape
	}
	for name, t := range p.Buffers {
		shapes[name] = t.Shape
	}
	peak, recording, scratch, unsized, err := sp.PlanShapes(shapes)
	if err != nil {
		return StepPlan{}, fmt.Errorf("train: planning from shapes: %w", err)
	}
	return StepPlan{PeakBytes: peak, RecordingBytes: recording, ScratchBytes: scratch, Unsized: unsized}, nil
}
