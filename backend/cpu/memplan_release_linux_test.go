package cpu

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleasePagesDropsWholePages: the whole pages inside a retired buffer
// go back to the OS and read as zeros afterwards (so the recorder's reuse,
// which clears them anyway, sees what it expects), the bytes of partial
// pages at its ends are kept, and a buffer under releaseMinBytes is left
// alone.
func TestReleasePagesDropsWholePages(t *testing.T) {
	page := os.Getpagesize()
	buf := make([]byte, 2*releaseMinBytes+3*page)
	for i := range buf {
		buf[i] = 7
	}
	off := page / 2 // start inside a page
	n := 2 * releaseMinBytes
	releasePages(unsafe.Pointer(&buf[off]), n)
	firstWhole := page // the first page boundary after off
	lastWhole := (off + n) / page * page
	require.Greater(t, lastWhole, firstWhole)
	zeros, sevens := 0, 0
	for i := firstWhole; i < lastWhole; i++ {
		if buf[i] == 0 {
			zeros++
		}
	}
	assert.Equal(t, lastWhole-firstWhole, zeros, "whole pages read as zeros")
	for i := off; i < firstWhole; i++ {
		if buf[i] == 7 {
			sevens++
		}
	}
	for i := lastWhole; i < off+n; i++ {
		if buf[i] == 7 {
			sevens++
		}
	}
	assert.Equal(t, (firstWhole-off)+(off+n-lastWhole), sevens, "partial pages at the ends kept")
	assert.Equal(t, byte(7), buf[0])
	assert.Equal(t, byte(7), buf[len(buf)-1])

	small := make([]byte, releaseMinBytes-1)
	for i := range small {
		small[i] = 9
	}
	releasePages(unsafe.Pointer(&small[0]), len(small))
	for _, b := range small {
		require.Equal(t, byte(9), b, "a buffer under releaseMinBytes is kept")
	}
}
