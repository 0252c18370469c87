package train

import (
	"context"
	"fmt"
	"sort"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// GradStateName is the name of the state buffer that holds a parameter's
// gradient sum in a program built with GradSums.
func GradStateName(param string) string { return "onnxtrain/grad_sum/" + param }

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// StartWindow makes the next micro-batch of a GradSums program replace the
// gradient sums instead of adding to them.
func (p *Program) StartWindow() { p.freshNext = true }

// Executable is the compiled training step, whose state other programs
// (an optimizer's step, optim.Binder) share.
func (p *Program) Executable() backend.Executable { return p.trainExe }

// Backend is the backend the program runs on.
func (p *Program) Backend() backend.Backend { return p.be }

// stateful returns the training step's state interface.
func (p *Program) stateful() (backend.Stateful, error) {
	st, ok := p.trainExe.(backend.Stateful)
	if !ok {
		return nil, fmt.Errorf("train: the %s backend's executables keep no state", p.cfg.Backend)
	}
	return st, nil
}

// GradSums returns the gradient sums of a GradSums program as host
// tensors, one per Params entry: the state buffers themselves where the
// backend keeps state in host memory, otherwise copies read from it.
func (p *Program) GradSums() ([]*graph.Tensor, error) {
	if !p.cfg.GradSums {
		return nil, fmt.Errorf("train: the program was built without GradSums")
	}
	st, err := p.stateful()
	if err != nil {
		return nil, err
	}
	for i, prm := range p.Params {
		if h := st.HostState(GradStateName(prm.Name)); h != nil {
			p.gradSums[i] = h
			continue
		}
		if err := st.ReadState(GradStateName(prm.Name), p.gradSums[i]); err != nil {
			return nil, err
		}
	}
	return p.gradSums, nil
}

// SyncToHost makes Params[i].Value and Buffers hold the program's current
// state (a no-op where they are the state buffers, or where no step was
// compiled: a program that only carries host tensors, as the pipeline's
// whole-model view for --output).
func (p *Program) SyncToHost() error {
	if p.trainExe == nil {
		return nil
	}
	st, err := p.stateful()
	if err != nil {
		return err
	}
	for _, prm := range p.Params {
		if err := st.ReadState(prm.Name, prm.Value); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	for name, t := range p.Buffers {
		if err := st.ReadState(name, t); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	return nil
}

// SyncFromHost writes Params[i].Value and Buffers into the program's state
// (after a checkpoint was loaded into them; a no-op where they are the
// state buffers).
func (p *Program) SyncFromHost() error {
	if p.trainExe == nil {
		return nil
	}
	st, err := p.stateful()
	if err != nil {
		return err
	}
	for _, prm := range p.Params {
		if err := st.WriteState(prm.Name, prm.Value); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	for name, t := range p.Buffers {
		if err := st.WriteState(name, t); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	return nil
}

// StateTraffic reports the bytes moved between the program's state and
// the host (or copied for updates) so far.
func (p *Program) StateTraffic() backend.StateTraffic {
	if st, ok := p.trainExe.(backend.Stateful); ok {
		return st.StateTraffic()
	}
	return backend.StateTraffic{}
}

// gradOp runs one of the gradient-transforming ops (graph.ClipGradNormOp,
// ClipGradValueOp, UnscaleGradsOp) over the gradient sums, in place in
// the program's state, with scalar as its scalar input; it returns the
// op's leading scalar output (nil for ClipGradValue). The op's program is
// compiled on first use.
func (p *Program) gradOp(ctx context.Context, op string, scalar float32) (*graph.Tensor, error) {
	if !p.cfg.GradSums {
		return nil, fmt.Errorf("train: %s needs a program built with GradSums", op)
	}
	exe := p.gradExes[op]
	if exe == nil {
		g := &graph.Graph{Name: "onnxtrain/" + op, Initializers: map[string]*graph.Tensor{}}
		g.Inputs = []*graph.ValueInfo{{Name: "onnxtrain/scalar", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}}}
		n := &graph.Node{Name: "onnxtrain/" + op, OpType: op, Domain: graph.InternalDomain, Inputs: []string{"onnxtrain/scalar"},
			Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", int64(len(p.Params)))}}
		if op != graph.ClipGradValueOp {
			n.Outputs = append(n.Outputs, "onnxtrain/result")
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: "onnxtrain/result"})
		}
		var state []backend.StateSpec
		for i, prm := range p.Params {
			name := GradStateName(prm.Name)
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: typeOf(prm.Value)})
			n.Inputs = append(n.Inputs, name)
			n.Outputs = append(n.Outputs, name+"/new")
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: name + "/new"})
			state = append(state, backend.StateSpec{Name: name, Init: p.gradSums[i], UpdatedBy: name + "/new"})
		}
		g.Nodes = []*graph.Node{n}
		m := &graph.Model{IRVersion: p.Model.IRVersion, Opsets: map[string]int64{"": p.Model.Opset(), graph.InternalDomain: 1}, Graph: g}
		var err error
		if exe, err = p.be.Compile(m, backend.CompileOptions{State: state, ShareState: p.trainExe, Tuning: p.cfg.Tuning}); err != nil {
			return nil, fmt.Errorf("train: compiling %s: %w", op, err)
		}
		if p.gradExes == nil {
			p.gradExes = map[string]backend.Executable{}
		}
		p.gradExes[op] = exe
	}
	sc := &p.scratch
	if sc.opScalar == nil {
		sc.opScalar = graph.FromFloat32([]float32{0})
		sc.opFeeds = map[string]*graph.Tensor{}
	}
	sc.opScalar.Float32s()[0] = scalar
	sc.opFeeds["onnxtrain/scalar"] = sc.opScalar
	out, err := exe.Run(ctx, sc.opFeeds)
	if err != nil {
		return nil, fmt.Errorf("train: %s: %w", op, err)
	}
	if err := p.refreshHostGrads(); err != nil { // program_device.go
		return nil, fmt.Errorf("train: %s: %w", op, err)
	}
	return out["onnxtrain/result"], nil
}

// ClipGradNorm scales the gradient sums so that their total L2 norm is at
// most maxNorm (torch.nn.utils.clip_grad_norm_), in the program's state,
// and returns the norm before clipping.
func (p *Program) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	t, err := p.gradOp(ctx, graph.ClipGradNormOp, float32(maxNorm))
	if err != nil {
		return 0, err
	}
	return t.Float(0), nil
}

// ClipGradValue clamps the gradient sums to [-v, v] in the program's state.
func (p *Program) ClipGradValue(ctx context.Context, v float64) error {
	_, err := p.gradOp(ctx, graph.ClipGradValueOp, float32(v))
	return err
}

// UnscaleGrads multiplies the gradient sums by invScale in the program's
// state and reports whether any element was inf or NaN before.
func (p *Program) UnscaleGrads(ctx context.Context, invScale float32) (bool, error) {
	t, err := p.gradOp(ctx, graph.UnscaleGradsOp, invScale)
	if err != nil {
		return false, err
	}
	return t.Data.([]bool)[0], nil
}
