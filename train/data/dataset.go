package data

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Dataset gathers batches of examples by index.
//
// Gather returns the inputs (by graph input name) and labels of the
// examples idx, each tensor with a leading dimension of len(idx); labels
// may be nil for a dataset without them. epoch lets datasets with random
// augmentation draw per (epoch, example) and stay deterministic; others
// ignore it. The Loader calls Gather from one goroutine at a time, not
// necessarily the one that made the dataset.
type Dataset interface {
	Len() int
	Gather(epoch int, idx []int) (inputs map[string]*graph.Tensor, labels *graph.Tensor, err error)
}

// ExampleDataset produces one example at a time: tensors without the
// batch dimension. Stack turns it into a Dataset.
type ExampleDataset interface {
	Len() int
	Example(epoch, i int) (inputs map[string]*graph.Tensor, label *graph.Tensor, err error)
}

// Stack adapts an ExampleDataset: Gather stacks its examples, which must
// agree in names, dtypes and shapes.
func Stack(ds ExampleDataset) Dataset { return stacked{ds} }

type stacked struct{ ds ExampleDataset }

func (s stacked) Len() int { return s.ds.Len() }

func (s stacked) Gather(epoch int, idx []int) (map[string]*graph.Tensor, *graph.Tensor, error) {
	var inputs map[string]*graph.Tensor
	var labels *graph.Tensor
	for k, i := range idx {
		in, lab, err := s.ds.Example(epoch, i)
		if err != nil {
			return nil, nil, fmt.Errorf("data: example %d: %w", i, err)
		}
		if k == 0 {
			inputs = make(map[string]*graph.Tensor, len(in))
			for name, t := range in {
				if inputs[name], err = newStack(t, len(idx)); err != nil {
					return nil, nil, fmt.Errorf("data: example %d: input %q: %w", i, name, err)
				}
			}
			if lab != nil {
				if labels, err = newStack(lab, len(idx)); err != nil {
					return nil, nil, fmt.Errorf("data: example %d: label: %w", i, err)
				}
			}
		}
		if len(in) != len(inputs) {
			return nil, nil, fmt.Errorf("data: example %d has inputs %v, example %d has %v", i, sortedNames(in), idx[0], sortedNames(inputs))
		}
		for name, t := range in {
			dst, ok := inputs[name]
			if !ok {
				return nil, nil, fmt.Errorf("data: example %d has input %q, example %d does not", i, name, idx[0])
			}
			if err := putRow(dst, k, t); err != nil {
				return nil, nil, fmt.Errorf("data: example %d: input %q: %w", i, name, err)
			}
		}
		if (lab == nil) != (labels == nil) {
			return nil, nil, fmt.Errorf("data: example %d: some examples have labels and some do not", i)
		}
		if lab != nil {
			if err := putRow(labels, k, lab); err != nil {
				return nil, nil, fmt.Errorf("data: example %d: label: %w", i, err)
			}
		}
	}
	return inputs, labels, nil
}

func newStack(t *graph.Tensor, n int) (*graph.Tensor, error) {
	return graph.NewTensor(t.DType, append([]int{n}, t.Shape...))
}

// putRow copies t into row k of dst.
func putRow(dst *graph.Tensor, k int, t *graph.Tensor) error {
	if t.DType != dst.DType || !graph.SameShape(t.Shape, dst.Shape[1:]) {
		return fmt.Errorf("%v%v differs from the first example's %v%v", t.DType, t.Shape, dst.DType, dst.Shape[1:])
	}
	row := t.Size()
	src := reflect.ValueOf(t.Data)
	if src.Kind() != reflect.Slice || src.Len() != row {
		return fmt.Errorf("data of %v%v holds %v", t.DType, t.Shape, src.Kind())
	}
	reflect.Copy(reflect.ValueOf(dst.Data).Slice(k*row, (k+1)*row), src)
	return nil
}

// gatherRows returns t's rows idx (along the leading dimension).
func gatherRows(t *graph.Tensor, idx []int) (*graph.Tensor, error) {
	out, err := graph.NewTensor(t.DType, append([]int{len(idx)}, t.Shape[1:]...))
	if err != nil {
		return nil, err
	}
	if len(idx) == 0 {
		return out, nil
	}
	row := 1
	for _, d := range t.Shape[1:] {
		row *= d
	}
	src, dst := reflect.ValueOf(t.Data), reflect.ValueOf(out.Data)
	for k, i := range idx {
		if i < 0 || i >= t.Shape[0] {
			return nil, fmt.Errorf("index %d out of range [0, %d)", i, t.Shape[0])
		}
		if row == 1 {
			dst.Index(k).Set(src.Index(i))
			continue
		}
		reflect.Copy(dst.Slice(k*row, (k+1)*row), src.Slice(i*row, (i+1)*row))
	}
	return out, nil
}

func sortedNames[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
