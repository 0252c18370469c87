package distrib

import (
	"context"
	"math/rand"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startGroups makes a world of n in-process groups on loopback; rank 0
// listens on a port the kernel picked. mod may adjust each rank's Config.
func startGroups(t testing.TB, n int, mod func(*Config)) []*Group {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	groups := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		cfg := Config{Rank: r, WorldSize: n, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: 20 * time.Second}
		if r == 0 {
			cfg.Listener = l
		}
		if mod != nil {
			mod(&cfg)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[cfg.Rank], errs[cfg.Rank] = Init(context.Background(), cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
	})
	return groups
}

// onAll runs f on every rank at once and returns each rank's error.
func onAll(groups []*Group, f func(g *Group) error) []error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(g)
		}()
	}
	wg.Wait()
	return errs
}

func requireAllOK(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// rankData is rank r's deterministic input of n values in [-1, 1).
func rankData(seed int64, r, n int) []float32 {
	rng := rand.New(rand.NewSource(seed*1000 + int64(r)))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.Float64()*2 - 1)
	}
	return x
}
