package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

func TestNPZ(t *testing.T) {
	d, err := OpenNPZ("testdata/tiny.npz", NPZOptions{})
	require.NoError(t, err)
	assert.Equal(t, 6, d.Len())
	assert.Equal(t, []string{"mask", "x"}, d.Inputs())
	in, lab, err := d.Gather(0, []int{4, 0, 5})
	require.NoError(t, err)
	want, err := tensorio.ReadNPZ("testdata/tiny_gather.npz")
	require.NoError(t, err)
	assert.Equal(t, want["x"], in["x"])
	assert.Equal(t, want["mask"], in["mask"])
	assert.Equal(t, want["labels"], lab)
	assert.Equal(t, []int{3, 3}, in["x"].Shape)

	// Inputs picked by name; labels under another name.
	d, err = OpenNPZ("testdata/tiny.npz", NPZOptions{Inputs: []string{"x"}, Labels: "mask"})
	require.NoError(t, err)
	in, lab, err = d.Gather(0, []int{1})
	require.NoError(t, err)
	assert.Len(t, in, 1)
	assert.Equal(t, []int{1, 2}, lab.Shape)
	d, err = OpenNPZ("testdata/tiny.npz", NPZOptions{NoLabels: true})
	require.NoError(t, err)
	in, lab, err = d.Gather(0, []int{1})
	require.NoError(t, err)
	assert.Len(t, in, 3)
	assert.Nil(t, lab)

	_, _, err = d.Gather(0, []int{6})
	assert.ErrorContains(t, err, "index 6 out of range [0, 6)")
}

func TestNPZErrors(t *testing.T) {
	_, err := OpenNPZ("testdata/tiny.npz", NPZOptions{Labels: "target"})
	assert.ErrorContains(t, err, `testdata/tiny.npz: labels array "target" missing (arrays: "labels", "mask", "x")`)
	_, err = OpenNPZ("testdata/tiny.npz", NPZOptions{Inputs: []string{"input_ids"}})
	assert.ErrorContains(t, err, `testdata/tiny.npz: input array "input_ids" missing`)
	_, err = OpenNPZ("testdata/bad_leading.npz", NPZOptions{})
	assert.ErrorContains(t, err, `testdata/bad_leading.npz: leading dimensions differ: array "x" has 6 examples (shape [6 3]), array "labels" has 5`)
	_, err = OpenNPZ("testdata/missing.npz", NPZOptions{})
	assert.ErrorContains(t, err, "missing.npz")
	_, err = NewArrays("mem", map[string]*graph.Tensor{"x": graph.FromFloat32([]float32{1}), "labels": graph.FromInt64([]int64{1}, 1)}, NPZOptions{})
	assert.ErrorContains(t, err, `mem: array "x" is a scalar`)
}

// writeIDX writes an IDX file of unsigned bytes, gzipped if the name ends in .gz.
func writeIDX(t testing.TB, path string, dims []int, data []byte) {
	var b bytes.Buffer
	b.Write([]byte{0, 0, 0x08, byte(len(dims))})
	for _, d := range dims {
		require.NoError(t, binary.Write(&b, binary.BigEndian, uint32(d)))
	}
	b.Write(data)
	raw := b.Bytes()
	if filepath.Ext(path) == ".gz" {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, err := zw.Write(raw)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		raw = z.Bytes()
	}
	require.NoError(t, os.WriteFile(path, raw, 0o644))
}

func TestIDX(t *testing.T) {
	dir := t.TempDir()
	pix := make([]byte, 3*2*4)
	for i := range pix {
		pix[i] = byte(i * 11)
	}
	writeIDX(t, filepath.Join(dir, "train-images-idx3-ubyte.gz"), []int{3, 2, 4}, pix)
	writeIDX(t, filepath.Join(dir, "train-labels-idx1-ubyte"), []int{3}, []byte{7, 0, 2})

	d, err := OpenMNIST(dir, "train", IDXOptions{Input: "pixels"})
	require.NoError(t, err)
	assert.Equal(t, 3, d.Len())
	h, w := d.ImageSize()
	assert.Equal(t, [2]int{2, 4}, [2]int{h, w})
	in, lab, err := d.Gather(0, []int{2, 0})
	require.NoError(t, err)
	img := in["pixels"]
	require.NotNil(t, img)
	assert.Equal(t, []int{2, 1, 2, 4}, img.Shape)
	assert.Equal(t, []int64{2, 7}, lab.Int64s())
	assert.Equal(t, float32(16*11)/255, img.Float32s()[0], "image 2 starts at byte 16")
	assert.Equal(t, float32(7*11)/255, img.Float32s()[8+7])

	norm, err := OpenIDX(filepath.Join(dir, "train-images-idx3-ubyte.gz"), filepath.Join(dir, "train-labels-idx1-ubyte"),
		IDXOptions{Mean: 0.1307, Std: 0.3081})
	require.NoError(t, err)
	in, _, err = norm.Gather(0, []int{1})
	require.NoError(t, err)
	x := float32(9*11) / 255
	assert.Equal(t, (x-float32(0.1307))/float32(0.3081), in["input"].Float32s()[1])
}

func TestIDXErrors(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	writeIDX(t, p("img"), []int{2, 2, 2}, make([]byte, 8))
	writeIDX(t, p("lab"), []int{2}, []byte{1, 2})
	writeIDX(t, p("lab3"), []int{3}, []byte{1, 2, 3})
	writeIDX(t, p("short"), []int{2, 2, 2}, make([]byte, 7))
	writeIDX(t, p("long.gz"), []int{2, 2, 2}, make([]byte, 9))
	require.NoError(t, os.WriteFile(p("magic"), []byte{0x12, 0x34, 0x08, 0x03, 0, 0, 0, 0}, 0o644))
	require.NoError(t, os.WriteFile(p("float"), []byte{0, 0, 0x0d, 0x01, 0, 0, 0, 0}, 0o644))

	cases := []struct{ img, lab, want string }{
		{"magic", "lab", "magic: not an IDX file (magic 12 34 08 03"},
		{"float", "lab", "float: IDX element type 0x0d is not supported"},
		{"short", "lab", "short: IDX dimensions [2 2 2] need 8 bytes of data, the file has 7"},
		{"long.gz", "lab", "long.gz: data continues past the 8 bytes"},
		{"img", "lab3", "has 2 images but"},
		{"lab", "lab", "lab: images must have 3 dimensions (N, H, W), the file has 1"},
		{"img", "img", "img: labels must have 1 dimension (N), the file has 3"},
		{"nothere", "lab", "nothere"},
	}
	for _, c := range cases {
		_, err := OpenIDX(p(c.img), p(c.lab), IDXOptions{})
		assert.ErrorContains(t, err, c.want, "%s + %s", c.img, c.lab)
	}
	_, err := OpenMNIST(dir, "t10k", IDXOptions{})
	assert.ErrorContains(t, err, `no images file for split "t10k"`)
}

func TestFashionMNIST(t *testing.T) {
	const dir = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(filepath.Join(dir, "t10k-images-idx3-ubyte.gz")); err != nil {
		testutil.Skip(t, "Fashion-MNIST not found in %s", dir)
	}
	d, err := OpenMNIST(dir, "t10k", IDXOptions{Mean: 0.2860, Std: 0.3530})
	require.NoError(t, err)
	assert.Equal(t, 10000, d.Len())
	h, w := d.ImageSize()
	assert.Equal(t, [2]int{28, 28}, [2]int{h, w})
	assert.Equal(t, 9, d.Label(0), "the first test image is an ankle boot")
	in, lab, err := d.Gather(0, []int{0, 9999})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 1, 28, 28}, in["input"].Shape)
	assert.Equal(t, int64(9), lab.Int64s()[0])
	lo, hi := float32(1e9), float32(-1e9)
	for _, v := range in["input"].Float32s() {
		lo, hi = min(lo, v), max(hi, v)
	}
	assert.InDelta(t, (0-0.2860)/0.3530, lo, 1e-5, "background pixels normalised")
	assert.Greater(t, hi, float32(1))
}

// FuzzDecodeIDX: whatever an IDX file (or a gzipped one) holds, reading it
// returns an error or exactly as many bytes as its dimensions describe;
// it never panics.
func FuzzDecodeIDX(f *testing.F) {
	dir := f.TempDir()
	for _, name := range []string{"a.idx", "a.idx.gz"} {
		p := filepath.Join(dir, name)
		writeIDX(f, p, []int{2, 2, 3}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		data, dims, err := decodeIDX("x.idx", bytes.NewReader(b))
		if err != nil {
			return
		}
		n, err := graph.NumElements(dims)
		require.NoError(t, err)
		require.Len(t, data, n)
	})
}
