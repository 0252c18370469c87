package data

// idxAugment is the random crop with zero padding and the horizontal flip
// of IDX training images, the pair torchvision users write as
// Compose([RandomCrop(size, padding=pad), RandomHorizontalFlip()]).
type idxAugment struct {
	pad  int
	flip bool
	seed uint64
}

func (a idxAugment) active() bool { return a.pad > 0 || a.flip }

// apply writes image i of epoch, src (h×w bytes), cropped and flipped as
// drawn, to dst (h×w pixels in [0, 1]). The window's top and left offsets
// into the padded image are drawn first, uniform in [0, 2·pad], then the
// flip; padding reads as 0 (black), as torchvision pads with fill 0.
func (a idxAugment) apply(epoch, i int, src []uint8, dst []float32, h, w int) {
	rng := newRNG(a.seed, streamAugment, epoch, i)
	top, left := 0, 0
	if a.pad > 0 {
		top, left = intN(rng, 2*a.pad+1), intN(rng, 2*a.pad+1)
	}
	flip := a.flip && intN(rng, 2) == 1
	cropFlip(src, dst, h, w, a.pad, top, left, flip)
}

// cropFlip writes the h×w window at (top, left) of src padded by pad zeros
// on each side, mirrored left to right if flip, to dst, scaled to [0, 1].
func cropFlip(src []uint8, dst []float32, h, w, pad, top, left int, flip bool) {
	for y := 0; y < h; y++ {
		sy := y + top - pad
		row := dst[y*w : (y+1)*w]
		if sy < 0 || sy >= h {
			clear(row)
			continue
		}
		srow := src[sy*w : (sy+1)*w]
		for x := range row {
			cx := x // column of the crop shown at x
			if flip {
				cx = w - 1 - x
			}
			sx := cx + left - pad
			if sx < 0 || sx >= w {
				row[x] = 0
				continue
			}
			row[x] = float32(srow[sx]) / 255
		}
	}
}
