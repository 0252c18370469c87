package benchlib

import (
	"sort"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
)

// ProfileRefs are the machine's two references, measured at the start and
// the end of an op-profiled run (ModelOptions.OpProfileRefs), so that each
// op's rate is read against what the machine gave in the same minutes:
// on a shared host both move by up to 2× from one run to the next (a
// memory-bound op's GB/s most of all), and a ratio against a reference
// measured in another minute moves with them.
type ProfileRefs struct {
	// GemmGFLOPS is the median over the samples of one 2048³ float32 GEMM
	// on all cores (what `bench --gemm 2048,2048,2048` times), GemmMin and
	// GemmMax the extremes.
	GemmGFLOPS float64 `json:"gemm_gflops"`
	GemmMin    float64 `json:"gemm_gflops_min"`
	GemmMax    float64 `json:"gemm_gflops_max"`
	// TriadGBps is the median over the samples of STREAM's triad on all
	// cores (what `bench --stream` measures, over the same three arrays of
	// 128 MiB: the best of three repetitions per sample), TriadMin and
	// TriadMax the extremes.
	TriadGBps float64 `json:"triad_gbps"`
	TriadMin  float64 `json:"triad_gbps_min"`
	TriadMax  float64 `json:"triad_gbps_max"`
	// Samples is the number of times both were measured (two: before the
	// warm-up steps and after the last timed step).
	Samples int `json:"samples"`
	// PeakRSSIncluded says that the run's peak RSS includes the
	// references' buffers (ProfileRefsBytes): where the peak cannot be reset after
	// they are released (not Linux).
	PeakRSSIncluded bool `json:"peak_rss_includes_refs,omitempty"`
}

const (
	refGemmSize = 2048
	// refTriadElems is the float64 elements of each triad array: three of
	// 128 MiB as `bench --stream` has (with three of 32 MiB this host's
	// 32 MiB L3 still lifted the triad from 26-31 GB/s to 41).
	refTriadElems = 1 << 24
	refTriadReps  = 3
	// refGemmCalls: the faster of two calls (the first after a triad
	// ran at 107 GFLOP/s where the second ran at 204: the workers wake
	// and the packing buffers grow).
	refGemmCalls = 2
)

// ProfileRefsBytes is the storage the references take while they run
// (the GEMM's three matrices and the triad's three arrays: 432 MiB).
const ProfileRefsBytes = 3*4*refGemmSize*refGemmSize + 3*8*refTriadElems

// refSampler takes ProfileRefs' samples. Its buffers (the GEMM's three
// 16 MiB matrices and the triad's three 128 MiB arrays) are resident only
// while a sample runs: released after it, with the process's peak RSS
// reset where the platform allows, so that the run's peak RSS stays the
// model's own.
type refSampler struct {
	buf          *refBuffers
	gemm, triads []float64
	threads      int
	// peak is the largest VmHWM read just before a sample (the steps'
	// peaks); resetOK: the high-water mark was reset after each sample.
	peak    int64
	resetOK bool
	err     error
}

// refBuffers is the storage of the references (refs_linux.go maps it
// outside the Go heap so that it can be handed back).
type refBuffers struct {
	a, b, c []float32
	x, y, z []float64
	// release hands the pages back (the contents are lost), free the
	// whole mapping.
	release, free func()
}

func newRefSampler(threads int) *refSampler {
	return &refSampler{threads: threads, resetOK: true}
}

// sample measures both references once, outside every step.
func (r *refSampler) sample() {
	if r.err != nil {
		return
	}
	if hwm, err := PeakRSS(); err == nil {
		r.peak = max(r.peak, hwm)
	}
	if r.buf == nil {
		b, err := newRefBuffers(refGemmSize*refGemmSize, refTriadElems)
		if err != nil {
			r.err = err
			return
		}
		r.buf = b
	}
	b := r.buf
	// Fill (this also brings the released pages back; triadGBps fills
	// its arrays): values whose products stay normal.
	for i := range b.a {
		v := float32(i%7+1) * 0.125
		b.a[i], b.b[i] = v, 1-v
	}
	gbps, err := triadGBps(b.x, b.y, b.z, r.threads, refTriadReps)
	if err != nil {
		r.err = err
		return
	}
	r.triads = append(r.triads, gbps)
	const n = refGemmSize
	best := bestOf(refGemmCalls, func() { gemm.Sgemm(false, false, n, n, n, 1, b.a, n, b.b, n, 0, b.c, n) })
	r.gemm = append(r.gemm, 2*float64(n)*n*n/best.Seconds()/1e9)
	b.release()
	if !resetPeakRSS() {
		r.resetOK = false
	}
}

// finish fills refs from the samples and returns the run's peak RSS
// without the references' buffers where it could be kept apart (else
// VmHWM as it stands).
func (r *refSampler) finish() (*ProfileRefs, int64, error) {
	if r.buf != nil {
		r.buf.free()
		r.buf = nil
	}
	hwm, err := PeakRSS()
	if err != nil {
		return nil, 0, err
	}
	if r.err != nil {
		return nil, hwm, r.err
	}
	if len(r.gemm) == 0 {
		return nil, hwm, nil
	}
	refs := &ProfileRefs{Samples: len(r.gemm), PeakRSSIncluded: !r.resetOK}
	refs.GemmGFLOPS, refs.GemmMin, refs.GemmMax = medianMinMax(r.gemm)
	refs.TriadGBps, refs.TriadMin, refs.TriadMax = medianMinMax(r.triads)
	if r.resetOK {
		hwm = max(hwm, r.peak)
	}
	return refs, hwm, nil
}

func medianMinMax(v []float64) (med, lo, hi float64) {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return median(s), s[0], s[len(s)-1]
}

// applyRefs sets each profile row's rate as a fraction of its reference:
// products of the GEMM's, the others of the triad's. A product with bytes
// also gets its roofline, and its rate of the triad's where the roofline
// is under 1.
func applyRefs(rows []OpTime, refs *ProfileRefs) {
	for i := range rows {
		t := &rows[i]
		switch {
		case t.GFLOPS > 0 && refs.GemmGFLOPS > 0:
			t.OfGemm = t.GFLOPS / refs.GemmGFLOPS
			if t.GB > 0 && refs.TriadGBps > 0 {
				compute, memory := t.GFLOP/refs.GemmGFLOPS, t.GB/refs.TriadGBps
				t.Roofline = min(1, compute/memory)
				if t.Roofline < 1 { // its bytes over its time, against the triad
					t.OfTriad = t.GB * t.GFLOPS / t.GFLOP / refs.TriadGBps
				}
			}
		case t.GBPS > 0 && refs.TriadGBps > 0:
			t.OfTriad = t.GBPS / refs.TriadGBps
		}
	}
}
