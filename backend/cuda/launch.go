package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Launch is one kernel launch, as plain data: the planner builds these on
// the host (and tests read them), Context.Launch runs them.
type Launch struct {
	Kernel      string
	Grid, Block [3]uint32
	SharedBytes uint32
	Args        []Arg
}

// ArgKind says how an argument is passed.
type ArgKind int

const (
	// ArgPtr is a device pointer: an arena offset (Slot >= 0, resolved at
	// run time against the arena's base) or a fixed address.
	ArgPtr ArgKind = iota
	ArgI64
	ArgI32
	ArgF32
	// ArgIndex is an index struct (Index) passed by value.
	ArgIndex
)

// Arg is one kernel argument.
type Arg struct {
	Kind ArgKind
	// Buf is the buffer (planned value or state) a pointer argument points
	// into, Off the byte offset inside it.
	Buf *Buffer
	Off int64
	I   int64
	F   float32
	Idx *Index
}

func (a Arg) String() string {
	switch a.Kind {
	case ArgPtr:
		if a.Buf == nil {
			return "nil"
		}
		return fmt.Sprintf("&%s+%d", a.Buf.Name, a.Off)
	case ArgI64, ArgI32:
		return fmt.Sprint(a.I)
	case ArgF32:
		return fmt.Sprint(a.F)
	default:
		return fmt.Sprintf("%v", *a.Idx)
	}
}

// Ptr, I64, I32, F32 and Idx make arguments.
func Ptr(b *Buffer) Arg              { return Arg{Kind: ArgPtr, Buf: b} }
func PtrAt(b *Buffer, off int64) Arg { return Arg{Kind: ArgPtr, Buf: b, Off: off} }
func I64(v int64) Arg                { return Arg{Kind: ArgI64, I: v} }
func I32(v int) Arg                  { return Arg{Kind: ArgI32, I: int64(v)} }
func F32(v float32) Arg              { return Arg{Kind: ArgF32, F: v} }
func Idx(x Index) Arg                { return Arg{Kind: ArgIndex, Idx: &x} }

// MaxRank is the highest rank the strided kernels index (kernels.cu's
// MAXR).
const MaxRank = 8

// Index describes a strided view for the broadcasting and movement
// kernels: the output's dims and, per operand, the element stride of each
// output axis in that operand (0 where it broadcasts), plus a start offset.
// Its layout matches struct Index in kernels.cu: int64 fields only.
type Index struct {
	Rank    int64
	Dims    [MaxRank]int64
	Strides [3][MaxRank]int64
	Offset  [3]int64
}

// indexBytes is sizeof(struct Index) in kernels.cu.
const indexBytes = 8 * (1 + MaxRank + 3*MaxRank + 3)

// pack lays the arguments out as the kernel's parameter space expects
// (each aligned to its size) and returns the buffer and each argument's
// offset. Pointers must have been resolved (resolve) first.
func (l *Launch) pack() ([]byte, []int) {
	return packArgs(l.Args, func(a Arg) uint64 {
		if a.Buf == nil {
			return 0
		}
		return uint64(a.Buf.addr()) + uint64(a.Off)
	})
}

func packArgs(args []Arg, addr func(Arg) uint64) ([]byte, []int) {
	var buf []byte
	offs := make([]int, len(args))
	align := func(n int) {
		for len(buf)%n != 0 {
			buf = append(buf, 0)
		}
	}
	for i, a := range args {
		switch a.Kind {
		case ArgPtr:
			align(8)
			offs[i] = len(buf)
			buf = binary.LittleEndian.AppendUint64(buf, addr(a))
		case ArgI64:
			align(8)
			offs[i] = len(buf)
			buf = binary.LittleEndian.AppendUint64(buf, uint64(a.I))
		case ArgI32:
			align(4)
			offs[i] = len(buf)
			buf = binary.LittleEndian.AppendUint32(buf, uint32(int32(a.I)))
		case ArgF32:
			align(4)
			offs[i] = len(buf)
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(a.F))
		case ArgIndex:
			align(8)
			offs[i] = len(buf)
			x := a.Idx
			buf = binary.LittleEndian.AppendUint64(buf, uint64(x.Rank))
			for _, d := range x.Dims {
				buf = binary.LittleEndian.AppendUint64(buf, uint64(d))
			}
			for _, s := range x.Strides {
				for _, v := range s {
					buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
				}
			}
			for _, o := range x.Offset {
				buf = binary.LittleEndian.AppendUint64(buf, uint64(o))
			}
		}
	}
	return buf, offs
}

// Launch geometry. Elementwise kernels loop grid-stride, so the grid is
// capped: enough blocks to fill any current GPU several times over, never
// more than there is work for.
const (
	blockThreads  = 256
	maxGridBlocks = 65535
	// rowThreads is the block size of the row kernels (softmax, LayerNorm,
	// reductions): one block per row, a tree reduction in shared memory.
	rowThreads = 256
)

// grid1D is the geometry of a grid-stride launch over n elements.
func grid1D(n int64) (grid, block [3]uint32) {
	blocks := (n + blockThreads - 1) / blockThreads
	if blocks < 1 {
		blocks = 1
	}
	if blocks > maxGridBlocks {
		blocks = maxGridBlocks
	}
	return [3]uint32{uint32(blocks), 1, 1}, [3]uint32{blockThreads, 1, 1}
}

// gridRows is the geometry of a one-block-per-row launch: rows go along
// x (up to 2^31-1 blocks), with a shared buffer of one float per thread.
func gridRows(rows int64) (grid, block [3]uint32, shared uint32) {
	if rows < 1 {
		rows = 1
	}
	return [3]uint32{uint32(min(rows, math.MaxInt32)), 1, 1}, [3]uint32{rowThreads, 1, 1}, rowThreads * 4
}
