package train

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A running job refreshes its lock's modification time, so that another
// host never sees a live job's lock as stale; after release it stops.
func TestLockIsRefreshedWhileHeld(t *testing.T) {
	old := lockRefreshEvery
	lockRefreshEvery = 5 * time.Millisecond
	t.Cleanup(func() { lockRefreshEvery = old })
	dir := t.TempDir()
	path := filepath.Join(dir, LockFileName)
	release, err := acquireLock(dir, false, io.Discard)
	require.NoError(t, err)
	long := time.Now().Add(-2 * LockStaleAfter)
	require.NoError(t, os.Chtimes(path, long, long))
	assert.Eventually(t, func() bool {
		st, err := os.Stat(path)
		return err == nil && time.Since(st.ModTime()) < LockStaleAfter
	}, 10*time.Second, 5*time.Millisecond, "the holder refreshes its lock")
	release()
	assert.NoFileExists(t, path)
	// A refresher that kept running would touch a new file of that name
	// only if it held this process's content; write another's and check
	// that it stays as written.
	require.NoError(t, os.WriteFile(path, []byte(`{"pid":1,"host":"elsewhere"}`), 0o644))
	require.NoError(t, os.Chtimes(path, long, long))
	time.Sleep(50 * time.Millisecond)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.WithinDuration(t, long, st.ModTime(), time.Second, "another job's lock is never touched")
}
