package cpu_test

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/conformance"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// primitiveGaps are the ops the conformance suites still run with a kernel
// outside the primitive and extended sets under PrimitivesOnly, because
// their lowering is not written yet or refuses the case's variant
// (docs/primitives.md lists them). The test fails when a new op joins the
// list; shrinking it is progress (remove the op here too).
//
// Resize, Upsample, Split, Squeeze, Unsqueeze, Tile, OneHot and MaxUnpool
// are here only in their run-time-value variants: the suites feed the
// values that fix their output shapes (scales, sizes, split sizes, axes,
// repeats, depth, output_shape) as graph inputs. Dropout is here only with
// training_mode or ratio as graph inputs: whether it draws random numbers
// (and so the stream later random ops see) depends on those values. With those values constant they lower
// (TestRunTimeValueCasesLowerOnceTheValuesAreConstants).
var primitiveGaps = map[string]bool{
	"Resize": true, "Upsample": true, "MaxUnpool": true, "Dropout": true,
	"OneHot": true, "Split": true, "Squeeze": true, "Tile": true, "Unsqueeze": true,
}

// TestPrimitivesOnlyPassesWhatTheFullBackendPasses runs every suite twice,
// with every kernel and restricted to the primitive and extended sets
// (`onnxtrain conformance --primitives-only`), and requires the same cases
// to pass.
func TestPrimitivesOnlyPassesWhatTheFullBackendPasses(t *testing.T) {
	root := testutil.ONNXTestdata(t) // under CI=true a missing folder fails
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	gaps := map[string][]string{}
	for _, suite := range []string{"node", "simple", "pytorch-converted", "pytorch-operator", "light"} {
		if suite == "light" && testing.Short() {
			continue
		}
		dir := filepath.Join(root, suite)
		full, err := conformance.Run(b, dir, conformance.Options{}, nil)
		require.NoError(t, err)
		opts := conformance.Options{Compile: backend.CompileOptions{PrimitivesOnly: true}}
		opts.Compiled = func(name string, exe backend.Executable) {
			ce, ok := exe.(*cpu.Executable)
			require.True(t, ok)
			for _, op := range ce.PrimitiveGaps() {
				gaps[op] = append(gaps[op], suite+"/"+name)
			}
		}
		prims, err := conformance.Run(b, dir, opts, nil)
		require.NoError(t, err)
		require.Len(t, prims, len(full))
		for i := range full {
			assert.Equal(t, full[i].Status, prims[i].Status, "%s/%s: full backend %q, primitives only %q", suite, full[i].Name, full[i].String(), prims[i].String())
		}
		fp, ff, fs := conformance.Summary(full)
		pp, pf, ps := conformance.Summary(prims)
		assert.Equal(t, [3]int{fp, ff, fs}, [3]int{pp, pf, ps}, "%s: summary", suite)
		t.Logf("%s: full %s; primitives only %s", suite, conformance.FormatSummary(full), conformance.FormatSummary(prims))
	}
	ops := make([]string, 0, len(gaps))
	for op := range gaps {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		t.Logf("gap %s: %d case(s), e.g. %s", op, len(gaps[op]), gaps[op][0])
		assert.True(t, primitiveGaps[op], "%s runs with its own kernel under PrimitivesOnly (%s): lower it or list it in primitiveGaps", op, strings.Join(gaps[op][:min(3, len(gaps[op]))], ", "))
	}
}
