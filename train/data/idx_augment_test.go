package data

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/tensorio"
)

// TestIDXCropFlipMatchesTorchvision compares the crop-and-flip of one
// window with torchvision's RandomCrop(padding=2) at that window followed
// by hflip (testdata/make_idx_augment_golden.py).
func TestIDXCropFlipMatchesTorchvision(t *testing.T) {
	g, err := tensorio.ReadNPZ("testdata/idx_augment_golden.npz")
	require.NoError(t, err)
	image, params, want := g["image"], g["params"], g["out"]
	require.Equal(t, []int{5, 6}, image.Shape)
	src := make([]uint8, 30)
	for i := range src {
		src[i] = uint8(image.Int(i))
	}
	p := params.Int64s()
	wantAll := want.Float32s()
	for k := 0; k < params.Shape[0]; k++ {
		top, left, flip := int(p[3*k]), int(p[3*k+1]), p[3*k+2] == 1
		got := make([]float32, 30)
		cropFlip(src, got, 5, 6, 2, top, left, flip)
		assert.InDeltaSlice(t, wantAll[30*k:30*(k+1)], got, 1e-7, "window top %d left %d flip %v", top, left, flip)
	}
}

// TestIDXAugment checks the dataset side: every augmented image is one of
// the 2·(2·pad+1)² windows of its padded image, the draws cover every
// offset and both flips, an (epoch, image) pair always gives the same
// image, epochs differ, and without the options the image is unchanged.
func TestIDXAugment(t *testing.T) {
	const n, h, w, pad = 40, 4, 5, 1
	dir := t.TempDir()
	pix := make([]byte, n*h*w)
	for i := range pix {
		pix[i] = byte(1 + (i*37)%250) // no zero pixels: padding is recognisable
	}
	writeIDX(t, filepath.Join(dir, "train-images-idx3-ubyte"), []int{n, h, w}, pix)
	writeIDX(t, filepath.Join(dir, "train-labels-idx1-ubyte"), []int{n}, make([]byte, n))

	plain, err := OpenMNIST(dir, "train", IDXOptions{})
	require.NoError(t, err)
	aug, err := OpenMNIST(dir, "train", IDXOptions{CropPadding: pad, HFlip: true, Seed: 7})
	require.NoError(t, err)

	// The candidates, built directly from the definition.
	window := func(i, top, left int, flip bool) []float32 {
		out := make([]float32, h*w)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				cx := x
				if flip {
					cx = w - 1 - x
				}
				sy, sx := y+top-pad, cx+left-pad
				if sy >= 0 && sy < h && sx >= 0 && sx < w {
					out[y*w+x] = float32(pix[i*h*w+sy*w+sx]) / 255
				}
			}
		}
		return out
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	seen := map[[3]int]int{}
	var first []float32
	for epoch := 0; epoch < 5; epoch++ {
		in, _, err := aug.Gather(epoch, idx)
		require.NoError(t, err)
		got := in["input"].Float32s()
		if epoch == 0 {
			first = append([]float32(nil), got...)
		}
		for i := 0; i < n; i++ {
			img := got[i*h*w : (i+1)*h*w]
			found := false
			for top := 0; top <= 2*pad && !found; top++ {
				for left := 0; left <= 2*pad && !found; left++ {
					for _, flip := range []bool{false, true} {
						if assert.ObjectsAreEqual(window(i, top, left, flip), img) {
							f := 0
							if flip {
								f = 1
							}
							seen[[3]int{top, left, f}]++
							found = true
							break
						}
					}
				}
			}
			assert.True(t, found, "epoch %d image %d is no crop/flip of the image", epoch, i)
		}
	}
	assert.Len(t, seen, 2*(2*pad+1)*(2*pad+1), "200 draws cover every window and flip")

	again, _, err := aug.Gather(0, []int{3, 0})
	require.NoError(t, err)
	assert.Equal(t, first[3*h*w:4*h*w], again["input"].Float32s()[:h*w], "the same (epoch, image) gives the same image")
	assert.Equal(t, first[:h*w], again["input"].Float32s()[h*w:])
	other, _, err := aug.Gather(1, idx)
	require.NoError(t, err)
	assert.NotEqual(t, first, other["input"].Float32s(), "another epoch draws again")

	in, _, err := plain.Gather(3, []int{5})
	require.NoError(t, err)
	assert.Equal(t, window(5, pad, pad, false), in["input"].Float32s(), "no options: the image itself")

	_, err = OpenMNIST(dir, "train", IDXOptions{CropPadding: -1})
	assert.ErrorContains(t, err, "crop padding -1 is negative")
}
