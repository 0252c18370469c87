package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Evaluation with pipelining (--val-data): each stage also compiles its
// nodes in inference mode (BatchNormalization on its running statistics,
// Dropout off; the last stage with the loss and the model output), and a
// forward-only schedule runs the batches through the stages in order:
// each rank takes a batch's activations from the rank before, runs its
// stages and passes the result on, so the ranks work on successive
// batches at once. Across processes the activations travel over the
// transport under keys of their own (a negative step number).

// buildEval compiles the stage's evaluation program from g, the stage
// graph before its loss and objective are added (BuildStage).
func (sp *StageProgram) buildEval(be backend.Backend, m *graph.Model, g *graph.Graph, cfg StageConfig, opset int64, seed int64) error {
	eg := graph.NewGraph(g.Name + "/eval")
	for _, n := range g.Nodes {
		cn := *n
		cn.Inputs = append([]string{}, n.Inputs...)
		cn.Outputs = append([]string{}, n.Outputs...)
		cn.Attrs = map[string]*graph.Attr{}
		for k, v := range n.Attrs {
			cn.Attrs[k] = detachAttr(v)
		}
		switch cn.OpType {
		case "BatchNormalization":
			if cn.AttrInt("training_mode", 0) == 1 {
				cn.SetAttr(graph.IntAttr("training_mode", 0))
				cn.Outputs = cn.Outputs[:1]
			}
		case "Dropout":
			if len(cn.Inputs) > 2 {
				cn.Inputs = cn.Inputs[:2] // no training_mode: off
			}
			cn.Outputs = cn.Outputs[:1]
		}
		eg.Nodes = append(eg.Nodes, &cn)
	}
	eg.Inputs = append([]*graph.ValueInfo{}, g.Inputs...)
	for k, v := range g.Initializers {
		eg.Initializers[k] = v
	}
	var outs []string
	if sp.Last {
		out := cfg.LossOutput
		if out == "" {
			out = m.Graph.Outputs[0].Name
		}
		if cfg.Loss != nil {
			loss, labels, ldt, err := cfg.Loss(eg, out, opset)
			if err != nil {
				return fmt.Errorf("evaluation: %w", err)
			}
			sp.evalLoss, sp.evalOutput, sp.evalLabels, sp.evalLabelDType = loss, out, labels, ldt
			outs = []string{loss, out}
		} else {
			sp.evalLoss = out
			outs = []string{out}
		}
	} else {
		outs = append(outs, sp.Outputs...)
	}
	for _, o := range outs {
		eg.Outputs = append(eg.Outputs, &graph.ValueInfo{Name: o})
	}
	if cfg.AutoCast != nil {
		if err := cfg.AutoCast(eg, opset); err != nil {
			return fmt.Errorf("evaluation: %w", err)
		}
	}
	em := &graph.Model{IRVersion: m.IRVersion, Opsets: m.Opsets, Graph: eg, Functions: m.Functions}
	exe, err := be.Compile(em, backend.CompileOptions{Seed: seed, Tuning: cfg.Tuning})
	if err != nil {
		return fmt.Errorf("compiling the evaluation program: %w", err)
	}
	ph := &phase{name: "evaluation", exe: exe, outputs: outs, nodes: len(eg.Nodes)}
	for _, in := range eg.Inputs {
		ph.inputs = append(ph.inputs, in.Name)
	}
	sp.eval = ph
	return nil
}

// Evaluate runs the stage's evaluation program on one batch: env holds
// the received activations, the batch arrays the stage reads and, on the
// last stage, the labels under Labels; afterwards it holds the outputs to
// send, or the loss (and the model output).
func (sp *StageProgram) Evaluate(ctx context.Context, env Env) error {
	if sp.eval == nil {
		return fmt.Errorf("pipeline: stage %d has no evaluation program (StageConfig.Eval)", sp.Index)
	}
	if sp.Last && sp.evalLabels != "" {
		if l, ok := env[sp.evalLabels]; ok && l.DType != sp.evalLabelDType {
			c, err := castTensor(l, sp.evalLabelDType)
			if err != nil {
				return fmt.Errorf("pipeline: stage %d: labels: %w", sp.Index, err)
			}
			env[sp.evalLabels] = c
		}
	}
	return sp.run(ctx, sp.eval, env)
}

// EvalResult is what the last stage computed of one evaluation batch: the
// loss and, for a loss appended to the model (cross entropy, ...), the
// model output it was computed from.
type EvalResult struct {
	Loss   float64
	Output *graph.Tensor
}

// Evaluate runs batches forward in inference mode through the stages (a
// forward-only schedule) and returns each batch's result where the last
// stage runs: in this process for an in-process pipeline, or in the
// process holding it (nil elsewhere). The stages need StageConfig.Eval.
func (r *Runner) Evaluate(ctx context.Context, batches []Batch) ([]EvalResult, error) {
	r.evalSeq++
	seq := -r.evalSeq // never a training step's number
	last := len(r.Plan.Stages) - 1
	var results []EvalResult
	tr := r.cfg.Transport
	for b, batch := range batches {
		var acts message // the previous stage's outputs
		for s := range r.Plan.Stages {
			rank := r.Schedule.RankOf(s)
			if tr != nil && rank != r.cfg.Rank {
				acts = nil
				continue
			}
			if s > 0 && acts == nil { // from another process
				prev := r.Schedule.RankOf(s - 1)
				msg, err := r.recvWithin(ctx, tr, prev, MsgKey{Step: seq, Kind: Forward, Micro: b, Stage: s})
				if err != nil {
					if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
						err = fmt.Errorf("%w: rank %d waited %v for the activations of evaluation batch %d, stage %d, from rank %d", ErrTimeout, rank, r.cfg.RecvTimeout, b, s, prev)
					}
					return nil, fmt.Errorf("pipeline: evaluation: %w", err)
				}
				acts = msg
			}
			sp := r.Stages[s]
			env := Env{}
			for k, v := range acts {
				env[k] = v
			}
			for _, name := range sp.DataInputs {
				t, ok := batch.Inputs[name]
				if !ok {
					return nil, fmt.Errorf("pipeline: evaluation batch %d has no array for input %q of stage %d", b, name, s)
				}
				env[name] = t
			}
			if s == last && sp.evalLabels != "" {
				if batch.Labels == nil {
					return nil, fmt.Errorf("pipeline: evaluation batch %d has no labels for the loss", b)
				}
				env[sp.evalLabels] = batch.Labels
			}
			if err := sp.Evaluate(ctx, env); err != nil {
				return nil, fmt.Errorf("pipeline: evaluation batch %d: %w", b, err)
			}
			if s == last {
				res := EvalResult{Loss: env[sp.evalLoss].Float(0)}
				if sp.evalOutput != "" {
					res.Output = env[sp.evalOutput]
				}
				results = append(results, res)
				continue
			}
			acts = message{}
			for _, o := range sp.Outputs {
				acts[o] = env[o]
			}
			if next := r.Schedule.RankOf(s + 1); tr != nil && next != r.cfg.Rank {
				if err := tr.Send(ctx, next, MsgKey{Step: seq, Kind: Forward, Micro: b, Stage: s + 1}, acts); err != nil {
					return nil, fmt.Errorf("pipeline: evaluation batch %d, stage %d: %w", b, s, err)
				}
				acts = nil
			}
		}
	}
	return results, nil
}
