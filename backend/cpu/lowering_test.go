package cpu_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/conformance"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// unfused compiles every model with DisableFused, so that each op with a
// lowering runs as primitives (the executor lowers node by node, without
// types: scalar constants are float32).
type unfused struct{ backend.Backend }

func (u unfused) Compile(m *graph.Model, opts backend.CompileOptions) (backend.Executable, error) {
	opts.DisableFused = true
	return u.Backend.Compile(m, opts)
}

// typedUnfused lowers the whole graph with graph.LowerGraph first (with
// inferred types, so constants match the inputs' dtypes), then compiles the
// result with DisableFused.
type typedUnfused struct{ backend.Backend }

func (u typedUnfused) Compile(m *graph.Model, opts backend.CompileOptions) (backend.Executable, error) {
	g := *m.Graph
	g.Nodes = append([]*graph.Node{}, m.Graph.Nodes...)
	g.Initializers = make(map[string]*graph.Tensor, len(m.Graph.Initializers))
	for k, v := range m.Graph.Initializers {
		g.Initializers[k] = v
	}
	if err := graph.InlineFunctions(&g, m.Functions); err != nil {
		return nil, err
	}
	if err := graph.TopoSort(&g); err != nil {
		return nil, err
	}
	opset := m.Opset()
	err := graph.LowerGraph(&g, opset, func(n *graph.Node) bool {
		_, ok := kern.Lookup(n.Domain, n.OpType, opset)
		return ok && (n.Domain != "" || !graph.HasLowering(n.OpType))
	})
	if err != nil {
		return nil, err
	}
	c := *m
	c.Graph = &g
	c.Functions = nil
	opts.DisableFused = true
	return u.Backend.Compile(&c, opts)
}

// loweredCases lists the node conformance cases whose model uses an op that
// has a lowering, with the ops concerned.
func loweredCases(t *testing.T) map[string][]string {
	root := testutil.ONNXTestdata(t)
	dirs, err := conformance.Cases(filepath.Join(root, "node"))
	require.NoError(t, err)
	out := map[string][]string{}
	for _, dir := range dirs {
		m, err := importer.Load(filepath.Join(dir, "model.onnx"))
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		for _, n := range m.Graph.Nodes {
			if n.Domain == "" && graph.HasLowering(n.OpType) && !seen[n.OpType] {
				seen[n.OpType] = true
				out[dir] = append(out[dir], n.OpType)
			}
		}
	}
	return out
}

// loweringGaps are lowered-form failures that are expected, by case-name
// pattern, with the reason.
var loweringGaps = map[string]string{
	// Random ops cannot match the generator the expected outputs came from.
	`^test_training_dropout`: "random outputs",
	`^test_dropout_random`:   "random outputs",
	`^test_bernoulli`:        "random outputs (the full backend fails these too)",
}

// envRun is the case filter the conformance tests share.
func envRun() string { return os.Getenv("ONNXTRAIN_CONFORMANCE_RUN") }

func runLowered(t *testing.T, b backend.Backend) {
	cases := loweredCases(t)
	require.NotEmpty(t, cases)
	dirs := make([]string, 0, len(cases))
	for dir := range cases {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	var run *regexp.Regexp
	if r := envRun(); r != "" {
		run = regexp.MustCompile(r)
	}
	var results []conformance.Result
	for _, dir := range dirs {
		name := filepath.Base(dir)
		if run != nil && !run.MatchString(name) {
			continue
		}
		r := conformance.RunCase(b, dir, conformance.Options{Skip: loweringGaps})
		results = append(results, r)
		if r.Status != conformance.Pass || testing.Verbose() {
			t.Logf("%s (lowered: %v)", r, cases[dir])
		}
		assert.NotEqual(t, conformance.Fail, r.Status, "%s (lowered: %v)", r, cases[dir])
	}
	t.Log(conformance.FormatSummary(results))
}

func TestConformanceLoweredOps(t *testing.T) {
	cpu, err := backend.Open("cpu")
	require.NoError(t, err)
	runLowered(t, unfused{cpu})
}

func TestConformanceLoweredOpsTyped(t *testing.T) {
	cpu, err := backend.Open("cpu")
	require.NoError(t, err)
	runLowered(t, typedUnfused{cpu})
}
