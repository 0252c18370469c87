package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// fullState returns a state with every field set.
func fullState(t testing.TB) *State {
	t.Helper()
	pcg := rand.NewPCG(7, 11)
	pcg.Uint64()
	rngBlob, err := pcg.MarshalBinary()
	require.NoError(t, err)
	bf := graph.Zeros(graph.BFloat16, 2)
	bf.Data = []uint16{graph.Float32ToBFloat16(1.5), graph.Float32ToBFloat16(-2)}
	return &State{
		Step: 123, Epoch: 4, BatchInEpoch: 9,
		Params: map[string]*graph.Tensor{
			"fc.weight":   graph.FromFloat32([]float32{1, -2, 3.5, float32(math.Pi), 1e-30, -0, 7, 8, 9, 10, 11, 12}, 3, 4),
			"fc.bias":     graph.FromFloat32([]float32{0.25, -0.5, 0.125, 1}, 4),
			"scale":       graph.FromFloat32([]float32{2}),
			"layer/1/emb": bf,
		},
		Buffers: map[string]*graph.Tensor{
			"bn.running_mean":         graph.FromFloat32([]float32{0.1, 0.2}, 2),
			"bn.num_batches_tracked":  graph.FromInt64([]int64{41}),
			"bn.running_var.float64s": graph.FromFloat64([]float64{1.0000000000000002}, 1),
		},
		Optimizer: map[string]*graph.Tensor{
			"fc.weight/exp_avg":    graph.FromFloat32(make([]float32, 12), 3, 4),
			"fc.weight/exp_avg_sq": graph.FromFloat32([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 3, 4),
			"fc.weight/step":       graph.FromInt64([]int64{123}),
			"step":                 graph.FromInt64([]int64{123}),
			"lr":                   graph.FromFloat64([]float64{3e-4}),
		},
		Schedule:          map[string]any{"last_lr": 0.000123456789, "step": 123.0, "kind": "cosine", "milestones": []any{10.0, 20.0}},
		RNG:               map[string][]byte{"dropout": rngBlob, "data": {0, 1, 2, 255}},
		LossScaler:        map[string]float64{"scale": 65536, "growth_tracker": 3},
		CheckpointCounter: 12,
		Extra:             map[string]json.RawMessage{"tracker": json.RawMessage(`{"best":0.9,"names":["a","b"]}`)},
		Versions:          map[string]string{"onnxtrain": "v0.5.0-test", "model_sha256": "abc"},
	}
}

func requireSameTensors(t *testing.T, want, got map[string]*graph.Tensor) {
	t.Helper()
	require.Len(t, got, len(want))
	for name, w := range want {
		g, ok := got[name]
		require.True(t, ok, "tensor %q is missing", name)
		assert.Equal(t, w.DType, g.DType, name)
		assert.Equal(t, len(w.Shape), len(g.Shape), name)
		assert.True(t, graph.SameShape(w.Shape, g.Shape), "%s: shape %v, want %v", name, g.Shape, w.Shape)
		assert.Equal(t, w.Data, g.Data, name)
	}
}

func TestCheckpointRoundTripEveryField(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", CheckpointName(12))
	st := fullState(t)
	require.NoError(t, SaveState(dir, st))

	got, err := LoadState(dir)
	require.NoError(t, err)
	assert.Equal(t, 123, got.Step)
	assert.Equal(t, 4, got.Epoch)
	assert.Equal(t, 9, got.BatchInEpoch)
	assert.Equal(t, 12, got.CheckpointCounter)
	requireSameTensors(t, st.Params, got.Params)
	requireSameTensors(t, st.Buffers, got.Buffers)
	requireSameTensors(t, st.Optimizer, got.Optimizer)
	assert.Equal(t, st.Schedule, got.Schedule)
	assert.Equal(t, st.RNG, got.RNG)
	assert.Equal(t, st.LossScaler, got.LossScaler)
	assert.Equal(t, st.Versions, got.Versions)
	require.Contains(t, got.Extra, "tracker")
	assert.JSONEq(t, string(st.Extra["tracker"]), string(got.Extra["tracker"]))

	// The restored generator continues the original's sequence.
	orig := rand.NewPCG(7, 11)
	orig.Uint64()
	restored := &rand.PCG{}
	require.NoError(t, restored.UnmarshalBinary(got.RNG["dropout"]))
	for range 5 {
		assert.Equal(t, orig.Uint64(), restored.Uint64())
	}

	// The manifest records each file's real size and SHA-256.
	man, err := ReadManifest(dir)
	require.NoError(t, err)
	assert.Equal(t, CheckpointFormat, man.Format)
	assert.Equal(t, CheckpointFormatVersion, man.FormatVersion)
	assert.Equal(t, "v0.5.0-test", man.OnnxtrainVersion)
	assert.Equal(t, runtime.Version(), man.GoVersion)
	assert.False(t, man.Created.IsZero())
	assert.Len(t, man.Files, 3)
	for _, name := range []string{CheckpointModelFile, CheckpointOptimizerFile, CheckpointStateFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		assert.Equal(t, hex.EncodeToString(sum[:]), man.Files[name].SHA256, name)
		assert.Equal(t, int64(len(b)), man.Files[name].Size, name)
	}

	// model.safetensors is a plain safetensors file of params and buffers.
	model, _, err := tensorio.ReadSafetensors(filepath.Join(dir, CheckpointModelFile))
	require.NoError(t, err)
	assert.Len(t, model, len(st.Params)+len(st.Buffers))
	assert.Equal(t, []float32{0.25, -0.5, 0.125, 1}, model["fc.bias"].Float32s())

	// Nothing but the checkpoint remains in the parent.
	entries, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, CheckpointName(12), entries[0].Name())
}

func TestCheckpointEmptyStateRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	require.NoError(t, SaveState(dir, &State{Step: 1}))
	got, err := LoadState(dir)
	require.NoError(t, err)
	assert.Equal(t, 1, got.Step)
	assert.NotNil(t, got.Params)
	assert.Empty(t, got.Params)
	assert.NotNil(t, got.Schedule)
	assert.NotNil(t, got.Extra)
}

func TestCheckpointOverwriteReplacesAtomically(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "latest")
	st := fullState(t)
	require.NoError(t, SaveState(dir, st))
	st.Step = 200
	st.Params["fc.bias"] = graph.FromFloat32([]float32{9, 9, 9, 9}, 4)
	require.NoError(t, SaveState(dir, st))

	got, err := LoadState(dir)
	require.NoError(t, err)
	assert.Equal(t, 200, got.Step)
	assert.Equal(t, []float32{9, 9, 9, 9}, got.Params["fc.bias"].Float32s())
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no .old or .tmp-* folder is left")
	assert.Equal(t, "latest", entries[0].Name())
}

func TestCheckpointInterruptedBetweenRenames(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "latest")
	st := fullState(t)
	require.NoError(t, SaveState(dir, st))
	// A save killed after moving the old checkpoint aside, before putting
	// the new one in place, leaves dir.old and a complete .tmp-* folder.
	require.NoError(t, os.Rename(dir, dir+".old"))
	require.NoError(t, os.Mkdir(dir+".tmp-deadbeef", 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(dir+".tmp-deadbeef", CheckpointModelFile), []byte("partial"), 0o666))

	got, err := LoadState(dir)
	require.NoError(t, err, "LoadState falls back to the old checkpoint")
	assert.Equal(t, 123, got.Step)

	st.Step = 124
	require.NoError(t, SaveState(dir, st))
	got, err = LoadState(dir)
	require.NoError(t, err)
	assert.Equal(t, 124, got.Step)
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the stale .old and .tmp-* folders are removed")
}

func TestSaveStateRefusesToReplaceOtherFolders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runs")
	require.NoError(t, os.Mkdir(dir, 0o777))
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("keep me"), 0o666))
	err := SaveState(dir, fullState(t))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not an onnxtrain checkpoint")
	assert.Contains(t, err.Error(), "notes.txt")
	b, err := os.ReadFile(notes)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(b))

	file := filepath.Join(t.TempDir(), "afile")
	require.NoError(t, os.WriteFile(file, nil, 0o666))
	err = SaveState(file, fullState(t))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a folder")
}

func TestSaveStateRejectsInvalidStates(t *testing.T) {
	cases := []struct {
		name   string
		modify func(st *State)
		want   string
	}{
		{"nil tensor", func(st *State) { st.Params["fc.bias"] = nil }, `parameter "fc.bias" is nil`},
		{"param and buffer", func(st *State) { st.Buffers["fc.bias"] = graph.FromFloat32([]float32{1}, 1) }, `"fc.bias" is both a parameter and a buffer`},
		{"bad data", func(st *State) { st.Optimizer["fc.weight/exp_avg"] = graph.FromFloat32([]float32{1}, 3, 4) }, `optimizer state "fc.weight/exp_avg"`},
		{"string tensor", func(st *State) {
			st.Buffers["names"] = &graph.Tensor{DType: graph.String, Shape: []int{1}, Data: []string{"x"}}
		}, `"names"`},
		{"NaN scaler", func(st *State) { st.LossScaler["scale"] = math.NaN() }, `loss scaler entry "scale"`},
		{"Inf schedule", func(st *State) { st.Schedule["last_lr"] = math.Inf(1) }, `schedule entry "last_lr"`},
		{"invalid extra", func(st *State) { st.Extra["tracker"] = json.RawMessage(`{"a":`) }, `extra object "tracker"`},
		{"reserved name", func(st *State) { st.Params["__metadata__"] = graph.FromFloat32([]float32{1}, 1) }, `"__metadata__"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			st := fullState(t)
			c.modify(st)
			err := SaveState(filepath.Join(parent, "ck"), st)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			entries, rerr := os.ReadDir(parent)
			require.NoError(t, rerr)
			assert.Empty(t, entries, "nothing is written")
		})
	}
	assert.ErrorContains(t, SaveState(filepath.Join(t.TempDir(), "ck"), nil), "state is nil")
}

func TestLoadStateDetectsCorruptedFiles(t *testing.T) {
	for _, name := range []string{CheckpointModelFile, CheckpointOptimizerFile, CheckpointStateFile} {
		t.Run("flip "+name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			require.NoError(t, SaveState(dir, fullState(t)))
			path := filepath.Join(dir, name)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			b[len(b)*2/3] ^= 0x10
			require.NoError(t, os.WriteFile(path, b, 0o666))
			_, err = LoadState(dir)
			require.ErrorIs(t, err, ErrCheckpointCorrupt)
			assert.Contains(t, err.Error(), name)
			assert.Contains(t, err.Error(), "SHA-256")
			// ListCheckpoints's cheap check (sizes) does not read the data.
			m, err := ReadManifest(dir)
			require.NoError(t, err)
			assert.NoError(t, ckptCheckSizes(dir, m))
		})
		t.Run("truncate "+name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			require.NoError(t, SaveState(dir, fullState(t)))
			path := filepath.Join(dir, name)
			fi, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(path, fi.Size()-1))
			_, err = LoadState(dir)
			require.ErrorIs(t, err, ErrCheckpointCorrupt)
			assert.Contains(t, err.Error(), name)
			assert.Contains(t, err.Error(), "bytes")
		})
		t.Run("remove "+name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			require.NoError(t, SaveState(dir, fullState(t)))
			require.NoError(t, os.Remove(filepath.Join(dir, name)))
			_, err := LoadState(dir)
			require.ErrorIs(t, err, ErrCheckpointIncomplete)
			assert.Contains(t, err.Error(), name+" is missing")
		})
	}
}

func TestLoadStateDetectsBadManifests(t *testing.T) {
	save := func(t *testing.T) (string, string) {
		dir := filepath.Join(t.TempDir(), "ck")
		require.NoError(t, SaveState(dir, fullState(t)))
		return dir, filepath.Join(dir, CheckpointManifestFile)
	}
	t.Run("truncated", func(t *testing.T) {
		dir, path := save(t)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b[:len(b)/2], 0o666))
		_, err = LoadState(dir)
		require.ErrorIs(t, err, ErrCheckpointCorrupt)
		assert.Contains(t, err.Error(), CheckpointManifestFile)
		assert.Contains(t, err.Error(), "truncated")
	})
	t.Run("missing", func(t *testing.T) {
		dir, path := save(t)
		require.NoError(t, os.Remove(path))
		_, err := LoadState(dir)
		require.ErrorIs(t, err, ErrCheckpointIncomplete)
		assert.Contains(t, err.Error(), CheckpointManifestFile)
	})
	t.Run("newer format", func(t *testing.T) {
		dir, path := save(t)
		var m map[string]any
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &m))
		m["format_version"] = CheckpointFormatVersion + 1
		b, err = json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o666))
		_, err = LoadState(dir)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "format version 2 is not supported")
	})
	t.Run("path in file name", func(t *testing.T) {
		dir, path := save(t)
		m, err := ReadManifest(dir)
		require.NoError(t, err)
		m.Files["../escape"] = m.Files[CheckpointStateFile]
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o666))
		_, err = LoadState(dir)
		require.ErrorIs(t, err, ErrCheckpointCorrupt)
		assert.Contains(t, err.Error(), `"../escape"`)
	})
	t.Run("no folder", func(t *testing.T) {
		_, err := LoadState(filepath.Join(t.TempDir(), "nothing"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "nothing")
	})
}

func TestCheckCompatibleListsEveryMismatch(t *testing.T) {
	st := fullState(t)
	params := map[string]*graph.Tensor{}
	for k, v := range st.Params {
		params[k] = v.Clone()
	}
	buffers := map[string]*graph.Tensor{}
	for k, v := range st.Buffers {
		buffers[k] = v.Clone()
	}
	require.NoError(t, CheckCompatible(st, params, buffers))

	params["fc.weight"] = graph.Zeros(graph.Float32, 4, 3)                // shape
	params["fc.bias"] = graph.Zeros(graph.Float64, 4)                     // dtype
	params["new.weight"] = graph.Zeros(graph.Float32, 2)                  // missing
	delete(params, "scale")                                               // unexpected
	buffers["bn.running_var"] = graph.Zeros(graph.Float32, 2)             // missing buffer
	st.Optimizer["ghost/momentum_buffer"] = graph.Zeros(graph.Float32, 1) // unknown parameter
	st.Optimizer["fc.bias/exp_avg"] = graph.Zeros(graph.Float32, 5)       // slot shape
	err := CheckCompatible(st, params, buffers)
	require.ErrorIs(t, err, ErrCheckpointIncompatible)
	msg := err.Error()
	for _, want := range []string{
		`parameter "fc.weight": shape [3 4] in the checkpoint, [4 3] in the model`,
		`parameter "fc.bias": dtype float32 in the checkpoint, float64 in the model`,
		`parameter "new.weight" is missing from the checkpoint`,
		`parameter "scale" of the checkpoint is not in the model`,
		`buffer "bn.running_var" is missing from the checkpoint`,
		`optimizer state "ghost/momentum_buffer" is for parameter "ghost"`,
		`optimizer state "fc.bias/exp_avg": shape [5], but the parameter has [4]`,
		`optimizer state "fc.weight/exp_avg": shape [3 4], but the parameter has [4 3]`,
		`optimizer state "fc.weight/exp_avg_sq": shape [3 4], but the parameter has [4 3]`,
		"9 problem(s)",
	} {
		assert.Contains(t, msg, want)
	}
	// The optimizer's own step counter is not checked against a shape.
	assert.NotContains(t, msg, `"fc.weight/step"`)

	// A buffer stored as a parameter is named as such.
	st2 := fullState(t)
	p2 := map[string]*graph.Tensor{}
	for k, v := range st2.Params {
		p2[k] = v
	}
	b2 := map[string]*graph.Tensor{"fc.bias": p2["fc.bias"]}
	for k, v := range st2.Buffers {
		b2[k] = v
	}
	delete(p2, "fc.bias")
	delete(st2.Optimizer, "fc.bias/exp_avg")
	err = CheckCompatible(st2, p2, b2)
	require.ErrorIs(t, err, ErrCheckpointIncompatible)
	assert.Contains(t, err.Error(), `buffer "fc.bias" is a parameter in the checkpoint`)
	assert.Contains(t, err.Error(), "1 problem(s)")
}

// Checkpoints are named by optimizer step; the six-digit save-count names
// of earlier versions still parse (to the same number).
func TestCheckpointNames(t *testing.T) {
	assert.Equal(t, "checkpoint-12", CheckpointName(12))
	assert.Equal(t, "checkpoint-1234567", CheckpointName(1234567))
	for name, want := range map[string]int{"checkpoint-000012": 12, "checkpoint-12": 12, "checkpoint-0": 0} {
		n, ok := ckptParseName(name)
		assert.True(t, ok, name)
		assert.Equal(t, want, n, name)
	}
	for _, bad := range []string{"checkpoint-00001x", "ckpt-000012", "checkpoint-", "checkpoint--1", "checkpoint-1234567890123456789"} {
		_, ok := ckptParseName(bad)
		assert.False(t, ok, bad)
	}
}

// A run resumed from an old save-count checkpoint writes step-named ones;
// Latest picks the newest step, and pruning with a kept best spares it.
func TestLatestAcrossNamingSchemesAndPruneKeepsBest(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, SaveState(filepath.Join(root, "checkpoint-000002"), smallState(2))) // old: 2nd save, step 20
	for _, step := range []int{30, 40, 50, 60} {
		st := smallState(step / 10)
		require.NoError(t, SaveState(filepath.Join(root, CheckpointName(step)), st))
	}
	latest, err := Latest(root)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "checkpoint-60"), latest)
	require.NoError(t, PruneKeeping(root, 2, "checkpoint-30"))
	list, err := ListCheckpoints(root)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(root, "checkpoint-30"), filepath.Join(root, "checkpoint-50"), filepath.Join(root, "checkpoint-60")}, list)
}

func smallState(counter int) *State {
	return &State{
		Step: counter * 10, CheckpointCounter: counter,
		Params:    map[string]*graph.Tensor{"w": graph.FromFloat32([]float32{float32(counter)}, 1)},
		Optimizer: map[string]*graph.Tensor{"w/momentum_buffer": graph.FromFloat32([]float32{1}, 1)},
	}
}

func TestCheckpointRotationKeepsNewest(t *testing.T) {
	root := filepath.Join(t.TempDir(), "out")
	list, err := ListCheckpoints(root)
	require.NoError(t, err, "a missing root holds no checkpoints")
	assert.Empty(t, list)
	_, err = Latest(root)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no complete checkpoint")

	for _, c := range []int{3, 1, 10, 2, 7} { // saved out of order on purpose
		require.NoError(t, SaveState(filepath.Join(root, CheckpointName(c)), smallState(c)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "checkpoint-000099"), []byte("a file, not a folder"), 0o666))
	list, err = ListCheckpoints(root)
	require.NoError(t, err)
	want := []string{}
	for _, c := range []int{1, 2, 3, 7, 10} {
		want = append(want, filepath.Join(root, CheckpointName(c)))
	}
	assert.Equal(t, want, list)

	require.NoError(t, Prune(root, 2))
	list, err = ListCheckpoints(root)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(root, CheckpointName(7)), filepath.Join(root, CheckpointName(10))}, list)
	_, err = os.Stat(filepath.Join(root, CheckpointName(3)))
	assert.ErrorIs(t, err, os.ErrNotExist)
	latest, err := Latest(root)
	require.NoError(t, err)
	st, err := LoadState(latest)
	require.NoError(t, err)
	assert.Equal(t, 10, st.CheckpointCounter)

	assert.ErrorContains(t, Prune(root, 0), "keepLast must be at least 1")
	_, err = os.Stat(filepath.Join(root, "checkpoint-000099"))
	assert.NoError(t, err, "Prune leaves other files alone")
}

func TestLatestSkipsIncompleteCheckpoints(t *testing.T) {
	root := t.TempDir()
	for c := 1; c <= 2; c++ {
		require.NoError(t, SaveState(filepath.Join(root, CheckpointName(c)), smallState(c)))
	}
	// A complete-looking temporary folder of a save that never finished.
	tmp3 := filepath.Join(root, CheckpointName(3)+".tmp-0badf00d")
	require.NoError(t, SaveState(tmp3, smallState(3)))
	// A folder without manifest.
	no4 := filepath.Join(root, CheckpointName(4))
	require.NoError(t, SaveState(no4, smallState(4)))
	require.NoError(t, os.Remove(filepath.Join(no4, CheckpointManifestFile)))
	// A folder with a truncated file.
	tr5 := filepath.Join(root, CheckpointName(5))
	require.NoError(t, SaveState(tr5, smallState(5)))
	require.NoError(t, os.Truncate(filepath.Join(tr5, CheckpointModelFile), 10))
	// An empty folder.
	require.NoError(t, os.Mkdir(filepath.Join(root, CheckpointName(6)), 0o777))

	latest, err := Latest(root)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, CheckpointName(2)), latest)

	// A save interrupted between its renames still counts, at its .old name.
	old8 := filepath.Join(root, CheckpointName(8))
	require.NoError(t, SaveState(old8, smallState(8)))
	require.NoError(t, os.Rename(old8, old8+".old"))
	latest, err = Latest(root)
	require.NoError(t, err)
	assert.Equal(t, old8+".old", latest)
	st, err := LoadState(old8)
	require.NoError(t, err)
	assert.Equal(t, 8, st.CheckpointCounter)

	// Prune clears the debris of counters older than the newest complete
	// checkpoint, and keeps the complete ones.
	require.NoError(t, Prune(root, 10))
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{CheckpointName(1), CheckpointName(2), CheckpointName(8) + ".old"}, names)
	assert.False(t, strings.Contains(strings.Join(names, " "), ".tmp-"))
}
