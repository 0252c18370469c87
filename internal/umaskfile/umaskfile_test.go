//go:build unix

package umaskfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The file gets 0666 less the umask (022 → 0644; 002 → 0664), never 0600.
func TestCreateTempHonoursUmask(t *testing.T) {
	for _, tc := range []struct {
		umask int
		want  os.FileMode
	}{{0o022, 0o644}, {0o002, 0o664}, {0o077, 0o600}} {
		old := syscall.Umask(tc.umask)
		f, err := CreateTemp(t.TempDir(), ".model.onnx.tmp-*")
		syscall.Umask(old)
		require.NoError(t, err)
		st, err := f.Stat()
		require.NoError(t, err)
		f.Close()
		assert.Equal(t, tc.want, st.Mode().Perm(), "umask %o", tc.umask)
		assert.True(t, strings.HasPrefix(filepath.Base(f.Name()), ".model.onnx.tmp-"), f.Name())
	}
	_, err := CreateTemp(t.TempDir(), "a/b*")
	assert.Error(t, err)
}
