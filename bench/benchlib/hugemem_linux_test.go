package benchlib

import (
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// The references' storage is zero, writable, as long as asked, in a
// mapping the kernel holds as advised for huge pages ("hg" in VmFlags),
// and unmapped by its free function.
func TestHugeFloatsAdvisesHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		testutil.Skip(t, "the kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage)")
	}
	const n = 3 << 20 // 12 MiB of float32
	x, free := hugeFloats[float32](n)
	require.Len(t, x, n)
	addr := uintptr(unsafe.Pointer(&x[0]))
	for _, i := range []int{0, n / 2, n - 1} {
		assert.Zero(t, x[i])
		x[i] = float32(i)
	}
	assert.Equal(t, float32(n-1), x[n-1])
	flags, ok := testutil.SmapsField(t, addr, "VmFlags")
	require.True(t, ok, "no mapping holds the storage")
	assert.Contains(t, strings.Fields(flags), "hg", "the mapping is not advised for huge pages: %s", flags)
	free()
	_, ok = testutil.SmapsField(t, addr, "VmFlags")
	assert.False(t, ok, "the storage is still mapped after free")

	y, free64 := hugeFloats[float64](0)
	assert.Empty(t, y)
	free64()
}
