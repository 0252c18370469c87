package importer

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// residentKiB is the Rss of the mapping that holds address a, from
// /proc/self/smaps.
func residentKiB(t *testing.T, a uintptr) int {
	t.Helper()
	v, ok := testutil.SmapsField(t, a, "Rss")
	if !ok {
		t.Fatalf("no mapping holds %#x", a)
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v, " kB"))
	require.NoError(t, err)
	return n
}

// After the tensors that alias a model's mapping have been read, DropPages
// takes the pages out of the process's resident memory; reading the
// tensors again gives the same values (the file's).
func TestDropPagesReleasesMappedPages(t *testing.T) {
	withMapping(t)
	b, err := os.ReadFile(gptSmall)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "gpt.onnx")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	m, err := Load(path)
	require.NoError(t, err)
	ref, err := Load(gptSmall) // read, not mapped
	require.NoError(t, err)

	v, registered := mappings.Load(weak.Make(m))
	require.True(t, registered, "Load recorded the model's mapping")
	file := v.([][]byte)[0]
	lo := uintptr(unsafe.Pointer(&file[0]))
	hi := lo + uintptr(len(file))
	var addr uintptr
	var sum float64
	for _, name := range m.Graph.InitOrder {
		if f := m.Graph.Initializers[name].Float32s(); len(f) > 0 {
			if p := uintptr(unsafe.Pointer(&f[0])); addr == 0 && p >= lo && p < hi {
				addr = p
			}
			for _, v := range f {
				sum += float64(v)
			}
		}
	}
	require.NotZero(t, addr, "a float32 initializer aliases the mapping")
	before := residentKiB(t, addr)
	require.Greater(t, before, 64, "the read touched the mapping's pages")

	DropPages(m)
	after := residentKiB(t, addr)
	assert.Less(t, after, before/4, "resident KiB of the mapping: %d before, %d after", before, after)
	requireSameInitializers(t, ref, m)
	DropPages(ref) // a model that maps nothing: nothing happens
}

// Recording a loaded model's mappings for DropPages does not keep the
// model alive: once nothing else holds it, it is collected and its entry
// removed.
func TestMappingsDoNotKeepModelsAlive(t *testing.T) {
	withMapping(t)
	b, err := os.ReadFile(gptSmall)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "gpt.onnx")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	key := func() weak.Pointer[graph.Model] {
		m, err := Load(path)
		require.NoError(t, err)
		_, registered := mappings.Load(weak.Make(m))
		require.True(t, registered)
		return weak.Make(m)
	}()
	gone := func() bool { _, ok := mappings.Load(key); return key.Value() == nil && !ok }
	for i := 0; i < 100 && !gone(); i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	assert.Nil(t, key.Value(), "the model was collected")
	_, still := mappings.Load(key)
	assert.False(t, still, "its entry was removed")
}
