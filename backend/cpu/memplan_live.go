package cpu

import "slices"

// LiveValue is one allocation alive at a memory plan's fullest step: the
// value first found in it, the node that allocated it, its size, and the
// steps between which it lives.
type LiveValue struct {
	Value string `json:"value"`
	Node  string `json:"node"`
	Op    string `json:"op"`
	Bytes int64  `json:"bytes"`
	// Born is the step that allocated it, Dies the last step that reads it
	// (the plan's step count: it outlives the run).
	Born int `json:"born"`
	Dies int `json:"dies"`
	// LastReader is the op type and name of the node at Dies ("" when the
	// value outlives the run).
	LastReader string `json:"last_reader,omitempty"`
}

// PeakLive is what a plan's arena holds at its fullest step: the step, the
// bytes alive there (at most the arena's size, which adds the gaps its
// placement leaves), and the allocations, largest first.
type PeakLive struct {
	Step   int         `json:"step"`
	Node   string      `json:"node"`
	Op     string      `json:"op"`
	Steps  int         `json:"steps"`
	Bytes  int64       `json:"bytes"`
	Values []LiveValue `json:"values"`
}

// peakLive finds the step at which the recorded allocations' live bytes
// are largest and lists what lives there.
func (r *recorder) peakLive() PeakLive {
	if r.nsteps == 0 || r.p == nil {
		return PeakLive{}
	}
	delta := make([]int64, r.nsteps+2)
	for _, a := range r.allocs {
		end := min(a.end, r.nsteps)
		delta[a.step] += int64(a.bytes)
		delta[end+1] -= int64(a.bytes)
	}
	var cur, best int64
	at := 0
	for s := 0; s < r.nsteps; s++ {
		cur += delta[s]
		if cur > best {
			best, at = cur, s
		}
	}
	pl := PeakLive{Step: at, Steps: r.nsteps, Bytes: best}
	if n := r.p.steps[at].node; n != nil {
		pl.Node, pl.Op = n.Name, n.OpType
	}
	for _, a := range r.allocs {
		if a.step > at || min(a.end, r.nsteps) < at || a.bytes == 0 {
			continue
		}
		v := LiveValue{Bytes: int64(a.bytes), Born: a.step, Dies: min(a.end, r.nsteps)}
		if n := r.p.steps[a.step].node; n != nil {
			v.Node, v.Op = n.Name, n.OpType
		}
		if v.Dies < r.nsteps {
			if n := r.p.steps[v.Dies].node; n != nil {
				v.LastReader = n.OpType + " " + n.Name
			}
		}
		if a.value >= 0 && a.value < len(r.p.names) {
			v.Value = r.p.names[a.value]
		}
		pl.Values = append(pl.Values, v)
	}
	slices.SortStableFunc(pl.Values, func(x, y LiveValue) int {
		switch {
		case x.Bytes > y.Bytes:
			return -1
		case x.Bytes < y.Bytes:
			return 1
		}
		return x.Born - y.Born
	})
	return pl
}

// PeakLive returns the live set at the fullest step of the memory plan of
// the latest Run's input shapes (empty before their first run).
func (e *Executable) PeakLive() PeakLive {
	p := e.last.Load()
	if p == nil || p.mem == nil {
		return PeakLive{}
	}
	p.mem.mu.Lock()
	defer p.mem.mu.Unlock()
	if p.mem.plan == nil {
		return PeakLive{}
	}
	return p.mem.plan.peakLive
}
