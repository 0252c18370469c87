package cuda

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPackArgsAlignsAsTheParameterSpace(t *testing.T) {
	b := &Buffer{Name: "x", Addr: 0x1000}
	args := []Arg{I32(7), PtrAt(b, 16), F32(1.5), I64(-2), Idx(Index{Rank: 2, Dims: [MaxRank]int64{3, 4}})}
	buf, offs := packArgs(args, func(a Arg) uint64 { return uint64(a.Buf.Addr) + uint64(a.Off) })
	// int32 at 0, pointer aligned to 8, float at 16, int64 at 24, Index at 32.
	assert.Equal(t, []int{0, 8, 16, 24, 32}, offs)
	assert.Equal(t, 32+indexBytes, len(buf))
	assert.Equal(t, uint32(7), binary.LittleEndian.Uint32(buf[0:]))
	assert.Equal(t, uint64(0x1010), binary.LittleEndian.Uint64(buf[8:]))
	assert.Equal(t, float32(1.5), math.Float32frombits(binary.LittleEndian.Uint32(buf[16:])))
	assert.Equal(t, int64(-2), int64(binary.LittleEndian.Uint64(buf[24:])))
	assert.Equal(t, int64(2), int64(binary.LittleEndian.Uint64(buf[32:])))
	assert.Equal(t, int64(4), int64(binary.LittleEndian.Uint64(buf[32+16:])))
}

func TestGeometry(t *testing.T) {
	g, b := grid1D(1)
	assert.Equal(t, [3]uint32{1, 1, 1}, g)
	assert.Equal(t, uint32(blockThreads), b[0])
	g, _ = grid1D(1000)
	assert.Equal(t, uint32(4), g[0])
	g, _ = grid1D(1 << 40) // grid-stride: capped
	assert.Equal(t, uint32(maxGridBlocks), g[0])
	g, _ = grid1D(0)
	assert.Equal(t, uint32(1), g[0])
	rg, rb, _ := gridRows(1 << 33)
	assert.Equal(t, uint32(math.MaxInt32), rg[0])
	assert.Equal(t, uint32(rowThreads), rb[0])
}

func TestBroadcastIndex(t *testing.T) {
	x, err := broadcastIndex([]int{2, 3, 4}, []int{2, 3, 4}, []int{3, 1}, []int{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), x.Rank)
	assert.Equal(t, [MaxRank]int64{12, 4, 1}, x.Strides[0])
	assert.Equal(t, [MaxRank]int64{0, 1, 0}, x.Strides[1])
	assert.Equal(t, [MaxRank]int64{}, x.Strides[2])
	_, err = broadcastIndex([]int{2, 3}, []int{4, 3})
	assert.ErrorContains(t, err, "does not broadcast")
	s, err := broadcastIndex([]int{}, []int{}, []int{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.Rank, "a scalar is indexed as one element")
}

func TestCheckLaunchRejectsWrongArguments(t *testing.T) {
	b := &Buffer{Name: "x"}
	ok := &Launch{Kernel: "unary_fp", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{256, 1, 1}, Args: []Arg{Ptr(b), Ptr(b), I64(4), I32(0), I32(1)}}
	require.NoError(t, checkLaunch(ok))
	bad := *ok
	bad.Args = []Arg{Ptr(b), Ptr(b), I32(4), I32(0), I32(1)}
	assert.ErrorContains(t, checkLaunch(&bad), "argument 2")
	bad = *ok
	bad.Kernel = "nope"
	assert.ErrorContains(t, checkLaunch(&bad), `no kernel "nope"`)
	bad = *ok
	bad.Block = [3]uint32{2048, 1, 1}
	assert.ErrorContains(t, checkLaunch(&bad), "geometry")
}
