package data

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // register the JPEG decoder
	_ "image/png"  // register the PNG decoder
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/onnxtrain/onnxtrain/graph"
)

// ImageFolderOptions configures OpenImageFolder. The transforms run in
// torchvision's usual order: resize, random crop, horizontal flip, scale
// to [0, 1], normalise.
type ImageFolderOptions struct {
	// Input is the graph input the images feed; "" means "input".
	Input string
	// Height and Width resize every image (bilinear). Zero keeps the size,
	// and then every image must have the size of the first one.
	Height, Width int
	// Grayscale gives 1 channel (ITU-R 601-2 luma, as PIL's convert("L"))
	// instead of 3 (RGB; alpha is dropped).
	Grayscale bool
	// Mean and Std normalise each channel, (x - Mean[c]) / Std[c], after
	// scaling to [0, 1]: one value for all channels or one per channel.
	// Nil means no normalisation.
	Mean, Std []float64
	// RandomCrop pads each side with CropPadding zeros and crops a random
	// window of the output size (torchvision's RandomCrop(size, padding)).
	RandomCrop  bool
	CropPadding int
	// HFlip flips half the images left to right (RandomHorizontalFlip).
	HFlip bool
	// Seed drives the crops and flips, drawn per (Seed, epoch, index).
	Seed uint64
	// Workers decode images in parallel; 0 means GOMAXPROCS.
	Workers int
	// RandomResizedCrop crops a random window (an area fraction in
	// CropScale, an aspect ratio in CropRatio; zero values mean
	// torchvision's 0.08-1 and 3/4-4/3) and resizes it to Height×Width,
	// as torchvision's RandomResizedCrop (transforms.go).
	RandomResizedCrop bool
	CropScale         [2]float64
	CropRatio         [2]float64
	// ResizeShorter resizes the shorter side to this size (keeping the
	// aspect ratio) and then crops the centre Height×Width, as
	// torchvision's Resize(ResizeShorter) + CenterCrop((Height, Width)).
	ResizeShorter int
}

// ImageFolder is torchvision's ImageFolder layout: root/<class>/**/*.png
// or .jpg/.jpeg, classes numbered in sorted order of their folder names,
// files in the order torchvision lists them. Images become float32
// [N, C, H, W] and labels int64 [N].
//
// Resizing is plain bilinear interpolation with half-pixel centres, as
// torch.nn.functional.interpolate(mode="bilinear", align_corners=False)
// computes it on the [0, 1] values; it does not antialias, so shrinking by
// more than 2× differs from PIL's resize. JPEGs decode with Go's
// image/jpeg, whose YCbCr to RGB conversion can differ from libjpeg's by
// one level.
type ImageFolder struct {
	root    string
	opts    ImageFolderOptions
	classes []string
	files   []string
	labels  []int
	h, w, c int
	mean    []float32
	std     []float32
}

var imageExts = map[string]bool{".png": true, ".jpg": true, ".jpeg": true}

// OpenImageFolder lists the images under root; it decodes them only when
// they are gathered.
func OpenImageFolder(root string, opts ImageFolderOptions) (*ImageFolder, error) {
	d := &ImageFolder{root: root, opts: opts, c: 3}
	if d.opts.Input == "" {
		d.opts.Input = "input"
	}
	if opts.Grayscale {
		d.c = 1
	}
	if (opts.Height == 0) != (opts.Width == 0) || opts.Height < 0 || opts.Width < 0 {
		return nil, fmt.Errorf("data: %s: resize to %dx%d: set both Height and Width, or neither", root, opts.Height, opts.Width)
	}
	if (opts.RandomResizedCrop || opts.ResizeShorter > 0) && opts.Height == 0 {
		return nil, fmt.Errorf("data: %s: a random resized crop or a centre crop needs the output size (Height and Width)", root)
	}
	if opts.CropPadding < 0 {
		return nil, fmt.Errorf("data: %s: negative crop padding %d", root, opts.CropPadding)
	}
	var err error
	if d.mean, d.std, err = channelStats(opts.Mean, opts.Std, d.c); err != nil {
		return nil, fmt.Errorf("data: %s: %w", root, err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("data: image folder: %w", err)
	}
	for _, e := range entries {
		if isDir(root, e) {
			d.classes = append(d.classes, e.Name())
		}
	}
	sort.Strings(d.classes)
	if len(d.classes) == 0 {
		return nil, fmt.Errorf("data: %s: no class folders (want root/<class>/<image>)", root)
	}
	var empty []string
	for label, class := range d.classes {
		files, err := listImages(filepath.Join(root, class))
		if err != nil {
			return nil, fmt.Errorf("data: %s: %w", root, err)
		}
		if len(files) == 0 {
			empty = append(empty, class)
		}
		for _, f := range files {
			d.files = append(d.files, f)
			d.labels = append(d.labels, label)
		}
	}
	if len(empty) > 0 {
		return nil, fmt.Errorf("data: %s: no .png, .jpg or .jpeg files in class folders %s", root, quoteList(empty))
	}
	d.h, d.w = opts.Height, opts.Width
	if d.h == 0 {
		f, err := os.Open(d.files[0])
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		cfg, _, err := image.DecodeConfig(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("data: %s: %w", d.files[0], err)
		}
		d.h, d.w = cfg.Height, cfg.Width
	}
	if d.h <= 0 || d.w <= 0 {
		return nil, fmt.Errorf("data: %s: image size %dx%d", d.files[0], d.w, d.h)
	}
	return d, nil
}

func isDir(parent string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink != 0 { // torchvision follows links
		st, err := os.Stat(filepath.Join(parent, e.Name()))
		return err == nil && st.IsDir()
	}
	return false
}

// listImages lists dir's images as torchvision's make_dataset does:
// sorted(os.walk(dir)) visits folders in sorted order of their paths,
// and the files of each in sorted order.
func listImages(dir string) ([]string, error) {
	type folder struct {
		path  string
		files []string
	}
	var folders []folder
	var walk func(path string, depth int) error
	walk = func(path string, depth int) error {
		if depth > 64 {
			return fmt.Errorf("%s: folders nested too deep (a link cycle?)", path)
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		fo := folder{path: path}
		for _, e := range entries {
			if isDir(path, e) {
				if err := walk(filepath.Join(path, e.Name()), depth+1); err != nil {
					return err
				}
			} else if imageExts[strings.ToLower(filepath.Ext(e.Name()))] {
				fo.files = append(fo.files, e.Name())
			}
		}
		folders = append(folders, fo)
		return nil
	}
	if err := walk(dir, 0); err != nil {
		return nil, err
	}
	sort.Slice(folders, func(i, j int) bool { return folders[i].path < folders[j].path })
	var out []string
	for _, fo := range folders {
		sort.Strings(fo.files)
		for _, f := range fo.files {
			out = append(out, filepath.Join(fo.path, f))
		}
	}
	return out, nil
}

func channelStats(mean, std []float64, c int) ([]float32, []float32, error) {
	if mean == nil && std == nil {
		return nil, nil, nil
	}
	if len(mean) != len(std) || (len(mean) != 1 && len(mean) != c) {
		return nil, nil, fmt.Errorf("normalisation needs 1 or %d values each for Mean and Std, got %d and %d", c, len(mean), len(std))
	}
	m, s := make([]float32, c), make([]float32, c)
	for i := range m {
		j := min(i, len(mean)-1)
		if std[j] == 0 {
			return nil, nil, errors.New("normalisation Std is 0")
		}
		m[i], s[i] = float32(mean[j]), float32(std[j])
	}
	return m, s, nil
}

// Len is the number of images.
func (d *ImageFolder) Len() int { return len(d.files) }

// Classes returns the class names; a label indexes it.
func (d *ImageFolder) Classes() []string { return append([]string(nil), d.classes...) }

// Path returns the file of image i.
func (d *ImageFolder) Path(i int) string { return d.files[i] }

// Label returns the label of image i.
func (d *ImageFolder) Label(i int) int { return d.labels[i] }

// Gather decodes and transforms images idx into float32 [len(idx), C, H, W].
func (d *ImageFolder) Gather(epoch int, idx []int) (map[string]*graph.Tensor, *graph.Tensor, error) {
	per := d.c * d.h * d.w
	img := make([]float32, len(idx)*per)
	lab := make([]int64, len(idx))
	errs := make([]error, len(idx))
	for k, i := range idx {
		if i < 0 || i >= len(d.files) {
			return nil, nil, fmt.Errorf("data: image folder %s: index %d out of range [0, %d)", d.root, i, len(d.files))
		}
		lab[k] = int64(d.labels[i])
	}
	workers := d.opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(idx))
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				errs[k] = d.load(epoch, idx[k], img[k*per:(k+1)*per])
			}
		}()
	}
	for k := range idx {
		next <- k
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return map[string]*graph.Tensor{d.opts.Input: graph.FromFloat32(img, len(idx), d.c, d.h, d.w)}, graph.FromInt64(lab, len(idx)), nil
}

// load decodes image i and writes its transformed CHW pixels to dst.
func (d *ImageFolder) load(epoch, i int, dst []float32) error {
	path := d.files[i]
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	im, _, err := image.Decode(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("data: %s: %w", path, err)
	}
	b := im.Bounds()
	if d.opts.Height == 0 && (b.Dx() != d.w || b.Dy() != d.h) {
		return fmt.Errorf("data: %s: image is %dx%d, want %dx%d like the first image (set Height and Width to resize)", path, b.Dx(), b.Dy(), d.w, d.h)
	}
	if b.Dx() == 0 || b.Dy() == 0 {
		return fmt.Errorf("data: %s: empty image", path)
	}
	src := toPlanes(im, d.c) // [C, h, w] in [0, 1]
	rng := newRNG(d.opts.Seed, streamAugment, epoch, i)
	if g, ok, err := d.geometric(rng, src, b.Dy(), b.Dx()); err != nil { // transforms.go
		return fmt.Errorf("data: %s: %w", path, err)
	} else if ok {
		src = g
	} else if b.Dx() != d.w || b.Dy() != d.h {
		src = resizeBilinear(src, d.c, b.Dy(), b.Dx(), d.h, d.w)
	}
	top, left := 0, 0
	pad := 0
	if d.opts.RandomCrop {
		pad = d.opts.CropPadding
		top, left = intN(rng, 2*pad+1), intN(rng, 2*pad+1)
	}
	flip := d.opts.HFlip && intN(rng, 2) == 1
	hw := d.h * d.w
	for c := 0; c < d.c; c++ {
		plane := src[c*hw : (c+1)*hw]
		out := dst[c*hw : (c+1)*hw]
		for y := 0; y < d.h; y++ {
			sy := y + top - pad
			for x := 0; x < d.w; x++ {
				sx := x + left - pad
				if flip {
					// Flip after the crop: output column x shows crop
					// column w-1-x.
					sx = d.w - 1 - x + left - pad
				}
				var v float32 // padding is black
				if sy >= 0 && sy < d.h && sx >= 0 && sx < d.w {
					v = plane[sy*d.w+sx]
				}
				if d.mean != nil {
					v = (v - d.mean[c]) / d.std[c]
				}
				out[y*d.w+x] = v
			}
		}
	}
	return nil
}

// toPlanes converts an image to c planes (1: luma, 3: RGB) of float32
// pixels scaled to [0, 1] (x/255 from 8 bits per channel).
func toPlanes(im image.Image, c int) []float32 {
	b := im.Bounds()
	w, h := b.Dx(), b.Dy()
	out := make([]float32, c*w*h)
	put := func(x, y int, r, g, bl uint8) {
		o := y*w + x
		if c == 1 {
			// PIL's L = (R*19595 + G*38470 + B*7471 + 0x8000) >> 16.
			l := (uint32(r)*19595 + uint32(g)*38470 + uint32(bl)*7471 + 0x8000) >> 16
			out[o] = float32(l) / 255
			return
		}
		out[o] = float32(r) / 255
		out[w*h+o] = float32(g) / 255
		out[2*w*h+o] = float32(bl) / 255
	}
	switch m := im.(type) {
	case *image.Gray:
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			for x, v := range row {
				put(x, y, v, v, v)
			}
		}
	case *image.RGBA: // the PNG decoder's type for opaque RGB
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+4*w]
			for x := 0; x < w; x++ {
				if a := row[4*x+3]; a != 255 {
					n := color.NRGBAModel.Convert(color.RGBA{row[4*x], row[4*x+1], row[4*x+2], a}).(color.NRGBA)
					put(x, y, n.R, n.G, n.B)
					continue
				}
				put(x, y, row[4*x], row[4*x+1], row[4*x+2])
			}
		}
	case *image.NRGBA: // alpha is dropped, as PIL's convert("RGB") does
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+4*w]
			for x := 0; x < w; x++ {
				put(x, y, row[4*x], row[4*x+1], row[4*x+2])
			}
		}
	case *image.YCbCr: // JPEG
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				yi := m.YOffset(b.Min.X+x, b.Min.Y+y)
				ci := m.COffset(b.Min.X+x, b.Min.Y+y)
				r, g, bl := color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				put(x, y, r, g, bl)
			}
		}
	default:
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				n := color.NRGBAModel.Convert(im.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
				put(x, y, n.R, n.G, n.B)
			}
		}
	}
	return out
}

// resizeBilinear resizes c planes of ih×iw to oh×ow like
// torch.nn.functional.interpolate(mode="bilinear", align_corners=False).
func resizeBilinear(src []float32, c, ih, iw, oh, ow int) []float32 {
	type tap struct {
		i0, i1 int
		l0, l1 float32
	}
	taps := func(in, out int) []tap {
		scale := float32(in) / float32(out)
		t := make([]tap, out)
		for o := range t {
			s := scale*(float32(o)+0.5) - 0.5
			if s < 0 {
				s = 0
			}
			i0 := int(s)
			i1 := i0
			if i0 < in-1 {
				i1++
			}
			l1 := s - float32(i0)
			t[o] = tap{i0, i1, 1 - l1, l1}
		}
		return t
	}
	ty, tx := taps(ih, oh), taps(iw, ow)
	out := make([]float32, c*oh*ow)
	for ch := 0; ch < c; ch++ {
		in := src[ch*ih*iw : (ch+1)*ih*iw]
		o := out[ch*oh*ow : (ch+1)*oh*ow]
		for y, a := range ty {
			r0, r1 := in[a.i0*iw:(a.i0+1)*iw], in[a.i1*iw:(a.i1+1)*iw]
			for x, b := range tx {
				o[y*ow+x] = a.l0*(b.l0*r0[b.i0]+b.l1*r0[b.i1]) + a.l1*(b.l0*r1[b.i0]+b.l1*r1[b.i1])
			}
		}
	}
	return out
}
