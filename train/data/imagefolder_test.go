package data

import (
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/tensorio"
)

// pattern is the test image of testdata/make_golden.py:
// value(c, y, x) = (37x + 91y + 53c + 11) mod 256.
func pattern(c, y, x int) uint8 { return uint8((37*x + 91*y + 53*c + 11) % 256) }

const patW, patH = 7, 5

func rgbPattern() *image.RGBA {
	im := image.NewRGBA(image.Rect(0, 0, patW, patH))
	for y := 0; y < patH; y++ {
		for x := 0; x < patW; x++ {
			im.SetRGBA(x, y, color.RGBA{pattern(0, y, x), pattern(1, y, x), pattern(2, y, x), 255})
		}
	}
	return im
}

func writeImage(t *testing.T, path string, im image.Image) {
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	require.NoError(t, err)
	if filepath.Ext(path) == ".jpg" {
		require.NoError(t, jpeg.Encode(f, im, &jpeg.Options{Quality: 100}))
	} else {
		require.NoError(t, png.Encode(f, im))
	}
	require.NoError(t, f.Close())
}

// makeFolder writes a small ImageFolder tree of 7×5 images:
// bird/n.png (NRGBA, half transparent), cat/a.png, cat/c.png,
// cat/sub/b.png (RGB), dog/x.png (gray), dog/y.jpg.
func makeFolder(t *testing.T) string {
	root := t.TempDir()
	writeImage(t, filepath.Join(root, "cat", "a.png"), rgbPattern())
	writeImage(t, filepath.Join(root, "cat", "c.png"), rgbPattern())
	writeImage(t, filepath.Join(root, "cat", "sub", "b.png"), rgbPattern())
	gray := image.NewGray(image.Rect(0, 0, patW, patH))
	for i := range gray.Pix {
		gray.Pix[i] = uint8(i * 7)
	}
	writeImage(t, filepath.Join(root, "dog", "x.png"), gray)
	writeImage(t, filepath.Join(root, "dog", "y.jpg"), rgbPattern())
	nrgba := image.NewNRGBA(image.Rect(0, 0, patW, patH))
	for y := 0; y < patH; y++ {
		for x := 0; x < patW; x++ {
			nrgba.SetNRGBA(x, y, color.NRGBA{pattern(0, y, x), pattern(1, y, x), pattern(2, y, x), 128})
		}
	}
	writeImage(t, filepath.Join(root, "bird", "n.png"), nrgba)
	require.NoError(t, os.WriteFile(filepath.Join(root, "bird", "readme.txt"), []byte("not an image"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "notes.txt"), []byte("not a class"), 0o644))
	return root
}

func TestImageFolderLayout(t *testing.T) {
	root := makeFolder(t)
	d, err := OpenImageFolder(root, ImageFolderOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"bird", "cat", "dog"}, d.Classes())
	require.Equal(t, 6, d.Len())
	var rel []string
	var labels []int
	for i := 0; i < d.Len(); i++ {
		r, err := filepath.Rel(root, d.Path(i))
		require.NoError(t, err)
		rel = append(rel, filepath.ToSlash(r))
		labels = append(labels, d.Label(i))
	}
	// torchvision's order: sorted(os.walk(class)) then sorted files.
	assert.Equal(t, []string{"bird/n.png", "cat/a.png", "cat/c.png", "cat/sub/b.png", "dog/x.png", "dog/y.jpg"}, rel)
	assert.Equal(t, []int{0, 1, 1, 1, 2, 2}, labels)

	// JPEG: the fast YCbCr path agrees with image/color's conversion.
	f, err := os.Open(filepath.Join(root, "dog", "y.jpg"))
	require.NoError(t, err)
	jim, _, err := image.Decode(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, isYCbCr := jim.(*image.YCbCr)
	require.True(t, isYCbCr)

	in, lab, err := d.Gather(0, []int{1, 0, 4, 5})
	require.NoError(t, err)
	img := in["input"]
	assert.Equal(t, []int{4, 3, patH, patW}, img.Shape)
	assert.Equal(t, []int64{1, 0, 2, 2}, lab.Int64s())
	px := func(n, c, y, x int) float32 { return img.Float32s()[((n*3+c)*patH+y)*patW+x] }
	for c := 0; c < 3; c++ {
		for y := 0; y < patH; y++ {
			for x := 0; x < patW; x++ {
				n := color.NRGBAModel.Convert(jim.At(x, y)).(color.NRGBA)
				require.Equal(t, float32([]uint8{n.R, n.G, n.B}[c])/255, px(3, c, y, x), "JPEG at c%d y%d x%d", c, y, x)
				want := float32(pattern(c, y, x)) / 255
				require.Equal(t, want, px(0, c, y, x), "RGB png at c%d y%d x%d", c, y, x)
				require.Equal(t, want, px(1, c, y, x), "alpha is dropped, colour kept")
				require.Equal(t, float32(uint8((y*patW+x)*7))/255, px(2, c, y, x), "gray gives R=G=B")
			}
		}
	}
}

func TestImageFolderGrayscaleAndNormalise(t *testing.T) {
	root := makeFolder(t)
	d, err := OpenImageFolder(root, ImageFolderOptions{Input: "pixel_values", Grayscale: true, Mean: []float64{0.5}, Std: []float64{0.25}})
	require.NoError(t, err)
	in, _, err := d.Gather(0, []int{1})
	require.NoError(t, err)
	img := in["pixel_values"]
	assert.Equal(t, []int{1, 1, patH, patW}, img.Shape)
	for y := 0; y < patH; y++ {
		for x := 0; x < patW; x++ {
			l := 0.299*float64(pattern(0, y, x)) + 0.587*float64(pattern(1, y, x)) + 0.114*float64(pattern(2, y, x))
			got := float64(img.Float32s()[y*patW+x])*0.25 + 0.5
			assert.InDelta(t, l/255, got, 0.6/255, "luma at y%d x%d", y, x)
		}
	}

	mean, std := []float64{0.485, 0.456, 0.406}, []float64{0.229, 0.224, 0.225}
	d, err = OpenImageFolder(root, ImageFolderOptions{Mean: mean, Std: std})
	require.NoError(t, err)
	in, _, err = d.Gather(0, []int{2})
	require.NoError(t, err)
	for c := 0; c < 3; c++ {
		v := float32(pattern(c, 3, 4)) / 255
		want := (v - float32(mean[c])) / float32(std[c])
		assert.Equal(t, want, in["input"].Float32s()[(c*patH+3)*patW+4], "channel %d", c)
	}
	_, err = OpenImageFolder(root, ImageFolderOptions{Mean: []float64{0.5, 0.5}, Std: []float64{1, 1}})
	assert.ErrorContains(t, err, "needs 1 or 3 values each for Mean and Std, got 2 and 2")
}

func TestImageFolderResizeMatchesTorch(t *testing.T) {
	root := t.TempDir()
	writeImage(t, filepath.Join(root, "only", "p.png"), rgbPattern())
	gold, err := tensorio.ReadNPZ("testdata/resize_golden.npz")
	require.NoError(t, err)
	for _, hw := range [][2]int{{3, 4}, {8, 11}} {
		want := gold[fmt.Sprintf("%dx%d", hw[0], hw[1])]
		require.NotNil(t, want)
		d, err := OpenImageFolder(root, ImageFolderOptions{Height: hw[0], Width: hw[1]})
		require.NoError(t, err)
		in, _, err := d.Gather(0, []int{0})
		require.NoError(t, err)
		got := in["input"]
		assert.Equal(t, append([]int{1}, want.Shape...), got.Shape)
		for i, w := range want.Float32s() {
			require.InDelta(t, w, got.Float32s()[i], 1e-6, "%v element %d", hw, i)
		}
	}
}

// TestImageFolderAugment checks crops and flips: each output is the image
// shifted by at most the padding (zeros coming in), maybe mirrored; the
// draws repeat for the same (seed, epoch, index) and vary otherwise.
func TestImageFolderAugment(t *testing.T) {
	root := t.TempDir()
	writeImage(t, filepath.Join(root, "a", "p.png"), rgbPattern())
	writeImage(t, filepath.Join(root, "b", "p.png"), rgbPattern())
	const pad = 2
	opts := ImageFolderOptions{RandomCrop: true, CropPadding: pad, HFlip: true, Seed: 11, Workers: 2}
	d, err := OpenImageFolder(root, opts)
	require.NoError(t, err)
	orig := make([]float32, 3*patH*patW)
	for c := 0; c < 3; c++ {
		for y := 0; y < patH; y++ {
			for x := 0; x < patW; x++ {
				orig[(c*patH+y)*patW+x] = float32(pattern(c, y, x)) / 255
			}
		}
	}
	type draw struct {
		dy, dx int
		flip   bool
	}
	match := func(img []float32) (draw, bool) {
		for dy := -pad; dy <= pad; dy++ {
			for dx := -pad; dx <= pad; dx++ {
				for _, flip := range []bool{false, true} {
					ok := true
					for c := 0; c < 3 && ok; c++ {
						for y := 0; y < patH && ok; y++ {
							for x := 0; x < patW && ok; x++ {
								cx := x
								if flip {
									cx = patW - 1 - x
								}
								sy, sx := y+dy, cx+dx
								var want float32
								if sy >= 0 && sy < patH && sx >= 0 && sx < patW {
									want = orig[(c*patH+sy)*patW+sx]
								}
								ok = img[(c*patH+y)*patW+x] == want
							}
						}
					}
					if ok {
						return draw{dy, dx, flip}, true
					}
				}
			}
		}
		return draw{}, false
	}
	draws := map[draw]bool{}
	for epoch := 0; epoch < 30; epoch++ {
		in, _, err := d.Gather(epoch, []int{0, 1})
		require.NoError(t, err)
		again, _, err := d.Gather(epoch, []int{1})
		require.NoError(t, err)
		per := 3 * patH * patW
		assert.Equal(t, in["input"].Float32s()[per:], again["input"].Float32s(), "the same draw for (seed, epoch, index)")
		for n := 0; n < 2; n++ {
			dr, ok := match(in["input"].Float32s()[n*per : (n+1)*per])
			require.True(t, ok, "epoch %d image %d is not a padded crop of the original", epoch, n)
			draws[dr] = true
		}
	}
	flips := 0
	for dr := range draws {
		if dr.flip {
			flips++
		}
	}
	assert.Greater(t, len(draws), 10, "crops vary: %v", draws)
	assert.Positive(t, flips)
	assert.Less(t, flips, len(draws))

	opts.Seed = 12
	other, err := OpenImageFolder(root, opts)
	require.NoError(t, err)
	a, _, err := d.Gather(0, []int{0, 1})
	require.NoError(t, err)
	b, _, err := other.Gather(0, []int{0, 1})
	require.NoError(t, err)
	assert.NotEqual(t, a["input"].Float32s(), b["input"].Float32s(), "another seed, other draws")
}

func TestImageFolderErrors(t *testing.T) {
	root := t.TempDir()
	writeImage(t, filepath.Join(root, "a", "p.png"), rgbPattern())
	writeImage(t, filepath.Join(root, "b", "big.png"), image.NewRGBA(image.Rect(0, 0, 9, 9)))
	d, err := OpenImageFolder(root, ImageFolderOptions{})
	require.NoError(t, err)
	_, _, err = d.Gather(0, []int{0, 1})
	assert.ErrorContains(t, err, filepath.Join(root, "b", "big.png")+": image is 9x9, want 7x5 like the first image (set Height and Width to resize)")
	d, err = OpenImageFolder(root, ImageFolderOptions{Height: 4, Width: 4})
	require.NoError(t, err)
	in, _, err := d.Gather(0, []int{0, 1})
	require.NoError(t, err, "with a resize the sizes may differ")
	assert.Equal(t, []int{2, 3, 4, 4}, in["input"].Shape)

	require.NoError(t, os.WriteFile(filepath.Join(root, "a", "q.png"), []byte("garbage"), 0o644))
	d, err = OpenImageFolder(root, ImageFolderOptions{Height: 4, Width: 4})
	require.NoError(t, err)
	_, _, err = d.Gather(0, []int{1})
	assert.ErrorContains(t, err, filepath.Join(root, "a", "q.png")+": ")

	require.NoError(t, os.MkdirAll(filepath.Join(root, "empty", "sub"), 0o755))
	_, err = OpenImageFolder(root, ImageFolderOptions{})
	assert.ErrorContains(t, err, `no .png, .jpg or .jpeg files in class folders "empty"`)
	_, err = OpenImageFolder(t.TempDir(), ImageFolderOptions{})
	assert.ErrorContains(t, err, "no class folders")
	_, err = OpenImageFolder(filepath.Join(root, "nope"), ImageFolderOptions{})
	assert.ErrorContains(t, err, "nope")
	_, err = OpenImageFolder(root, ImageFolderOptions{Height: 4})
	assert.ErrorContains(t, err, "set both Height and Width")
}

// An ImageFolder feeds the loader end to end.
func TestImageFolderWithLoader(t *testing.T) {
	root := makeFolder(t)
	d, err := OpenImageFolder(root, ImageFolderOptions{Height: 4, Width: 4})
	require.NoError(t, err)
	var ds Dataset = d
	l, err := NewLoader(ds, LoaderConfig{BatchSize: 4, Shuffle: true, Seed: 1})
	require.NoError(t, err)
	total := 0
	for b, err := range l.Epoch(t.Context(), 0, 0) {
		require.NoError(t, err)
		assert.Equal(t, []int{b.Size, 3, 4, 4}, b.Inputs["input"].Shape)
		for k, i := range b.Indices {
			assert.Equal(t, int64(d.Label(i)), b.Labels.Int64s()[k])
		}
		for _, v := range b.Inputs["input"].Float32s() {
			require.False(t, math.IsNaN(float64(v)))
		}
		total += b.Size
	}
	assert.Equal(t, 6, total)
}
