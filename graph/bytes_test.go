package graph

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// DecodeElements reads each element type in both byte orders, and refuses
// too few bytes and slices it does not know.
func TestDecodeElements(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	f := make([]float32, 2)
	raw := le.AppendUint32(le.AppendUint32(nil, math.Float32bits(1.5)), math.Float32bits(-2))
	require.NoError(t, DecodeElements(f, raw, le))
	assert.Equal(t, []float32{1.5, -2}, f)

	i64 := make([]int64, 1)
	require.NoError(t, DecodeElements(i64, be.AppendUint64(nil, uint64(1<<40+3)), be))
	assert.Equal(t, []int64{1<<40 + 3}, i64)

	i16 := make([]int16, 2)
	require.NoError(t, DecodeElements(i16, []byte{0xff, 0xff, 0x02, 0x00}, le))
	assert.Equal(t, []int16{-1, 2}, i16)

	b := make([]bool, 3)
	require.NoError(t, DecodeElements(b, []byte{0, 1, 7}, le))
	assert.Equal(t, []bool{false, true, true}, b)

	assert.ErrorContains(t, DecodeElements(make([]float64, 2), make([]byte, 15), le), "fewer than 2 elements")
	assert.ErrorContains(t, DecodeElements([]string{"x"}, nil, le), "cannot decode bytes into []string")
}
