package data

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// TestTokensMatchNumpyWindows checks the windows of uint16 and uint32 token
// files against numpy's own slicing of the same files
// (testdata/make_tokens.py, nanoGPT's x = data[i:i+T], y = data[i+1:i+1+T]).
func TestTokensMatchNumpyWindows(t *testing.T) {
	want, err := tensorio.ReadNPZ("testdata/tokens_windows.npz")
	require.NoError(t, err)
	for _, c := range []struct{ name, dtype string }{{"u16", "uint16"}, {"u32", "uint32"}} {
		t.Run(c.name, func(t *testing.T) {
			ds, err := OpenTokens("testdata/tokens_"+c.name+".bin", TokenOptions{DType: c.dtype, SeqLen: 8, Input: "tokens"})
			require.NoError(t, err)
			// 53 tokens: 6 whole windows of 8 with their next-token target.
			assert.Equal(t, 6, ds.Len())
			assert.EqualValues(t, 53, ds.TokenCount())
			in, labels, err := ds.Gather(0, []int{5, 0, 3})
			require.NoError(t, err)
			require.Contains(t, in, "tokens")
			assert.Equal(t, []int{3, 8}, in["tokens"].Shape)
			assert.Equal(t, want[c.name+"_x"].Int64s(), in["tokens"].Int64s())
			require.NotNil(t, labels)
			assert.Equal(t, want[c.name+"_y"].Int64s(), labels.Int64s())
		})
	}
}

// TestTokensTargetInput feeds the targets to a second graph input (a GPT
// export that computes its own loss) as int32.
func TestTokensTargetInput(t *testing.T) {
	want, err := tensorio.ReadNPZ("testdata/tokens_windows.npz")
	require.NoError(t, err)
	ds, err := OpenTokens("testdata/tokens_u32.bin", TokenOptions{DType: "uint32", SeqLen: 8, Input: "tokens",
		Target: "targets", TargetDType: graph.Int32})
	require.NoError(t, err)
	in, labels, err := ds.Gather(0, []int{5, 0, 3})
	require.NoError(t, err)
	assert.Nil(t, labels)
	assert.Equal(t, want["u32_x"].Int64s(), in["tokens"].Int64s())
	require.Equal(t, graph.Int32, in["targets"].DType)
	got := in["targets"].Data.([]int32)
	for i, v := range want["u32_y"].Int64s() {
		assert.EqualValues(t, v, got[i], "target %d", i)
	}
}

func TestTokensErrors(t *testing.T) {
	dir := t.TempDir()
	odd := filepath.Join(dir, "odd.bin")
	require.NoError(t, os.WriteFile(odd, make([]byte, 7), 0o644))
	short := filepath.Join(dir, "short.bin")
	require.NoError(t, os.WriteFile(short, make([]byte, 2*8), 0o644)) // 8 tokens: no window of 8 plus a target

	_, err := OpenTokens(odd, TokenOptions{DType: "uint16", SeqLen: 2, Input: "tokens"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a whole number of uint16 tokens")

	_, err = OpenTokens(short, TokenOptions{SeqLen: 8, Input: "tokens"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fewer than one window of 8")

	_, err = OpenTokens(short, TokenOptions{DType: "int8", SeqLen: 2, Input: "tokens"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `token dtype "int8"`)

	_, err = OpenTokens(short, TokenOptions{SeqLen: 0, Input: "tokens"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--seq-len")

	_, err = OpenTokens(filepath.Join(dir, "missing.bin"), TokenOptions{SeqLen: 2, Input: "tokens"})
	require.Error(t, err)

	// A token id beyond the vocabulary names the id and its offset.
	ds, err := OpenTokens("testdata/tokens_u16.bin", TokenOptions{SeqLen: 8, Input: "tokens", Vocab: 10})
	require.NoError(t, err)
	_, _, err = ds.Gather(0, []int{0})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "outside the model's vocabulary of 10")

	_, _, err = ds.Gather(0, []int{6})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "window 6 out of range")
}
