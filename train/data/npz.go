package data

import (
	"fmt"
	"reflect"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// NPZOptions configures OpenNPZ and NewArrays.
type NPZOptions struct {
	// Labels names the label array; "" means "labels".
	Labels string
	// NoLabels makes a dataset without labels (Batch.Labels is nil).
	NoLabels bool
	// Inputs names the arrays to feed, by graph input name; nil means every
	// array other than the labels.
	Inputs []string
}

// Arrays is a dataset of in-memory arrays that share a leading dimension.
type Arrays struct {
	inputs map[string]*graph.Tensor
	labels *graph.Tensor
	n      int
}

// OpenNPZ reads an .npz archive (or one .npy) whose arrays all have the
// same leading dimension, the number of examples.
func OpenNPZ(path string, opts NPZOptions) (*Arrays, error) {
	arrays, err := tensorio.ReadNPZ(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	return NewArrays(path, arrays, opts)
}

// NewArrays makes a dataset of arrays; source names them in errors.
func NewArrays(source string, arrays map[string]*graph.Tensor, opts NPZOptions) (*Arrays, error) {
	labelName := opts.Labels
	if labelName == "" {
		labelName = "labels"
	}
	d := &Arrays{inputs: map[string]*graph.Tensor{}, n: -1}
	first := ""
	check := func(name string, t *graph.Tensor) error {
		if t.Rank() == 0 {
			return fmt.Errorf("data: %s: array %q is a scalar; every array needs a leading example dimension", source, name)
		}
		if v := reflect.ValueOf(t.Data); v.Kind() != reflect.Slice || v.Len() != t.Size() {
			return fmt.Errorf("data: %s: array %q: data does not match shape %v", source, name, t.Shape)
		}
		if d.n < 0 {
			d.n, first = t.Shape[0], name
		} else if t.Shape[0] != d.n {
			return fmt.Errorf("data: %s: leading dimensions differ: array %q has %d examples (shape %v), array %q has %d", source, name, t.Shape[0], t.Shape, first, d.n)
		}
		return nil
	}
	if !opts.NoLabels {
		t, ok := arrays[labelName]
		if !ok {
			return nil, fmt.Errorf("data: %s: labels array %q missing (arrays: %s)", source, labelName, quoteList(sortedNames(arrays)))
		}
		if err := check(labelName, t); err != nil {
			return nil, err
		}
		d.labels = t
	}
	names := opts.Inputs
	if names == nil {
		for _, k := range sortedNames(arrays) {
			if opts.NoLabels || k != labelName {
				names = append(names, k)
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("data: %s: no input arrays", source)
	}
	for _, k := range names {
		t, ok := arrays[k]
		if !ok {
			return nil, fmt.Errorf("data: %s: input array %q missing (arrays: %s)", source, k, quoteList(sortedNames(arrays)))
		}
		if err := check(k, t); err != nil {
			return nil, err
		}
		d.inputs[k] = t
	}
	return d, nil
}

// Len is the number of examples.
func (d *Arrays) Len() int { return d.n }

// Labels is the labels array (nil for a dataset without labels).
func (d *Arrays) Labels() *graph.Tensor { return d.labels }

// Inputs lists the input names.
func (d *Arrays) Inputs() []string { return sortedNames(d.inputs) }

// Gather returns rows idx of every array.
func (d *Arrays) Gather(_ int, idx []int) (map[string]*graph.Tensor, *graph.Tensor, error) {
	out := make(map[string]*graph.Tensor, len(d.inputs))
	for k, t := range d.inputs {
		g, err := gatherRows(t, idx)
		if err != nil {
			return nil, nil, fmt.Errorf("data: array %q: %w", k, err)
		}
		out[k] = g
	}
	var labels *graph.Tensor
	if d.labels != nil {
		var err error
		if labels, err = gatherRows(d.labels, idx); err != nil {
			return nil, nil, fmt.Errorf("data: labels: %w", err)
		}
	}
	return out, labels, nil
}
