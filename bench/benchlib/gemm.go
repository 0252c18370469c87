package benchlib

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
)

// GemmOptions configures RunGemm: C = op(A)·op(B) with op(A) M×K and op(B)
// K×N, all row-major float32; TransA/TransB store A/B transposed.
type GemmOptions struct {
	M, N, K        int
	TransA, TransB bool
	// Reps timed repetitions after Warmup untimed calls (defaults 10 and 1).
	Reps, Warmup int
	// MinRepTime is the least time one repetition runs: small products are
	// called several times per repetition (default 50 ms).
	MinRepTime time.Duration
	Seed       int64
}

// GemmResult is what RunGemm measured.
type GemmResult struct {
	M      int  `json:"m"`
	N      int  `json:"n"`
	K      int  `json:"k"`
	TransA bool `json:"trans_a"`
	TransB bool `json:"trans_b"`
	// GFLOPS is the median over repetitions of 2·M·N·K / time.
	GFLOPS    float64 `json:"gflops"`
	MinGFLOPS float64 `json:"min_gflops"`
	MaxGFLOPS float64 `json:"max_gflops"`
	// MedianMS is the median time of one product.
	MedianMS     float64 `json:"median_ms"`
	Reps         int     `json:"reps"`
	CallsPerRep  int     `json:"calls_per_rep"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	GOMAXPROCS   int     `json:"gomaxprocs"`
}

// ParseGemmShape reads "M,N,K".
func ParseGemmShape(s string) (m, n, k int, err error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return 0, 0, 0, fmt.Errorf("benchlib: --gemm %q: want M,N,K (three sizes separated by commas)", s)
	}
	var v [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || x <= 0 {
			return 0, 0, 0, fmt.Errorf("benchlib: --gemm %q: %q is not a positive size", s, p)
		}
		v[i] = x
	}
	return v[0], v[1], v[2], nil
}

// gemmOperands holds random A and B stored as GemmOptions says, and C, in
// huge pages (hugeFloats); free unmaps them.
type gemmOperands struct {
	a, b, c       []float32
	lda, ldb, ldc int
	free          func()
}

func newGemmOperands(o GemmOptions) (*gemmOperands, error) {
	const maxElems = 1 << 30
	if o.M <= 0 || o.N <= 0 || o.K <= 0 {
		return nil, fmt.Errorf("benchlib: GEMM sizes must be positive, got M=%d N=%d K=%d", o.M, o.N, o.K)
	}
	if o.M*o.K > maxElems || o.K*o.N > maxElems || o.M*o.N > maxElems {
		return nil, fmt.Errorf("benchlib: GEMM %dx%dx%d: an operand exceeds %d elements", o.M, o.N, o.K, maxElems)
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x67656d6d))
	na, nb := o.M*o.K, o.K*o.N
	mem, free := hugeFloats[float32](na + nb + o.M*o.N)
	a, b := mem[:na:na], mem[na:na+nb:na+nb]
	for i := range mem[:na+nb] {
		mem[i] = float32(rng.NormFloat64()) // A, then B
	}
	g := &gemmOperands{a: a, b: b, c: mem[na+nb:], ldc: o.N, free: free}
	g.lda, g.ldb = o.K, o.N
	if o.TransA {
		g.lda = o.M // A stored K×M
	}
	if o.TransB {
		g.ldb = o.K // B stored N×K
	}
	return g, nil
}

func (g *gemmOperands) run(o GemmOptions) {
	gemm.Sgemm(o.TransA, o.TransB, o.M, o.N, o.K, 1, g.a, g.lda, g.b, g.ldb, 0, g.c, g.ldc)
}

// RunGemm times gemm.Sgemm on one shape and reports GFLOP/s.
func RunGemm(o GemmOptions) (*GemmResult, error) {
	if o.Reps == 0 {
		o.Reps = 10
	}
	if o.Warmup == 0 {
		o.Warmup = 1
	}
	if o.MinRepTime == 0 {
		o.MinRepTime = 50 * time.Millisecond
	}
	if o.Reps < 0 || o.Warmup < 0 {
		return nil, fmt.Errorf("benchlib: GEMM repetitions must not be negative (reps %d, warm-up %d)", o.Reps, o.Warmup)
	}
	ops, err := newGemmOperands(o)
	if err != nil {
		return nil, err
	}
	defer ops.free()
	// Warm up, then size a repetition so that it runs at least MinRepTime.
	var one time.Duration
	for i := 0; i < max(1, o.Warmup); i++ {
		t0 := time.Now()
		ops.run(o)
		one = time.Since(t0)
	}
	calls := 1
	if one > 0 && one < o.MinRepTime {
		calls = int(o.MinRepTime/one) + 1
	}
	per := make([]float64, o.Reps) // seconds per product
	for r := range per {
		t0 := time.Now()
		for i := 0; i < calls; i++ {
			ops.run(o)
		}
		per[r] = time.Since(t0).Seconds() / float64(calls)
	}
	sort.Float64s(per)
	flop := 2 * float64(o.M) * float64(o.N) * float64(o.K)
	med := median(per)
	res := &GemmResult{
		M: o.M, N: o.N, K: o.K, TransA: o.TransA, TransB: o.TransB,
		GFLOPS: flop / med / 1e9, MinGFLOPS: flop / per[len(per)-1] / 1e9, MaxGFLOPS: flop / per[0] / 1e9,
		MedianMS: med * 1000, Reps: o.Reps, CallsPerRep: calls, GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	if res.PeakRSSBytes, err = PeakRSS(); err != nil {
		return nil, err
	}
	return res, nil
}
