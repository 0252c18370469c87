package train

// Overlapping the gradient all-reduce with the backward pass.
//
// With more than one process (and no ZeRO), the micro-batch step holds the
// gradient sums as state and reduces them itself: per bucket, an
// AllReduceStart node right after the backward node that finishes the
// bucket's last gradient, and an AllReduceWait at the end of the step
// (program_dp.go). The kernels hand the buckets to the Accelerator's
// communicator (comm.go), whose goroutine reduces them, one after the
// other in the order they were started, while the executor goes on with
// the rest of backward. The sync input makes the nodes act on the window's
// last micro-batch only.
//
// The buckets are filled in reverse parameter order, as PyTorch DDP's are:
// our autodiff emits the gradients from the loss backwards, so the last
// parameters' gradients are final first (TestGradientsArriveInReverseOrder
// checks this on the fixtures). Synchronised BatchNorm's AllReduceSum
// nodes go through the same communicator, queued behind the buckets in
// flight, so every rank issues the same collectives in the same order and
// the reduction overlaps backward with --sync-batchnorm too.

// gradBuckets are the all-reduce buckets of a model's gradients: indices
// into Model.grads, in the order they are reduced.
type gradBuckets struct {
	members  [][]int
	bucketOf []int // parameter index -> bucket
	elements []int // elements per bucket
}

// bucketLimit is BucketBytes, or PyTorch DDP's default of 25 MB.
func (a *Accelerator) bucketLimit() int {
	if a.cfg.BucketBytes > 0 {
		return a.cfg.BucketBytes
	}
	return 25 << 20
}

// OverlapStats count the buckets reduced by the step's collective ops:
// Early were started before the backward pass ended.
type OverlapStats struct{ Buckets, Early int }

// OverlapStats reports how many gradient buckets were reduced while
// backward ran, over the run so far.
func (m *Model) OverlapStats() OverlapStats { return m.overlapStats }

// gradIndex maps the gradient outputs' names to parameter indices.
func (m *Model) gradIndex() map[string]int {
	if m.gradNames == nil {
		m.gradNames = make(map[string]int, len(m.params))
		for i, p := range m.params {
			m.gradNames[gradPrefix+p.Name] = i
		}
	}
	return m.gradNames
}
