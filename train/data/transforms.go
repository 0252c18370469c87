package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Torchvision-style geometric transforms of the image folder:
// RandomResizedCrop for training and Resize(shorter side) + CenterCrop
// for validation. They work on [C, h, w] planes in [0, 1], before flips
// and normalisation.

// Default RandomResizedCrop ranges, as torchvision's.
var (
	DefaultCropScale = [2]float64{0.08, 1}
	DefaultCropRatio = [2]float64{3.0 / 4.0, 4.0 / 3.0}
)

// cropBox is a window of an image: top-left corner and size.
type cropBox struct{ top, left, h, w int }

// randomResizedCropBox draws the window torchvision's
// RandomResizedCrop.get_params draws: up to ten tries of an area fraction
// uniform in scale and an aspect ratio log-uniform in ratio, the first
// that fits placed uniformly; else the whole image cropped to the nearest
// ratio in range, centred. The draws come from our PCG stream, not torch's.
func randomResizedCropBox(rng *rand.PCG, h, w int, scale, ratio [2]float64) cropBox {
	area := float64(h * w)
	logLo, logHi := math.Log(ratio[0]), math.Log(ratio[1])
	uniform := func(lo, hi float64) float64 {
		return lo + (hi-lo)*float64(rng.Uint64()>>11)/(1<<53)
	}
	for range 10 {
		target := area * uniform(scale[0], scale[1])
		ar := math.Exp(uniform(logLo, logHi))
		cw := int(math.RoundToEven(math.Sqrt(target * ar)))
		ch := int(math.RoundToEven(math.Sqrt(target / ar)))
		if cw > 0 && cw <= w && ch > 0 && ch <= h {
			return cropBox{top: intN(rng, h-ch+1), left: intN(rng, w-cw+1), h: ch, w: cw}
		}
	}
	// Fallback: central crop of the whole image at a ratio in range.
	in := float64(w) / float64(h)
	cw, ch := w, h
	switch {
	case in < ratio[0]:
		ch = int(math.RoundToEven(float64(w) / ratio[0]))
	case in > ratio[1]:
		cw = int(math.RoundToEven(float64(h) * ratio[1]))
	}
	return cropBox{top: (h - ch) / 2, left: (w - cw) / 2, h: ch, w: cw}
}

// crop copies box out of c planes of h×w.
func crop(src []float32, c, h, w int, b cropBox) []float32 {
	out := make([]float32, c*b.h*b.w)
	for ch := 0; ch < c; ch++ {
		for y := 0; y < b.h; y++ {
			row := src[ch*h*w+(b.top+y)*w+b.left:]
			copy(out[(ch*b.h+y)*b.w:(ch*b.h+y+1)*b.w], row[:b.w])
		}
	}
	return out
}

// shorterSide is torchvision's Resize(size) output for an int size: the
// shorter side becomes size, the longer int(size*long/short).
func shorterSide(h, w, size int) (int, int) {
	if h <= w {
		return size, int(float64(size) * float64(w) / float64(h))
	}
	return int(float64(size) * float64(h) / float64(w)), size
}

// centerBox is torchvision's CenterCrop window of oh×ow in h×w (both
// offsets int(round((in-out)/2)), with Python's round half to even).
func centerBox(h, w, oh, ow int) (cropBox, error) {
	if oh > h || ow > w {
		return cropBox{}, fmt.Errorf("centre crop %dx%d is larger than the resized image %dx%d", ow, oh, w, h)
	}
	return cropBox{top: int(math.RoundToEven(float64(h-oh) / 2)), left: int(math.RoundToEven(float64(w-ow) / 2)), h: oh, w: ow}, nil
}

// geometric applies the RandomResizedCrop or Resize + CenterCrop of opts
// to src ([c, h, w]) and returns d.h×d.w planes; ok is false when neither
// is configured.
func (d *ImageFolder) geometric(rng *rand.PCG, src []float32, h, w int) (out []float32, ok bool, err error) {
	switch {
	case d.opts.RandomResizedCrop:
		scale, ratio := d.opts.CropScale, d.opts.CropRatio
		if scale == [2]float64{} {
			scale = DefaultCropScale
		}
		if ratio == [2]float64{} {
			ratio = DefaultCropRatio
		}
		b := randomResizedCropBox(rng, h, w, scale, ratio)
		return resizeBilinear(crop(src, d.c, h, w, b), d.c, b.h, b.w, d.h, d.w), true, nil
	case d.opts.ResizeShorter > 0:
		rh, rw := shorterSide(h, w, d.opts.ResizeShorter)
		if rh != h || rw != w {
			src = resizeBilinear(src, d.c, h, w, rh, rw)
		}
		b, err := centerBox(rh, rw, d.h, d.w)
		if err != nil {
			return nil, true, err
		}
		return crop(src, d.c, rh, rw, b), true, nil
	}
	return nil, false, nil
}
