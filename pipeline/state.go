package pipeline

import (
	"fmt"
	"sort"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Weights returns the model's trainable parameters and buffers under their
// ONNX initializer names, gathered from the stages that own them (a shared
// parameter from its first stage; the copies are equal). The tensors are
// the stages' own: copy them to keep them past the next step.
func (r *Runner) Weights() (params, buffers map[string]*graph.Tensor) {
	params, buffers = map[string]*graph.Tensor{}, map[string]*graph.Tensor{}
	for _, sp := range r.Stages {
		if sp == nil {
			continue
		}
		for _, p := range sp.Params {
			if _, ok := params[p.Name]; !ok {
				params[p.Name] = p.Value
			}
		}
		for name, t := range sp.Buffers {
			if _, ok := buffers[name]; !ok {
				buffers[name] = t
			}
		}
	}
	return params, buffers
}

// LoadWeights copies parameters and buffers by ONNX name into every stage
// that holds them, whatever layout (stage count, or none) saved them.
// Every parameter and buffer of the pipeline must be given, with its
// shape; names the pipeline does not hold are an error too.
func (r *Runner) LoadWeights(params, buffers map[string]*graph.Tensor) error {
	own, ownBuf := r.Weights()
	var problems []string
	check := func(kind string, mine, theirs map[string]*graph.Tensor) {
		for name, t := range mine {
			u, ok := theirs[name]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s %q is missing", kind, name))
			case !graph.SameShape(t.Shape, u.Shape) || u.DType != t.DType:
				problems = append(problems, fmt.Sprintf("%s %q is %v%v, the model's is %v%v", kind, name, u.DType, u.Shape, t.DType, t.Shape))
			}
		}
		for name := range theirs {
			if _, ok := mine[name]; !ok && r.cfg.Transport == nil { // a rank holds only its own
				problems = append(problems, fmt.Sprintf("%s %q is not in the model", kind, name))
			}
		}
	}
	check("parameter", own, params)
	check("buffer", ownBuf, buffers)
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("pipeline: the weights do not fit the model: %s", strings.Join(problems, "; "))
	}
	for _, sp := range r.Stages {
		if sp == nil {
			continue
		}
		for _, p := range sp.Params {
			copy(p.Value.Float32s(), params[p.Name].Float32s())
		}
		for name, t := range sp.Buffers {
			copy(t.Float32s(), buffers[name].Float32s())
		}
	}
	return nil
}

// OptimizerState merges the stages' optimizer states into the form one
// process's optimizer has: "<param>/<slot>" for every parameter (once),
// plus the optimizer-wide entries ("step", "lr") of the first stage.
func (r *Runner) OptimizerState() map[string]*graph.Tensor {
	out := map[string]*graph.Tensor{}
	for _, o := range r.opts {
		if o == nil {
			continue
		}
		for k, t := range o.State() {
			if _, ok := out[k]; !ok {
				out[k] = t
			}
		}
	}
	return out
}

// LoadOptimizerState gives each stage's optimizer the entries of its own
// parameters and the optimizer-wide ones, from a state OptimizerState (or
// one process's optimizer) produced.
func (r *Runner) LoadOptimizerState(st map[string]*graph.Tensor) error {
	for s, o := range r.opts {
		if o == nil {
			continue
		}
		mine := r.ownedNames(s) // with ZeRO, only what this replica steps
		part := map[string]*graph.Tensor{}
		for k, t := range st {
			i := strings.LastIndexByte(k, '/')
			if i < 0 || mine[k[:i]] {
				part[k] = t
			}
		}
		if err := o.LoadState(part); err != nil {
			return fmt.Errorf("pipeline: stage %d: %w", s, err)
		}
	}
	return nil
}

// ReleaseOtherStages drops this process's references to the model's
// parameters, which its stages hold copies of, keeping shape-only
// placeholders (nil data) in the plan's graph and the model it was cut
// from; frozen parameters too (PartitionOptions.TrainOnly: the stages
// that read one hold it as a constant of their own). The model's other
// tensors are copied, since the importer's are views of the whole file's
// bytes, which they would keep alive. The process then holds only its own
// stages' tensors. Only for a Runner with a Transport; before saving the
// model from this process, put the parameters back (frozen ones from the
// model file).
func (r *Runner) ReleaseOtherStages() {
	if r.cfg.Transport == nil {
		return
	}
	params := trainableParams(r.Plan.g, nil) // trained and frozen alike
	for _, st := range r.Plan.Stages {
		for _, name := range st.Params {
			params[name] = true
		}
	}
	attrs := map[*graph.Attr]*graph.Attr{}
	for _, g := range []*graph.Graph{r.Plan.g, r.Plan.model.Graph} {
		for name, t := range g.Initializers {
			if t == nil || t.Data == nil {
				continue
			}
			if params[name] {
				g.Initializers[name] = &graph.Tensor{DType: t.DType, Shape: append([]int(nil), t.Shape...)}
			} else {
				g.Initializers[name] = t.Clone()
			}
		}
		for _, n := range g.Nodes {
			for k, a := range n.Attrs {
				if a == nil || a.T == nil {
					continue
				}
				if c, ok := attrs[a]; ok {
					n.Attrs[k] = c
					continue
				}
				c := detachAttr(a)
				attrs[a], attrs[c] = c, c
				n.Attrs[k] = c
			}
		}
	}
}
