package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/onnxtrain/onnxtrain/graph"
)

// IDXOptions configures OpenIDX.
type IDXOptions struct {
	// Input is the graph input the images feed; "" means "input".
	Input string
	// Mean and Std normalise the pixels, scaled to [0, 1], as
	// torchvision's Normalize: (x - Mean) / Std. Std 0 means no
	// normalisation.
	Mean, Std float64
	// CropPadding > 0 pads each side of an image with that many zeros and
	// crops a random window of the image's size (torchvision's
	// RandomCrop(size, padding)); HFlip flips each image horizontally with
	// probability 1/2 (RandomHorizontalFlip), after the crop. The draws come
	// from the per-(Seed, epoch, image) stream, so an epoch is reproducible.
	// For training data only (idx_augment.go).
	CropPadding int
	HFlip       bool
	Seed        uint64
}

// IDX is an image dataset in the IDX format of MNIST, Fashion-MNIST,
// KMNIST and EMNIST: an images file (unsigned bytes, N×H×W) and a labels
// file (unsigned bytes, N). Images become float32 [N, 1, H, W] in [0, 1]
// (x/255, as torchvision's ToTensor), labels int64 [N].
type IDX struct {
	input     string
	pix       []uint8
	labels    []uint8
	n, h, w   int
	mean, std float32
	norm      bool
	aug       idxAugment
}

// OpenIDX reads an images file and a labels file, each optionally gzipped.
func OpenIDX(images, labels string, opts IDXOptions) (*IDX, error) {
	pix, idims, err := readIDX(images)
	if err != nil {
		return nil, err
	}
	if len(idims) != 3 {
		return nil, fmt.Errorf("data: %s: images must have 3 dimensions (N, H, W), the file has %d: %v", images, len(idims), idims)
	}
	lab, ldims, err := readIDX(labels)
	if err != nil {
		return nil, err
	}
	if len(ldims) != 1 {
		return nil, fmt.Errorf("data: %s: labels must have 1 dimension (N), the file has %d: %v", labels, len(ldims), ldims)
	}
	if idims[0] != ldims[0] {
		return nil, fmt.Errorf("data: %s has %d images but %s has %d labels", images, idims[0], labels, ldims[0])
	}
	d := &IDX{input: opts.Input, pix: pix, labels: lab, n: idims[0], h: idims[1], w: idims[2]}
	if d.input == "" {
		d.input = "input"
	}
	if opts.Std != 0 {
		d.norm, d.mean, d.std = true, float32(opts.Mean), float32(opts.Std)
	}
	if opts.CropPadding < 0 {
		return nil, fmt.Errorf("data: %s: crop padding %d is negative", images, opts.CropPadding)
	}
	d.aug = idxAugment{pad: opts.CropPadding, flip: opts.HFlip, seed: opts.Seed}
	return d, nil
}

// OpenMNIST opens split ("train" or "t10k") of a dataset in the layout
// MNIST is distributed in: dir/<split>-images-idx3-ubyte[.gz] and
// dir/<split>-labels-idx1-ubyte[.gz] (or "images.idx3-ubyte" spellings).
func OpenMNIST(dir, split string, opts IDXOptions) (*IDX, error) {
	find := func(kind, dims string) (string, error) {
		var tried []string
		for _, name := range []string{split + "-" + kind + "-" + dims + "-ubyte", split + "-" + kind + "." + dims + "-ubyte"} {
			for _, ext := range []string{"", ".gz"} {
				p := filepath.Join(dir, name+ext)
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
				tried = append(tried, name+ext)
			}
		}
		return "", fmt.Errorf("data: %s: no %s file for split %q (looked for %s)", dir, kind, split, quoteList(tried))
	}
	img, err := find("images", "idx3")
	if err != nil {
		return nil, err
	}
	lab, err := find("labels", "idx1")
	if err != nil {
		return nil, err
	}
	return OpenIDX(img, lab, opts)
}

// Len is the number of images.
func (d *IDX) Len() int { return d.n }

// ImageSize returns the height and width of the images.
func (d *IDX) ImageSize() (h, w int) { return d.h, d.w }

// Label returns the label of image i.
func (d *IDX) Label(i int) int { return int(d.labels[i]) }

// Gather returns images idx as float32 [len(idx), 1, H, W] under the input
// name, and their labels as int64 [len(idx)].
// With CropPadding or HFlip, each image is cropped and flipped as drawn for
// (epoch, image).
func (d *IDX) Gather(epoch int, idx []int) (map[string]*graph.Tensor, *graph.Tensor, error) {
	hw := d.h * d.w
	img := make([]float32, len(idx)*hw)
	lab := make([]int64, len(idx))
	for k, i := range idx {
		if i < 0 || i >= d.n {
			return nil, nil, fmt.Errorf("data: IDX: index %d out of range [0, %d)", i, d.n)
		}
		src, dst := d.pix[i*hw:(i+1)*hw], img[k*hw:(k+1)*hw]
		if d.aug.active() {
			d.aug.apply(epoch, i, src, dst, d.h, d.w)
		} else {
			for j, b := range src {
				dst[j] = float32(b) / 255
			}
		}
		if d.norm {
			for j, v := range dst {
				dst[j] = (v - d.mean) / d.std
			}
		}
		lab[k] = int64(d.labels[i])
	}
	return map[string]*graph.Tensor{d.input: graph.FromFloat32(img, len(idx), 1, d.h, d.w)}, graph.FromInt64(lab, len(idx)), nil
}

// readIDX reads an IDX file of unsigned bytes, gunzipping it if it starts
// with the gzip magic, and returns its data and dimensions.
func readIDX(path string) ([]uint8, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	return decodeIDX(path, f)
}

// decodeIDX is readIDX of a file's contents; path names it in errors.
func decodeIDX(path string, f io.Reader) ([]uint8, []int, error) {
	br := bufio.NewReader(f)
	var r io.Reader = br
	if head, err := br.Peek(2); err == nil && head[0] == 0x1f && head[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("data: %s: bad gzip stream: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, nil, fmt.Errorf("data: %s: not an IDX file: %w", path, eofIsShort(err))
	}
	if magic[0] != 0 || magic[1] != 0 || magic[3] == 0 {
		return nil, nil, fmt.Errorf("data: %s: not an IDX file (magic %02x %02x %02x %02x, want 00 00 <type> <dims>)", path, magic[0], magic[1], magic[2], magic[3])
	}
	if magic[2] != 0x08 {
		return nil, nil, fmt.Errorf("data: %s: IDX element type 0x%02x is not supported (want 0x08, unsigned byte)", path, magic[2])
	}
	dims := make([]int, magic[3])
	for i := range dims {
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, nil, fmt.Errorf("data: %s: IDX header: %w", path, eofIsShort(err))
		}
		dims[i] = int(binary.BigEndian.Uint32(b[:]))
	}
	n, err := graph.NumElements(dims)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %s: IDX dimensions: %w", path, err)
	}
	// Grow with the data actually present, so a lying header cannot make
	// us allocate more than the file holds.
	var buf bytes.Buffer
	got, err := io.CopyN(&buf, r, int64(n))
	if err != nil {
		return nil, nil, fmt.Errorf("data: %s: IDX dimensions %v need %d bytes of data, the file has %d: %w", path, dims, n, got, eofIsShort(err))
	}
	if extra, _ := io.CopyN(io.Discard, r, 1); extra != 0 {
		return nil, nil, fmt.Errorf("data: %s: data continues past the %d bytes that IDX dimensions %v describe", path, n, dims)
	}
	return buf.Bytes(), dims, nil
}

func eofIsShort(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
