package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
)

// Status of one case.
type Status string

// Case outcomes.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is the outcome of one case.
type Result struct {
	Name   string  `json:"name"`
	Status Status  `json:"status"`
	Reason string  `json:"reason,omitempty"`
	Output string  `json:"output,omitempty"` // the worst output, on failure
	MaxAbs float64 `json:"max_abs_err,omitempty"`
	MaxRel float64 `json:"max_rel_err,omitempty"`
	Millis float64 `json:"ms"`
}

func (r Result) String() string {
	switch r.Status {
	case Pass:
		return fmt.Sprintf("pass %s", r.Name)
	case Skip:
		return fmt.Sprintf("skip %s: %s", r.Name, r.Reason)
	}
	if r.Output != "" {
		return fmt.Sprintf("fail %s: output %q: max abs err %.3g, max rel err %.3g: %s", r.Name, r.Output, r.MaxAbs, r.MaxRel, r.Reason)
	}
	return fmt.Sprintf("fail %s: %s", r.Name, r.Reason)
}

// Options tune a run.
type Options struct {
	// Run selects cases whose name matches (nil: all).
	Run *regexp.Regexp
	// RTol and ATol: |got-want| <= ATol + RTol*|want| passes. Zero means
	// the ONNX backend-test defaults used here (1e-3 and 1e-5).
	RTol, ATol float64
	// Timeout per case (0: one minute).
	Timeout time.Duration
	// Skip maps case-name regexps to the reason the case is skipped
	// (features the backend does not support yet, documented in the README).
	Skip map[string]string
	// Compile are the options every case compiles with (for example
	// PrimitivesOnly, to run the backend restricted to the primitive and
	// extended sets).
	Compile backend.CompileOptions
	// Compiled, when set, sees each case's executable once compiled.
	Compiled func(name string, exe backend.Executable)
}

// Cases lists the case folders under root (any folder holding model.onnx),
// sorted by name.
func Cases(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "model.onnx" {
			out = append(out, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	sort.Strings(out)
	return out, nil
}

// Run runs every selected case under root and calls report after each.
func Run(b backend.Backend, root string, opts Options, report func(Result)) ([]Result, error) {
	cases, err := Cases(root)
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, dir := range cases {
		name := filepath.Base(dir)
		if opts.Run != nil && !opts.Run.MatchString(name) {
			continue
		}
		r := RunCase(b, dir, opts)
		results = append(results, r)
		if report != nil {
			report(r)
		}
	}
	return results, nil
}

// Summary counts results.
func Summary(rs []Result) (pass, fail, skip int) {
	for _, r := range rs {
		switch r.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		case Skip:
			skip++
		}
	}
	return
}

// RunCase runs one case folder. It never panics: a panic inside the backend
// becomes a failure.
func RunCase(b backend.Backend, dir string, opts Options) (res Result) {
	start := time.Now()
	res = Result{Name: filepath.Base(dir)}
	defer func() {
		if r := recover(); r != nil {
			res.Status = Fail
			res.Reason = fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
		}
		res.Millis = float64(time.Since(start).Microseconds()) / 1000
	}()
	for pat, why := range opts.Skip {
		if ok, _ := regexp.MatchString(pat, res.Name); ok {
			res.Status, res.Reason = Skip, why
			return res
		}
	}
	m, err := importer.Load(filepath.Join(dir, "model.onnx"))
	if err != nil {
		res.Status, res.Reason = Fail, err.Error()
		return res
	}
	for _, vi := range append(append([]*graph.ValueInfo{}, m.Graph.Inputs...), m.Graph.Outputs...) {
		if vi.Type != nil && (vi.Type.Kind == graph.KindMap || vi.Type.Kind == graph.KindSparseTensor) {
			res.Status, res.Reason = Skip, fmt.Sprintf("%q has %v type: map and sparse-tensor values are not supported", vi.Name, vi.Type)
			return res
		}
	}
	relaxDeclaredShapes(m.Graph, dir)
	exe, err := b.Compile(m, opts.Compile)
	if err != nil {
		if errors.Is(err, graph.ErrUnsupportedOp) {
			res.Status, res.Reason = Skip, err.Error()
		} else {
			res.Status, res.Reason = Fail, err.Error()
		}
		return res
	}
	if opts.Compiled != nil {
		defer func() { opts.Compiled(res.Name, exe) }()
	}
	sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	sort.Strings(sets)
	if len(sets) == 0 {
		res.Status, res.Reason = Fail, "no test_data_set_* folders"
		return res
	}
	rtol, atol := opts.RTol, opts.ATol
	if rtol == 0 {
		rtol = 1e-3
	}
	if atol == 0 {
		atol = 1e-5
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	feedNames := m.Graph.InputNames()
	for _, set := range sets {
		inputs := map[string]*graph.Tensor{}
		for k := 0; ; k++ {
			p := filepath.Join(set, fmt.Sprintf("input_%d.pb", k))
			if _, err := os.Stat(p); err != nil {
				break
			}
			var ty *graph.Type
			if k < len(feedNames) {
				ty = declaredType(m.Graph.Inputs, feedNames[k])
			}
			t, name, err := readValue(p, ty)
			if err != nil {
				res.Status, res.Reason = Fail, err.Error()
				return res
			}
			if name == "" || !contains(feedNames, name) {
				if k < len(feedNames) {
					name = feedNames[k]
				}
			}
			inputs[name] = asDeclared(m.Graph, name, t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		got, err := exe.Run(ctx, inputs)
		cancel()
		if err != nil {
			if errors.Is(err, graph.ErrUnsupportedOp) {
				res.Status, res.Reason = Skip, err.Error()
			} else {
				res.Status, res.Reason = Fail, fmt.Sprintf("%s: %v", filepath.Base(set), err)
			}
			return res
		}
		outNames := m.Graph.OutputNames()
		for k := 0; ; k++ {
			p := filepath.Join(set, fmt.Sprintf("output_%d.pb", k))
			if _, err := os.Stat(p); err != nil {
				break
			}
			var ty *graph.Type
			if k < len(outNames) {
				ty = declaredType(m.Graph.Outputs, outNames[k])
			}
			want, name, err := readValue(p, ty)
			if err != nil {
				res.Status, res.Reason = Fail, err.Error()
				return res
			}
			if name == "" || got[name] == nil {
				if k < len(outNames) {
					name = outNames[k]
				}
			}
			g := got[name]
			if g == nil {
				res.Status, res.Reason = Fail, fmt.Sprintf("output %q missing", name)
				return res
			}
			if want.DType == graph.Uint16 && g.DType == graph.BFloat16 {
				// ONNX 1.12's generator stored bfloat16 data as uint16
				// tensors; compare the bits as bfloat16.
				want = &graph.Tensor{DType: graph.BFloat16, Shape: want.Shape, Data: want.Data}
			}
			ok, why, maxAbs, maxRel := Compare(want, g, rtol, atol)
			if !ok {
				res.Status, res.Reason, res.Output, res.MaxAbs, res.MaxRel = Fail, why, name, maxAbs, maxRel
				return res
			}
		}
	}
	res.Status = Pass
	return res
}

// relaxDeclaredShapes forgets the declared shape of any input that the
// case's own data contradicts (a few ONNX 1.12 cases, e.g. castlike's "like"
// input, declare [3,4] and ship [1]); the reference runner never checks
// declared shapes, and the op semantics under test do not depend on them.
func relaxDeclaredShapes(g *graph.Graph, dir string) {
	feedNames := g.InputNames()
	for k, name := range feedNames {
		t, _, err := importer.ReadTensorFile(filepath.Join(dir, "test_data_set_0", fmt.Sprintf("input_%d.pb", k)))
		if err != nil {
			continue
		}
		for _, in := range g.Inputs {
			if in.Name != name || in.Type == nil || !in.Type.HasShape {
				continue
			}
			fits := len(in.Type.Shape) == len(t.Shape)
			for i := 0; fits && i < len(t.Shape); i++ {
				d := in.Type.Shape[i]
				fits = !d.Known || int(d.Value) == t.Shape[i]
			}
			if !fits {
				ty := *in.Type
				ty.HasShape, ty.Shape = false, nil
				in.Type = &ty
			}
		}
	}
}

// asDeclared reinterprets a uint16 tensor fed to a bfloat16 input as
// bfloat16 bits: ONNX 1.12's test generator wrote bfloat16 data that way.
func asDeclared(g *graph.Graph, name string, t *graph.Tensor) *graph.Tensor {
	for _, in := range g.Inputs {
		if in.Name == name && in.Type != nil && in.Type.DType == graph.BFloat16 && t.DType == graph.Uint16 {
			return &graph.Tensor{DType: graph.BFloat16, Shape: t.Shape, Data: t.Data}
		}
	}
	return t
}

func declaredType(vis []*graph.ValueInfo, name string) *graph.Type {
	for _, vi := range vis {
		if vi.Name == name {
			return vi.Type
		}
	}
	return nil
}

func readValue(path string, ty *graph.Type) (*graph.Tensor, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	t, name, err := importer.DecodeValue(b, ty)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return t, name, nil
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// Compare checks got against want: same dtype and shape, and every element
// within atol + rtol*|want| (NaN matches NaN, infinities must match exactly).
// Integer, bool and string tensors must be equal.
func Compare(want, got *graph.Tensor, rtol, atol float64) (ok bool, why string, maxAbs, maxRel float64) {
	if want.DType != got.DType {
		return false, fmt.Sprintf("dtype %v, want %v", got.DType, want.DType), 0, 0
	}
	if !graph.SameShape(want.Shape, got.Shape) {
		return false, fmt.Sprintf("shape %v, want %v", got.Shape, want.Shape), 0, 0
	}
	if want.IsContainer() {
		wi, gi := want.Items(), got.Items()
		if len(wi) != len(gi) {
			return false, fmt.Sprintf("%d items, want %d", len(gi), len(wi)), 0, 0
		}
		for i := range wi {
			ok, why, a, r := Compare(wi[i], gi[i], rtol, atol)
			maxAbs, maxRel = math.Max(maxAbs, a), math.Max(maxRel, r)
			if !ok {
				return false, fmt.Sprintf("item %d: %s", i, why), maxAbs, maxRel
			}
		}
		return true, "", maxAbs, maxRel
	}
	if err := got.Validate(); err != nil {
		return false, err.Error(), 0, 0
	}
	n := want.Size()
	if want.DType == graph.String {
		ws, gs := want.Data.([]string), got.Data.([]string)
		for i := 0; i < n; i++ {
			if ws[i] != gs[i] {
				return false, fmt.Sprintf("element %d is %q, want %q", i, gs[i], ws[i]), 0, 0
			}
		}
		return true, "", 0, 0
	}
	exact := !want.DType.IsFloat()
	if want.DType == graph.Float16 || want.DType == graph.BFloat16 {
		rtol, atol = math.Max(rtol, 4e-3), math.Max(atol, 1e-3)
	}
	bad := -1
	for i := 0; i < n; i++ {
		w, g := want.Float(i), got.Float(i)
		if exact {
			if want.Int(i) != got.Int(i) {
				if bad < 0 {
					bad = i
				}
				maxAbs = math.Max(maxAbs, math.Abs(w-g))
			}
			continue
		}
		if math.IsNaN(w) || math.IsNaN(g) {
			if math.IsNaN(w) != math.IsNaN(g) && bad < 0 {
				bad = i
			}
			continue
		}
		if math.IsInf(w, 0) || math.IsInf(g, 0) {
			if w != g && bad < 0 {
				bad = i
			}
			continue
		}
		d := math.Abs(w - g)
		maxAbs = math.Max(maxAbs, d)
		if w != 0 {
			maxRel = math.Max(maxRel, d/math.Abs(w))
		}
		if d > atol+rtol*math.Abs(w) && bad < 0 {
			bad = i
		}
	}
	if bad >= 0 {
		return false, fmt.Sprintf("first mismatch at element %d: got %g, want %g", bad, got.Float(bad), want.Float(bad)), maxAbs, maxRel
	}
	return true, "", maxAbs, maxRel
}

// FormatSummary is the closing line the CLI prints.
func FormatSummary(rs []Result) string {
	p, f, s := Summary(rs)
	return fmt.Sprintf("%d passed, %d failed, %d skipped", p, f, s)
}

// Unsupported groups skipped cases by the op named in their reason.
func Unsupported(rs []Result) map[string][]string {
	out := map[string][]string{}
	re := regexp.MustCompile(`no kernel for (\S+)`)
	for _, r := range rs {
		if r.Status != Skip {
			continue
		}
		key := r.Reason
		if m := re.FindStringSubmatch(r.Reason); m != nil {
			key = m[1]
		} else if i := strings.Index(key, ":"); i > 0 && len(key) > 80 {
			key = key[:i]
		}
		out[key] = append(out[key], r.Name)
	}
	return out
}
