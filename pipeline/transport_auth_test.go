package pipeline_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/distrib/strangers"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/pipeline"
)

// TestPipelineLinksRefuseStrangers: the pipeline's own links start with the
// job's challenge-response, as every distrib connection does. Random bytes,
// a hello without the secret, a wrong secret and a replayed handshake sent
// to a rank's pipeline listener while the links form are refused and
// logged, and the real peers still connect and exchange tensors.
func TestPipelineLinksRefuseStrangers(t *testing.T) {
	secret := []byte("pipeline-test-secret")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	groups := make([]*distrib.Group, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		cfg := distrib.Config{Rank: r, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: 30 * time.Second, Secret: secret}
		if r == 0 {
			cfg.Listener = l
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[cfg.Rank], errs[cfg.Rank] = distrib.Init(context.Background(), cfg)
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

	knocks, err := strangers.Knocks(secret, 7)
	require.NoError(t, err)
	hook := logtest.NewGlobal()
	defer hook.Reset()
	knockErrs := make([]error, len(knocks))
	// Rank 1 accepts rank 0's link: the strangers knock on its listener
	// before rank 0 dials.
	defer pipeline.SetListenHook(func(rank int, addr string) {
		if rank != 1 {
			return
		}
		// The listener already accepts: each knock is refused before the
		// peers learn the address.
		for i, k := range knocks {
			_, knockErrs[i] = strangers.Try(addr, k, 15*time.Second)
		}
	})()

	want := graph.FromFloat32([]float32{1, 2, 3}, 3)
	got := make([]*graph.Tensor, 2)
	errs = onRanks(2, func(rank int) error {
		ctx := context.Background()
		tr, err := pipeline.NewTCPTransport(ctx, groups[rank], "", 20*time.Second)
		if err != nil {
			return err
		}
		defer tr.Close()
		k := pipeline.MsgKey{}
		if rank == 0 {
			return tr.Send(ctx, 1, k, map[string]*graph.Tensor{"x": want})
		}
		msg, err := tr.Recv(ctx, 0, k)
		if err != nil {
			return err
		}
		got[rank] = msg["x"]
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	assert.Equal(t, want.Float32s(), got[1].Float32s())
	refused := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && e.Data["port"] == "pipeline listener" {
			refused++
		}
	}
	for i, k := range knocks {
		assert.NoError(t, knockErrs[i], "knock %q was not refused", k.Name)
	}
	assert.Equal(t, len(knocks), refused, "each refused knock is logged")
}
