package control

import (
	"math"
	"math/bits"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("HannWindow", windowKernel(0.5, 0.5, 0))
	kern.Register("HammingWindow", windowKernel(25.0/46, 1-25.0/46, 0))
	kern.Register("BlackmanWindow", windowKernel(0.42, 0.5, 0.08))
	kern.Register("MelWeightMatrix", melWeightMatrixKernel)
	kern.Register("DFT", dftKernel)
	kern.Register("STFT", stftKernel)
}

// castFloat64 converts values computed in float64 to dtype d.
func castFloat64(n *graph.Node, v []float64, shape []int, d graph.DType) (*graph.Tensor, error) {
	t := &graph.Tensor{DType: graph.Float64, Shape: shape, Data: v}
	if d == graph.String || d == graph.Bool || d.Size() == 0 {
		return nil, n.Errorf("output_datatype %v is not a numeric type", d)
	}
	out, err := kern.Cast(t, d)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	return out, nil
}

// windowKernel returns the kernel of a generalised cosine window
// w[i] = a0 - a1*cos(2πi/N) + a2*cos(4πi/N), where N is size for a periodic
// window and size-1 for a symmetric one.
func windowKernel(a0, a1, a2 float64) kern.Kernel {
	return func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 1); err != nil {
			return nil, err
		}
		size, err := scalarInt(n, "size", in[0])
		if err != nil {
			return nil, err
		}
		if size < 0 || size > graph.MaxElements {
			return nil, n.Errorf("window size %d is out of range", size)
		}
		N := float64(size)
		if n.AttrInt("periodic", 1) == 0 {
			N--
		}
		v := make([]float64, size)
		for i := range v {
			if N <= 0 {
				v[i] = 1 // a one-point symmetric window
				continue
			}
			x := 2 * math.Pi * float64(i) / N
			v[i] = a0 - a1*math.Cos(x) + a2*math.Cos(2*x)
		}
		t, err := castFloat64(n, v, []int{int(size)}, graph.DType(n.AttrInt("output_datatype", int64(graph.Float32))))
		return []*graph.Tensor{t}, err
	}
}

// melWeightMatrixKernel implements MelWeightMatrix: triangular filters,
// equally spaced on the mel scale between lower_edge_hertz and
// upper_edge_hertz, over the dft_length/2+1 bins of a one-sided spectrum.
// The arithmetic follows the ONNX reference, including its bin rounding.
func melWeightMatrixKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 5); err != nil {
		return nil, err
	}
	names := []string{"num_mel_bins", "dft_length", "sample_rate"}
	var iv [3]int64
	for i, name := range names {
		v, err := scalarInt(n, name, in[i])
		if err != nil {
			return nil, err
		}
		iv[i] = v
	}
	mels, dftLen, rate := int(iv[0]), int(iv[1]), iv[2]
	if mels < 0 || dftLen < 0 || rate <= 0 {
		return nil, n.Errorf("num_mel_bins %d, dft_length %d and sample_rate %d must be positive", mels, dftLen, rate)
	}
	if in[3].Size() != 1 || in[4].Size() != 1 {
		return nil, n.Errorf("lower_edge_hertz and upper_edge_hertz must be scalars, have shapes %v and %v", in[3].Shape, in[4].Shape)
	}
	lower, upper := float32(in[3].Float(0)), float32(in[4].Float(0))
	bins := dftLen/2 + 1
	if int64(bins)*int64(mels) > graph.MaxElements {
		return nil, n.Errorf("output [%d, %d] is too large", bins, mels)
	}
	toMel := func(f float32) float32 { return float32(2595 * math.Log10(1+float64(f/700))) }
	lowMel, highMel := toMel(lower), toMel(upper)
	step := (highMel - lowMel) / float32(mels+2)
	edges := make([]int, mels+2)
	for i := range edges {
		mel := float64(i)*float64(step) + float64(lowMel)
		hz := 700 * (math.Pow(10, mel/2595) - 1)
		edges[i] = int(math.Floor(float64(dftLen+1) * hz / float64(rate)))
	}
	out := make([]float64, bins*mels)
	set := func(j, i int, v float64) {
		if j >= 0 && j < bins {
			out[j*mels+i] = v
		}
	}
	for i := 0; i < mels; i++ {
		left, center, right := edges[i], edges[i+1], edges[i+2]
		if center == left {
			set(center, i, 1)
		} else {
			for j := left; j <= center; j++ {
				set(j, i, float64(j-left)/float64(center-left))
			}
		}
		if right > center {
			for j := center; j < right; j++ {
				set(j, i, float64(right-j)/float64(right-center))
			}
		}
	}
	t, err := castFloat64(n, out, []int{bins, mels}, graph.DType(n.AttrInt("output_datatype", int64(graph.Float32))))
	return []*graph.Tensor{t}, err
}

// fftPlan transforms complex sequences of one length: radix-2 FFT for
// powers of two, a direct sum with a twiddle table otherwise.
type fftPlan struct {
	n        int
	cos, sin []float64 // cos(2πk/n), sin(2πk/n)
	pow2     bool
	rev      []int
	tmpRe    []float64
	tmpIm    []float64
}

func newFFTPlan(n int) *fftPlan {
	p := &fftPlan{n: n, cos: make([]float64, n), sin: make([]float64, n), pow2: n > 0 && n&(n-1) == 0}
	for k := 0; k < n; k++ {
		s, c := math.Sincos(2 * math.Pi * float64(k) / float64(n))
		p.cos[k], p.sin[k] = c, s
	}
	if p.pow2 {
		shift := bits.UintSize - bits.Len(uint(n)) + 1
		p.rev = make([]int, n)
		for i := range p.rev {
			if n > 1 {
				p.rev[i] = int(bits.Reverse(uint(i)) >> shift)
			}
		}
	} else {
		p.tmpRe, p.tmpIm = make([]float64, n), make([]float64, n)
	}
	return p
}

// transform replaces (re, im) by its DFT, sum_j x[j] e^{∓2πi jk/n} (minus
// sign forward, plus inverse); it does not scale the inverse by 1/n.
func (p *fftPlan) transform(re, im []float64, inverse bool) {
	n := p.n
	sign := -1.0
	if inverse {
		sign = 1
	}
	if !p.pow2 {
		for k := 0; k < n; k++ {
			var sr, si float64
			idx := 0
			for j := 0; j < n; j++ {
				c, s := p.cos[idx], sign*p.sin[idx]
				sr += re[j]*c - im[j]*s
				si += re[j]*s + im[j]*c
				idx += k
				if idx >= n {
					idx -= n
				}
			}
			p.tmpRe[k], p.tmpIm[k] = sr, si
		}
		copy(re, p.tmpRe)
		copy(im, p.tmpIm)
		return
	}
	for i, j := range p.rev {
		if i < j {
			re[i], re[j] = re[j], re[i]
			im[i], im[j] = im[j], im[i]
		}
	}
	for size := 2; size <= n; size <<= 1 {
		half, step := size/2, n/size
		for start := 0; start < n; start += size {
			for k := 0; k < half; k++ {
				c, s := p.cos[k*step], sign*p.sin[k*step]
				a, b := start+k, start+k+half
				tr := re[b]*c - im[b]*s
				ti := re[b]*s + im[b]*c
				re[b], im[b] = re[a]-tr, im[a]-ti
				re[a] += tr
				im[a] += ti
			}
		}
	}
}

// floatValues returns a float32 or float64 tensor's data as float64.
func floatValues(n *graph.Node, what string, t *graph.Tensor) ([]float64, error) {
	switch s := t.Data.(type) {
	case []float64:
		return s, nil
	case []float32:
		out := make([]float64, len(s))
		for i, v := range s {
			out[i] = float64(v)
		}
		return out, nil
	}
	return nil, n.Errorf("%s has dtype %v, want a float type", what, t.DType)
}

// floatResult stores float64 values as a tensor of dtype d (float32 or float64).
func floatResult(v []float64, shape []int, d graph.DType) *graph.Tensor {
	if d == graph.Float64 {
		return &graph.Tensor{DType: d, Shape: shape, Data: v}
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return &graph.Tensor{DType: graph.Float32, Shape: shape, Data: f}
}

// dftKernel implements DFT (opset 17: axis attribute, default 1; opset 20:
// axis input, default -2). The last input dim is 1 (real) or 2 (complex).
func dftKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	r := x.Rank()
	if r < 2 || (x.Shape[r-1] != 1 && x.Shape[r-1] != 2) {
		return nil, n.Errorf("input has shape %v: want [..., 1] (real) or [..., 2] (complex)", x.Shape)
	}
	axis := int(n.AttrInt("axis", 1))
	if ctx != nil && ctx.Opset >= 20 {
		axis = -2
		if a := kern.Opt(in, 2); a != nil {
			v, err := scalarInt(n, "axis", a)
			if err != nil {
				return nil, err
			}
			axis = int(v)
		}
	}
	if axis < 0 {
		axis += r
	}
	if axis < 0 || axis > r-2 {
		return nil, n.Errorf("axis is out of range for input of shape %v (the last dim holds real and imaginary parts)", x.Shape)
	}
	inverse := n.AttrInt("inverse", 0) != 0
	onesided := n.AttrInt("onesided", 0) != 0
	complexIn := x.Shape[r-1] == 2
	dim := x.Shape[axis]
	length := dim
	if onesided && inverse {
		length = 2 * (dim - 1)
	}
	if l := kern.Opt(in, 1); l != nil {
		v, err := scalarInt(n, "dft_length", l)
		if err != nil {
			return nil, err
		}
		length = int(v)
	}
	if length < 1 || length > graph.MaxElements {
		return nil, n.Errorf("dft_length %d must be positive", length)
	}
	if onesided && !inverse && complexIn {
		return nil, n.Errorf("a one-sided forward DFT needs real input, got shape %v", x.Shape)
	}
	vals, err := floatValues(n, "input", x)
	if err != nil {
		return nil, err
	}
	outer, _, inner := axisSplit(x.Shape[:r-1], axis)
	outLen, outC := length, 2
	switch {
	case onesided && !inverse:
		outLen = length/2 + 1
	case onesided && inverse:
		outC = 1
	}
	outShape := append([]int{}, x.Shape...)
	outShape[axis], outShape[r-1] = outLen, outC
	total, err := graph.NumElements(outShape)
	if err != nil {
		return nil, n.Errorf("output: %v", err)
	}
	out := make([]float64, total)
	inC := x.Shape[r-1]
	plan := newFFTPlan(length)
	re, im := make([]float64, length), make([]float64, length)
	scale := 1.0
	if inverse {
		scale = 1 / float64(length)
	}
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			for j := range re {
				re[j], im[j] = 0, 0
			}
			at := func(j int) int { return ((o*dim+j)*inner + i) * inC }
			if onesided && inverse {
				// Rebuild the full spectrum from its Hermitian half.
				half := length/2 + 1
				for k := 0; k < half && k < dim; k++ {
					p := at(k)
					re[k], im[k] = vals[p], vals[p+1]
					if k > 0 && length-k != k {
						re[length-k], im[length-k] = vals[p], -vals[p+1]
					}
				}
			} else {
				for j := 0; j < length && j < dim; j++ {
					p := at(j)
					re[j] = vals[p]
					if complexIn {
						im[j] = vals[p+1]
					}
				}
			}
			plan.transform(re, im, inverse)
			for k := 0; k < outLen; k++ {
				p := ((o*outLen+k)*inner + i) * outC
				out[p] = re[k] * scale
				if outC == 2 {
					out[p+1] = im[k] * scale
				}
			}
		}
	}
	return []*graph.Tensor{floatResult(out, outShape, x.DType)}, nil
}

// stftKernel implements STFT: DFTs of frame_length samples taken every
// frame_step samples, each multiplied by the window when one is given.
func stftKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	sig := in[0]
	if sig.Rank() != 3 || (sig.Shape[2] != 1 && sig.Shape[2] != 2) {
		return nil, n.Errorf("signal has shape %v, want [batch, length, 1 or 2]", sig.Shape)
	}
	step, err := scalarInt(n, "frame_step", in[1])
	if err != nil {
		return nil, err
	}
	if step < 1 {
		return nil, n.Errorf("frame_step %d must be positive", step)
	}
	window := kern.Opt(in, 2)
	frameLen := -1
	if window != nil {
		if window.Rank() != 1 {
			return nil, n.Errorf("window has shape %v, want rank 1", window.Shape)
		}
		frameLen = window.Shape[0]
	}
	if fl := kern.Opt(in, 3); fl != nil {
		v, err := scalarInt(n, "frame_length", fl)
		if err != nil {
			return nil, err
		}
		if frameLen >= 0 && int(v) != frameLen {
			return nil, n.Errorf("frame_length %d differs from the window length %d", v, frameLen)
		}
		frameLen = int(v)
	}
	if frameLen < 1 {
		return nil, n.Errorf("needs a window or a positive frame_length")
	}
	batch, length, inC := sig.Shape[0], sig.Shape[1], sig.Shape[2]
	if length < frameLen {
		return nil, n.Errorf("signal length %d is shorter than a frame (%d)", length, frameLen)
	}
	onesided := n.AttrInt("onesided", 1) != 0
	if onesided && inC == 2 {
		return nil, n.Errorf("a one-sided STFT needs a real signal, got shape %v (set onesided=0)", sig.Shape)
	}
	frames := (length-frameLen)/int(step) + 1
	bins := frameLen
	if onesided {
		bins = frameLen/2 + 1
	}
	vals, err := floatValues(n, "signal", sig)
	if err != nil {
		return nil, err
	}
	var win []float64
	if window != nil {
		if win, err = floatValues(n, "window", window); err != nil {
			return nil, err
		}
	}
	outShape := []int{batch, frames, bins, 2}
	total, err := graph.NumElements(outShape)
	if err != nil {
		return nil, n.Errorf("output: %v", err)
	}
	out := make([]float64, total)
	plan := newFFTPlan(frameLen)
	re, im := make([]float64, frameLen), make([]float64, frameLen)
	for b := 0; b < batch; b++ {
		for f := 0; f < frames; f++ {
			start := f * int(step)
			for j := 0; j < frameLen; j++ {
				p := ((b * length) + start + j) * inC
				w := 1.0
				if win != nil {
					w = win[j]
				}
				re[j], im[j] = vals[p]*w, 0
				if inC == 2 {
					im[j] = vals[p+1] * w
				}
			}
			plan.transform(re, im, false)
			base := (b*frames + f) * bins * 2
			for k := 0; k < bins; k++ {
				out[base+2*k], out[base+2*k+1] = re[k], im[k]
			}
		}
	}
	return []*graph.Tensor{floatResult(out, outShape, sig.DType)}, nil
}
