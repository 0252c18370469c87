package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train"
)

// prepareRun fits an input file to the graph: arrays no graph input reads
// (an .npz that also holds labels, say) are dropped with a note naming
// them, and a fixed-batch export (no dynamic_axes) fed another batch size
// is opened to it when nothing in the graph depends on the size.
func prepareRun(m *graph.Model, feeds map[string]*graph.Tensor, msg io.Writer) (map[string]*graph.Tensor, error) {
	want := map[string]bool{}
	for _, n := range m.Graph.InputNames() {
		want[n] = true
	}
	var extra []string
	kept := map[string]*graph.Tensor{}
	for k, t := range feeds {
		if want[k] {
			kept[k] = t
		} else {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 && len(kept) > 0 {
		sort.Strings(extra)
		fmt.Fprintf(msg, "note: ignoring array(s) %v of the input file: no graph input reads them (the graph reads %v)\n", extra, m.Graph.InputNames())
		feeds = kept
	}
	// The batch the file holds, if it differs from a fixed one.
	for _, in := range m.Graph.Inputs {
		t, ok := feeds[in.Name]
		if !ok || in.Type == nil || !in.Type.HasShape || len(in.Type.Shape) == 0 || len(t.Shape) == 0 {
			continue
		}
		if d := in.Type.Shape[0]; d.Known && d.Value != int64(t.Shape[0]) {
			note, err := train.RelaxFixedBatch(m, t.Shape[0])
			if err != nil {
				return nil, err
			}
			if note != "" {
				fmt.Fprintln(msg, note)
			}
			break
		}
	}
	return feeds, nil
}
