package cpu

import "github.com/onnxtrain/onnxtrain/graph"

// Donated inputs (kern.Context.Donated): a step may be handed the storage
// of an input that nothing the run reads later lies in, so that its kernel
// writes its output over it (LayerNormGradAdd's dX over the residual
// gradient R) instead of into a fresh buffer: the output's lines are then
// already in the cache, owned, and the buffer is not needed.
//
// The recording run works the mask out step by step, before the step
// runs, from what it has seen: input i, one its kernel may write over
// (kern.Spec.Overwrites), is donated when this step is its
// value's last reader, its data lies in an allocation of the run (not a
// graph input, weight or a kernel's heap tensor), no value found in that
// allocation so far is read after this step (a view of it, or the
// allocation's other part), and no other input of the step lies in it.
// Later runs of the plan repeat the recorded masks: their values lie
// where the record found them (the plan's arena), or, after a miss or a
// rescue, in a heap copy that is just as dead after the step.

// donated returns step s's Donated mask.
func (a *arena) donated(s int, st *step, fr *frame) uint64 {
	if a.rec != nil {
		return a.rec.donated(s, st, fr)
	}
	if a.plan == nil {
		return 0
	}
	return a.plan.donate[s] // one mask a step (recorder.begin)
}

// donated works out and records step s's Donated mask on the recording
// run.
func (r *recorder) donated(s int, st *step, fr *frame) uint64 {
	var mask uint64
	for _, k := range st.spec.Overwrites {
		if k < 0 || k >= 64 || k >= len(st.in) {
			continue
		}
		slot := st.in[k]
		if slot < 0 || r.last[slot] != s {
			continue
		}
		id := r.allocOf(fr.vals[slot])
		if id < 0 || r.allocs[id].end > s {
			continue
		}
		shared := false
		for k2, other := range st.in {
			if k2 != k && other >= 0 && (other == slot || r.allocOf(fr.vals[other]) == id) {
				shared = true
				break
			}
		}
		if !shared {
			mask |= 1 << uint(k)
		}
	}
	r.donate[s] = mask
	return mask
}

// allocOf is the live allocation t's data lies in, or -1.
func (r *recorder) allocOf(t *graph.Tensor) int {
	ptr, n := dataRange(t)
	if n == 0 {
		return -1
	}
	return r.find(ptr, n)
}
