package importer

import (
	"bufio"
	"fmt"
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
)

// residentKiB is the Rss of the mapping that holds address a, from
// /proc/self/smaps.
func residentKiB(t *testing.T, a uintptr) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			var lo, hi uintptr
			if _, err := fmt.Sscanf(fields[0], "%x-%x", &lo, &hi); err == nil {
				in = a >= lo && a < hi
			}
			continue
		}
		if in && len(fields) >= 2 && fields[0] == "Rss:" {
			n, err := strconv.Atoi(fields[1])
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no mapping holds %#x", a)
	return 0
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
