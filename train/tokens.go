package train

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train/data"
)

// openTokens opens .bin token data for prog. The token input is
// --input-name or the first data input; with a loss that takes labels the
// next-token targets are the labels, and with a graph that computes its own
// loss they feed the one other data input (a GPT export's "targets"). The
// window length is the token input's second dimension, or cfg.SeqLen; the
// vocabulary, when the token input indexes an embedding initializer
// (Gather), bounds the token ids.
func openTokens(cfg Config, path string, prog *Program) (data.Dataset, error) {
	g := prog.Model.Graph
	input := cfg.InputName
	if input == "" && len(prog.DataInputs) > 0 {
		input = prog.DataInputs[0]
	}
	var target string
	if !prog.NeedsLabels {
		var others []string
		for _, n := range prog.DataInputs {
			if n != input {
				others = append(others, n)
			}
		}
		if len(others) != 1 {
			return nil, fmt.Errorf("data: %s: token data feeds a token input (%q) and a next-token target input; the model's data inputs are %v", path, input, prog.DataInputs)
		}
		target = others[0]
	} else if len(prog.DataInputs) != 1 && cfg.InputName == "" {
		return nil, fmt.Errorf("data: %s: the model has inputs %v; say which one the tokens feed with --input-name", path, prog.DataInputs)
	}
	opts := data.TokenOptions{DType: cfg.TokenDType, SeqLen: cfg.SeqLen, Input: input, Target: target, Vocab: embeddingRows(g, input)}
	var err error
	var T int
	if opts.InputDType, T, err = tokenInputType(g, input); err != nil {
		return nil, fmt.Errorf("data: %s: %w", path, err)
	}
	if target != "" {
		var tT int
		if opts.TargetDType, tT, err = tokenInputType(g, target); err != nil {
			return nil, fmt.Errorf("data: %s: %w", path, err)
		}
		if T <= 0 {
			T = tT
		}
	}
	switch {
	case opts.SeqLen == 0:
		opts.SeqLen = T
	case T > 0 && opts.SeqLen != T:
		return nil, fmt.Errorf("data: %s: --seq-len %d, but the graph input %q has sequence length %d", path, opts.SeqLen, input, T)
	}
	return data.OpenTokens(path, opts)
}

// tokenInputType returns the dtype of a [batch, T] integer graph input and
// T (0 when the graph leaves it open).
func tokenInputType(g *graph.Graph, name string) (graph.DType, int, error) {
	for _, in := range g.Inputs {
		if in.Name != name {
			continue
		}
		if in.Type == nil || (in.Type.DType != graph.Int64 && in.Type.DType != graph.Int32) {
			return 0, 0, fmt.Errorf("graph input %q is %v; token windows feed int64 or int32 inputs", name, in.Type)
		}
		if !in.Type.HasShape {
			return in.Type.DType, 0, nil
		}
		if len(in.Type.Shape) != 2 {
			return 0, 0, fmt.Errorf("graph input %q is %v; token windows feed [batch, T] inputs", name, in.Type)
		}
		T := 0
		if d := in.Type.Shape[1]; d.Known {
			T = int(d.Value)
		}
		return in.Type.DType, T, nil
	}
	return 0, 0, fmt.Errorf("the model has no input %q", name)
}

// embeddingRows returns the number of rows of the initializer a Gather
// (axis 0) indexes with the graph input name, or 0 when there is none.
func embeddingRows(g *graph.Graph, name string) int {
	for _, n := range g.Nodes {
		if n.OpType != "Gather" || len(n.Inputs) < 2 || n.Inputs[1] != name {
			continue
		}
		if n.AttrInt("axis", 0) != 0 {
			continue
		}
		if t, ok := g.Initializers[n.Inputs[0]]; ok && t.Rank() >= 1 {
			return t.Shape[0]
		}
	}
	return 0
}
