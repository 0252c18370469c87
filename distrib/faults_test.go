package distrib

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func rankErr(t *testing.T, err error) *RankError {
	t.Helper()
	var re *RankError
	require.True(t, errors.As(err, &re), "want a *RankError, got %v", err)
	return re
}

// A rank that does not reach the collective is named by every rank, and the
// group stays broken with the same error. Rank 0, which judges failures,
// answers for itself even while its caller is busy elsewhere.
func TestTimeoutNamesTheSilentRank(t *testing.T) {
	for _, silent := range []int{2, 0} {
		t.Run(fmt.Sprintf("rank%d", silent), func(t *testing.T) {
			const world = 3
			groups := startGroups(t, world, func(c *Config) { c.Timeout = 400 * time.Millisecond })
			ctx := WithStep(context.Background(), 17)
			requireAllOK(t, onAll(groups, func(g *Group) error { return g.AllReduce(ctx, make([]float32, 10), Sum) }))

			var wg sync.WaitGroup
			errs := make([]error, world)
			for r := 0; r < world; r++ {
				if r == silent {
					continue // busy elsewhere
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = groups[r].AllReduce(ctx, make([]float32, 1000), Sum)
				}()
			}
			wg.Wait()
			want := fmt.Sprintf("distrib: rank %d did not answer within 400ms during AllReduce (step 17, collective 2): it has not reached that collective", silent)
			for r := 0; r < world; r++ {
				if r == silent {
					continue
				}
				require.Error(t, errs[r], "rank %d", r)
				assert.Equal(t, silent, rankErr(t, errs[r]).Rank, "rank %d: %v", r, errs[r])
				assert.ErrorIs(t, errs[r], ErrTimeout)
				assert.Equal(t, want, errs[r].Error(), "rank %d", r)
			}
			// The silent rank arrives late: it learns the verdict at once.
			err := groups[silent].AllReduce(ctx, make([]float32, 1000), Sum)
			assert.Equal(t, want, err.Error())
			// The group is broken for good.
			assert.Equal(t, want, groups[(silent+1)%world].Barrier(ctx).Error())
		})
	}
}

// A rank whose connections close (a crashed process) is named at once,
// long before the timeout.
func TestLostRankIsNamed(t *testing.T) {
	const world = 4
	groups := startGroups(t, world, func(c *Config) { c.Timeout = time.Minute })
	ctx := context.Background()
	requireAllOK(t, onAll(groups, func(g *Group) error { return g.AllReduce(ctx, make([]float32, 100), Sum) }))

	errs := make([]error, world)
	var wg sync.WaitGroup
	for _, r := range []int{0, 1, 3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = groups[r].AllReduce(ctx, make([]float32, 1<<18), Sum)
		}()
	}
	time.Sleep(50 * time.Millisecond) // the others are waiting in the collective
	groups[2].kill()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the surviving ranks hung after rank 2 died")
	}
	for _, r := range []int{0, 1, 3} {
		require.Error(t, errs[r], "rank %d", r)
		re := rankErr(t, errs[r])
		assert.Equal(t, 2, re.Rank, "rank %d: %v", r, errs[r])
		assert.ErrorIs(t, errs[r], ErrPeerLost)
		// "during AllReduce (collective 2)", or "after ... (collective 1)"
		// if rank 0 had not entered collective 2 yet on a loaded machine.
		assert.Contains(t, errs[r].Error(), "distrib: rank 2 was lost ")
		assert.Contains(t, errs[r].Error(), "(the process exited or was killed)")
	}
}

// The coordinator itself dying is also named.
func TestLostRankZeroIsNamed(t *testing.T) {
	const world = 3
	groups := startGroups(t, world, func(c *Config) { c.Timeout = time.Minute })
	ctx := context.Background()
	groups[0].kill()
	errs := onAll(groups[1:], func(g *Group) error { return g.AllReduce(ctx, make([]float32, 100), Sum) })
	for i, err := range errs {
		require.Error(t, err, "rank %d", i+1)
		assert.Equal(t, 0, rankErr(t, err).Rank, "rank %d: %v", i+1, err)
		assert.ErrorIs(t, err, ErrPeerLost)
		assert.Contains(t, err.Error(), "rank 0 was lost")
	}
}

// A rank that leaves with Close is named as having closed its group.
func TestClosedRankIsNamed(t *testing.T) {
	const world = 3
	groups := startGroups(t, world, func(c *Config) { c.Timeout = 500 * time.Millisecond })
	ctx := context.Background()
	require.NoError(t, groups[1].Close())
	errs := onAll([]*Group{groups[0], groups[2]}, func(g *Group) error { return g.AllReduce(ctx, make([]float32, 100), Sum) })
	for _, err := range errs {
		require.Error(t, err)
		assert.Equal(t, 1, rankErr(t, err).Rank, "%v", err)
		assert.ErrorIs(t, err, ErrClosed)
		assert.Contains(t, err.Error(), "rank 1 closed its process group")
	}
	assert.ErrorIs(t, groups[1].AllReduce(ctx, make([]float32, 100), Sum), ErrClosed)
}

func TestMismatchIsCaughtWithoutDebug(t *testing.T) {
	const world = 3
	groups := startGroups(t, world, func(c *Config) { c.Timeout = 5 * time.Second })
	ctx := context.Background()
	errs := onAll(groups, func(g *Group) error {
		n := 100
		if g.Rank() == 1 {
			n = 99
		}
		return g.AllReduce(ctx, make([]float32, n), Sum)
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.ErrorIs(t, err, ErrMismatch)
		assert.Contains(t, err.Error(), "AllReduce (collective 1, 99 elements)")
		assert.Contains(t, err.Error(), "AllReduce (collective 1, 100 elements)")
	}
	assert.Equal(t, errs[0].Error(), errs[2].Error(), "every rank reports the same verdict")

	// Different collectives are caught too.
	groups = startGroups(t, 2, nil)
	errs = onAll(groups, func(g *Group) error {
		if g.Rank() == 0 {
			return g.Broadcast(ctx, make([]float32, 10), 0)
		}
		return g.AllReduce(ctx, make([]float32, 10), Sum)
	})
	for _, err := range errs {
		assert.ErrorIs(t, err, ErrMismatch)
		assert.Contains(t, err.Error(), "Broadcast (collective 1, 10 elements, root 0)")
	}
}

func TestDebugListsEveryRanksLength(t *testing.T) {
	const world = 3
	groups := startGroups(t, world, func(c *Config) { c.Debug = true })
	ctx := context.Background()
	errs := onAll(groups, func(g *Group) error {
		n := 100
		if g.Rank() == 1 {
			n = 99
		}
		return g.AllReduce(ctx, make([]float32, n), Sum)
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.ErrorIs(t, err, ErrMismatch)
		assert.Equal(t, 1, rankErr(t, err).Rank)
		assert.Equal(t, "distrib: AllReduce (collective 1): tensor lengths differ across ranks: rank 0: 100, rank 1: 99, rank 2: 100", err.Error())
	}
	// Every rank skipped it, so the group is still usable.
	bufs := [][]float32{{1}, {2}, {3}}
	requireAllOK(t, onAll(groups, func(g *Group) error { return g.AllReduce(ctx, bufs[g.Rank()], Sum) }))
	assert.Equal(t, [][]float32{{6}, {6}, {6}}, bufs)

	// An argument error on one rank is reported by all, without breaking.
	errs = onAll(groups, func(g *Group) error {
		out := make([]float32, 30)
		if g.Rank() == 2 {
			out = out[:29]
		}
		return g.AllGather(ctx, make([]float32, 10), out)
	})
	for _, err := range errs {
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), "rank 2: AllGather (collective 3): output has 29 elements, want world size 3 × input's 10 = 30")
	}
	// Different collectives are listed by name.
	errs = onAll(groups, func(g *Group) error {
		if g.Rank() == 0 {
			return g.Broadcast(ctx, make([]float32, 5), 0)
		}
		return g.AllReduce(ctx, make([]float32, 5), Sum)
	})
	for _, err := range errs {
		assert.ErrorIs(t, err, ErrMismatch)
		assert.Contains(t, err.Error(), "ranks called different collectives: rank 0: Broadcast of 5 elements from root 0, rank 1: AllReduce of 5 elements")
	}
	requireAllOK(t, onAll(groups, func(g *Group) error { return g.Barrier(ctx) }))
}

func TestInvalidArgumentWithoutDebugBreaksTheGroupCleanly(t *testing.T) {
	groups := startGroups(t, 2, nil)
	ctx := context.Background()
	errs := onAll(groups, func(g *Group) error {
		root := 0
		if g.Rank() == 1 {
			root = 5
		}
		return g.Broadcast(ctx, make([]float32, 5), root)
	})
	for _, err := range errs {
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), "rank 1: Broadcast (collective 1): root 5 is outside 0..1")
	}
}

func TestCancelledContext(t *testing.T) {
	groups := startGroups(t, 2, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	err := groups[0].AllReduce(ctx, make([]float32, 10), Sum) // rank 1 never comes
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrAborted)
	assert.Contains(t, err.Error(), "rank 0 gave up AllReduce (collective 1): context canceled")
	err = groups[1].AllReduce(context.Background(), make([]float32, 10), Sum)
	assert.ErrorIs(t, err, ErrAborted)
	assert.NotErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, rankErr(t, err).Rank)
}

func TestInitErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("master unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		_, err = Init(ctx, Config{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: 300 * time.Millisecond})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "rank 1 could not reach rank 0 at 127.0.0.1:")
	})
	t.Run("rank missing", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := 0; r < 2; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cfg := Config{Rank: r, WorldSize: 3, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: 500 * time.Millisecond}
				if r == 0 {
					cfg.Listener = l
				}
				_, errs[r] = Init(ctx, cfg)
			}()
		}
		wg.Wait()
		require.Error(t, errs[0])
		assert.Contains(t, errs[0].Error(), "rank 2 of 3 did not join within 500ms")
		require.Error(t, errs[1])
		assert.Contains(t, errs[1].Error(), "rank 2 of 3 did not join")
	})
	t.Run("wrong world size is refused by name", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		cfgs := []Config{
			{Rank: 0, WorldSize: 2, Listener: l},
			{Rank: 1, WorldSize: 3}, // misconfigured, arrives first
			{Rank: 1, WorldSize: 2},
		}
		errs := make([]error, len(cfgs))
		groups := make([]*Group, len(cfgs))
		var wg sync.WaitGroup
		for i, cfg := range cfgs {
			cfg.MasterAddr, cfg.MasterPort, cfg.Timeout = "127.0.0.1", port, 2*time.Second
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i == 2 {
					time.Sleep(200 * time.Millisecond)
				}
				groups[i], errs[i] = Init(ctx, cfg)
			}()
		}
		wg.Wait()
		for _, g := range groups {
			if g != nil {
				defer g.Close()
			}
		}
		require.Error(t, errs[1])
		assert.Contains(t, errs[1].Error(), "refused the rendezvous: rank 1 has world size 3 but rank 0 has 2")
		// The right rank 1 still joins.
		require.NoError(t, errs[0])
		require.NoError(t, errs[2])
		x := []float32{1}
		requireAllOK(t, onAll([]*Group{groups[0], groups[2]}, func(g *Group) error { return g.AllReduce(ctx, x[:0], Sum) }))
	})
	t.Run("duplicate rank is refused by name", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i, r := range []int{0, 1, 1} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cfg := Config{Rank: r, WorldSize: 3, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: time.Second}
				if r == 0 {
					cfg.Listener = l
				}
				if i == 2 {
					time.Sleep(100 * time.Millisecond)
				}
				_, errs[i] = Init(ctx, cfg)
			}()
		}
		wg.Wait()
		// The second rank 1 starts 100 ms later, but on a loaded machine
		// either can reach rank 0 first: whichever does holds the place
		// and the other is refused by name.
		const dup = "refused the rendezvous: rank 1 already joined from 127.0.0.1:"
		refused := 2
		if errs[1] != nil && strings.Contains(errs[1].Error(), dup) {
			refused = 1
		}
		require.Error(t, errs[refused])
		assert.Contains(t, errs[refused].Error(), dup)
		require.Error(t, errs[3-refused]) // admitted, then the rendezvous timed out
		require.Error(t, errs[0])
		assert.Contains(t, errs[0].Error(), "rank 2 of 3 did not join")
	})
}
