package cpu

import (
	"fmt"
	"sort"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// stateView places a view (backend.StateViewer) in the memory of a buffer
// that is no view: elements [off, off+n) of root.
type stateView struct {
	root   string
	off, n int
}

// extent is where a state buffer lies: a view's range of its root, or a
// whole buffer. Call with s.mu held.
func (s *stateStore) extent(name string) stateView {
	if v, ok := s.views[name]; ok {
		return v
	}
	n := 0
	if b := s.bufs[name]; b != nil {
		n = b.Size()
	}
	return stateView{root: name, n: n}
}

// ViewState implements backend.StateViewer: the view is a tensor over a
// subslice of the base's data.
func (e *Executable) ViewState(name, of string, offset int, shape []int) error {
	if e.store == nil {
		e.store = &stateStore{bufs: map[string]*graph.Tensor{}}
	}
	s := e.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == "" {
		return fmt.Errorf("cpu: ViewState: the view has no name")
	}
	base, ok := s.bufs[of]
	if !ok {
		return fmt.Errorf("cpu: ViewState %q: no state named %q to view", name, of)
	}
	n, err := graph.NumElements(shape)
	if err != nil {
		return fmt.Errorf("cpu: ViewState %q of %q: %w", name, of, err)
	}
	if offset < 0 || offset > base.Size() || n > base.Size()-offset {
		return fmt.Errorf("cpu: ViewState %q: elements [%d, %d) are outside %q (%d elements)", name, offset, offset+n, of, base.Size())
	}
	be := s.extent(of)
	want := stateView{root: be.root, off: be.off + offset, n: n}
	if old, ok := s.bufs[name]; ok {
		if v, isView := s.views[name]; isView && v == want && graph.SameShape(old.Shape, shape) {
			return nil
		}
		return fmt.Errorf("cpu: ViewState %q: the name is taken by another state buffer", name)
	}
	var data any
	switch d := base.Data.(type) {
	case []float32:
		data = d[offset : offset+n : offset+n]
	case []float64:
		data = d[offset : offset+n : offset+n]
	case []int64:
		data = d[offset : offset+n : offset+n]
	case []int32:
		data = d[offset : offset+n : offset+n]
	case []bool:
		data = d[offset : offset+n : offset+n]
	default:
		return fmt.Errorf("cpu: ViewState %q: %q is %v, which has no views", name, of, base.DType)
	}
	s.bufs[name] = &graph.Tensor{DType: base.DType, Shape: append([]int{}, shape...), Data: data}
	if s.views == nil {
		s.views = map[string]stateView{}
	}
	s.views[name] = want
	return nil
}

// checkStateOverlap rejects an executable that declares two state buffers
// sharing memory (a view and its base, or overlapping views) and updates
// either of them (initState, which holds s.mu, after binding them).
func (e *Executable) checkStateOverlap(specs []backend.StateSpec) error {
	s := e.store
	if s == nil || len(s.views) == 0 {
		return nil
	}
	byRoot := map[string][]int{}
	ext := make([]stateView, len(specs))
	for i, sp := range specs {
		ext[i] = s.extent(sp.Name)
		byRoot[ext[i].root] = append(byRoot[ext[i].root], i)
	}
	roots := make([]string, 0, len(byRoot))
	for r := range byRoot {
		roots = append(roots, r)
	}
	sort.Strings(roots)
	for _, r := range roots {
		idx := byRoot[r]
		for a := 0; a < len(idx); a++ {
			for b := a + 1; b < len(idx); b++ {
				x, y := ext[idx[a]], ext[idx[b]]
				if x.off >= y.off+y.n || y.off >= x.off+x.n {
					continue
				}
				sx, sy := specs[idx[a]], specs[idx[b]]
				if sx.UpdatedBy == "" && sy.UpdatedBy == "" {
					continue
				}
				return fmt.Errorf("cpu: states %q and %q share memory of %q (elements [%d, %d) and [%d, %d)) and the program updates one of them; declare one or the other",
					sx.Name, sy.Name, r, x.off, x.off+x.n, y.off, y.off+y.n)
			}
		}
	}
	return nil
}

var _ backend.StateViewer = (*Executable)(nil)
