package data

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/tensorio"
)

// Resize(shorter side) + CenterCrop and a resized crop of a given window
// match torchvision 0.14 on tensors (testdata/make_transforms_golden.py).
func TestTransformsMatchTorchvision(t *testing.T) {
	root := t.TempDir()
	writeImage(t, filepath.Join(root, "only", "p.png"), rgbPattern())
	gold, err := tensorio.ReadNPZ("testdata/transforms_golden.npz")
	require.NoError(t, err)
	for name, opts := range map[string]ImageFolderOptions{
		"resize8_center6":   {Height: 6, Width: 6, ResizeShorter: 8},
		"resize4_center3x4": {Height: 3, Width: 4, ResizeShorter: 4},
	} {
		d, err := OpenImageFolder(root, opts)
		require.NoError(t, err)
		in, _, err := d.Gather(0, []int{0})
		require.NoError(t, err)
		want := gold[name]
		require.Equal(t, append([]int{1}, want.Shape...), in["input"].Shape, name)
		for i, w := range want.Float32s() {
			require.InDelta(t, w, in["input"].Float32s()[i], 1e-6, "%s element %d", name, i)
		}
	}
	src := toPlanes(rgbPattern(), 3)
	box := cropBox{top: 1, left: 2, h: 3, w: 4}
	got := resizeBilinear(crop(src, 3, patH, patW, box), 3, box.h, box.w, 6, 6)
	for i, w := range gold["resized_crop"].Float32s() {
		require.InDelta(t, w, got[i], 1e-6, "resized_crop element %d", i)
	}
}

// RandomResizedCrop draws windows inside the image whose area fraction and
// aspect ratio are in torchvision's ranges, spread over them, the same for
// the same (seed, epoch, index) and different otherwise.
func TestRandomResizedCropBox(t *testing.T) {
	const h, w = 60, 80
	var minFrac, maxFrac, minAR, maxAR = 1.0, 0.0, 10.0, 0.0
	for i := range 2000 {
		b := randomResizedCropBox(newRNG(3, streamAugment, 0, i), h, w, DefaultCropScale, DefaultCropRatio)
		require.True(t, b.top >= 0 && b.left >= 0 && b.top+b.h <= h && b.left+b.w <= w, "%+v", b)
		frac := float64(b.h*b.w) / (h * w)
		ar := float64(b.w) / float64(b.h)
		minFrac, maxFrac = math.Min(minFrac, frac), math.Max(maxFrac, frac)
		minAR, maxAR = math.Min(minAR, ar), math.Max(maxAR, ar)
		// Rounding to whole pixels moves the ratio a little past the range.
		assert.True(t, ar > 0.7 && ar < 1.42, "aspect %v", ar)
		assert.True(t, frac > 0.07 && frac <= 1, "area %v", frac)
	}
	assert.Less(t, minFrac, 0.12)
	assert.Greater(t, maxFrac, 0.9)
	assert.Less(t, minAR, 0.8)
	assert.Greater(t, maxAR, 1.25)

	root := t.TempDir()
	writeImage(t, filepath.Join(root, "only", "p.png"), rgbPattern())
	d, err := OpenImageFolder(root, ImageFolderOptions{Height: 4, Width: 4, RandomResizedCrop: true, HFlip: true, Seed: 9, Workers: 2})
	require.NoError(t, err)
	a, _, err := d.Gather(0, []int{0})
	require.NoError(t, err)
	b, _, err := d.Gather(0, []int{0})
	require.NoError(t, err)
	assert.Equal(t, a["input"].Float32s(), b["input"].Float32s(), "same seed, epoch and index")
	differs := false
	for e := 1; e < 6 && !differs; e++ {
		c, _, err := d.Gather(e, []int{0})
		require.NoError(t, err)
		differs = !assert.ObjectsAreEqual(a["input"].Float32s(), c["input"].Float32s())
	}
	assert.True(t, differs, "other epochs draw other crops")

	_, err = OpenImageFolder(root, ImageFolderOptions{RandomResizedCrop: true})
	assert.ErrorContains(t, err, "needs the output size")
	d, err = OpenImageFolder(root, ImageFolderOptions{Height: 9, Width: 9, ResizeShorter: 6})
	require.NoError(t, err)
	_, _, err = d.Gather(0, []int{0})
	assert.ErrorContains(t, err, "centre crop 9x9 is larger than the resized image")
}
