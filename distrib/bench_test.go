package distrib

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAllReduce measures the ring all-reduce between two processes on
// loopback (this process is rank 0, a re-executed test binary is rank 1),
// and, in the same run and between the same two processes, a plain TCP
// stream of the same bytes: one way (tcp_GB/s) and both ways at once
// (tcp_bidir_GB/s, per direction). Reported: bus bandwidth
// busbw = 2(n-1)/n · bytes / time (NCCL's definition: what each link
// carries per second, in each direction at once), and its ratio to each
// stream: ratio (one-way) and ratio_bidir (both ways), each the median over
// the iterations of (stream time / all-reduce time), each iteration's three
// measurements taken back to back so that a shared machine's load falls on
// all three alike.
//
// The fair peer is the two-way stream: in a ring all-reduce every process
// sends and receives at once, so the two processes move twice the bytes of
// a one-way stream through the kernel per unit of busbw; on loopback, where
// a TCP byte costs two memory copies of CPU time, busbw can reach about half
// the one-way stream's rate on a machine with two cores.
//
//	go test ./distrib -run XXX -bench AllReduce
func BenchmarkAllReduce(b *testing.B) {
	peer := startBenchPeer(b, "")
	defer peer.stop()
	for _, mb := range []int{4, 16, 64, 256} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) { peer.allReduce(b, mb<<20, false) })
	}
}

// BenchmarkAllReduceBF16 is BenchmarkAllReduce with bf16 on the wire; its
// busbw counts float32 bytes, so it can pass the stream.
func BenchmarkAllReduceBF16(b *testing.B) {
	peer := startBenchPeer(b, "")
	defer peer.stop()
	for _, mb := range []int{16, 64} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) { peer.allReduce(b, mb<<20, true) })
	}
}

// BenchmarkAllReduceChunk compares chunk sizes at 64 MB.
func BenchmarkAllReduceChunk(b *testing.B) {
	for _, kb := range []int{64, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("%dKB", kb), func(b *testing.B) {
			peer := startBenchPeer(b, strconv.Itoa(kb<<10))
			defer peer.stop()
			peer.allReduce(b, 64<<20, false)
		})
	}
}

type benchCmd struct {
	Op    string // "allreduce" or "exit"
	N     int    // elements
	Iters int
	BF16  bool
	Addr  string // the stream listener
	Bytes int64  // bytes each stream carries each way per iteration
}

type benchPeer struct {
	g    *Group
	cmd  *exec.Cmd
	ln   net.Listener
	data []float32
}

func startBenchPeer(b *testing.B, chunk string) *benchPeer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DISTRIB_TEST_WORKER=bench", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
		"RANK=1", "WORLD_SIZE=2", "DISTRIB_TEST_CHUNK="+chunk)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	cfg := Config{Rank: 0, WorldSize: 2, MasterAddr: "127.0.0.1", Listener: l, Timeout: 2 * time.Minute}
	cfg.ChunkBytes, _ = strconv.Atoi(chunk)
	g, err := Init(context.Background(), cfg)
	if err != nil {
		_ = cmd.Process.Kill()
		b.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return &benchPeer{g: g, cmd: cmd, ln: sl}
}

func (p *benchPeer) send(b *testing.B, c benchCmd) {
	msg, _ := json.Marshal(c)
	if _, err := p.g.BroadcastObject(context.Background(), msg, 0); err != nil {
		b.Fatal(err)
	}
}

func (p *benchPeer) stop() {
	msg, _ := json.Marshal(benchCmd{Op: "exit"})
	_, _ = p.g.BroadcastObject(context.Background(), msg, 0)
	_ = p.cmd.Wait()
	p.g.Close()
	p.ln.Close()
}

// allReduce times b.N all-reduces of size bytes; after each one (clock
// stopped) it streams the same bytes per link over plain TCP, one way and
// both ways, so that all three see the same load on a shared machine.
func (p *benchPeer) allReduce(b *testing.B, size int, bf16 bool) {
	n := size / 4
	if len(p.data) < n {
		p.data = make([]float32, n)
	}
	data := p.data[:n]
	var opts []Option
	if bf16 {
		opts = append(opts, WithBF16())
	}
	ctx := context.Background()
	world := float64(p.g.WorldSize())
	perLink := int64(2 * (world - 1) / world * float64(size)) // bytes each link carries each way
	p.send(b, benchCmd{Op: "allreduce", N: n, Iters: b.N, BF16: bf16, Addr: p.ln.Addr().String(), Bytes: perLink})
	conn, err := p.ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	// One warm-up round (both sides do it) so the peer has allocated.
	if err := p.g.AllReduce(ctx, data, Sum, opts...); err != nil {
		b.Fatal(err)
	}
	var uni, bidir, arCPU, bidirCPU time.Duration
	var uniRatios, bidirRatios []float64
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start, cpu0 := time.Now(), processCPU()
		if err := p.g.AllReduce(ctx, data, Sum, opts...); err != nil {
			b.Fatal(err)
		}
		ar, cpu1 := time.Since(start), processCPU()
		b.StopTimer()
		u := streamOneWay(b, conn, perLink)
		cpu2 := processCPU()
		bi := streamBothWays(b, conn, perLink)
		arCPU += cpu1 - cpu0
		bidirCPU += processCPU() - cpu2
		uni += u
		bidir += bi
		uniRatios = append(uniRatios, u.Seconds()/ar.Seconds())
		bidirRatios = append(bidirRatios, bi.Seconds()/ar.Seconds())
		b.StartTimer()
	}
	b.StopTimer()
	bytes := float64(perLink) * float64(b.N)
	busbw := bytes / b.Elapsed().Seconds()
	b.ReportMetric(busbw/1e9, "busbw_GB/s")
	b.ReportMetric(bytes/uni.Seconds()/1e9, "tcp_GB/s")
	b.ReportMetric(bytes/bidir.Seconds()/1e9, "tcp_bidir_GB/s")
	b.ReportMetric(median(uniRatios), "ratio")
	b.ReportMetric(median(bidirRatios), "ratio_bidir")
	// CPU time is what the bytes cost on loopback, whatever else runs on
	// the machine: this process's CPU time for the two-way stream over
	// that for the all-reduce.
	b.ReportMetric(bidirCPU.Seconds()/arCPU.Seconds(), "cpu_ratio_bidir")
}

func median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

const streamBuf = 4 << 20

// streamOneWay sends total bytes and waits for the peer's one-byte receipt.
func streamOneWay(b *testing.B, conn net.Conn, total int64) time.Duration {
	start := time.Now()
	if err := writeN(conn, total); err != nil {
		b.Fatal(err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// streamBothWays sends and receives total bytes at the same time.
func streamBothWays(b *testing.B, conn net.Conn, total int64) time.Duration {
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- writeN(conn, total) }()
	if err := readN(conn, total); err != nil {
		b.Fatal(err)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// The streams' buffers, made once so that the peer measurement pays no
// allocation (one writer and one reader at a time per process).
var streamSendBuf, streamRecvBuf = make([]byte, streamBuf), make([]byte, streamBuf)

func writeN(c net.Conn, total int64) error {
	buf := streamSendBuf
	for total > 0 {
		k := min(total, int64(len(buf)))
		if _, err := c.Write(buf[:k]); err != nil {
			return err
		}
		total -= k
	}
	return nil
}

func readN(c net.Conn, total int64) error {
	buf := streamRecvBuf
	for total > 0 {
		k := min(total, int64(len(buf)))
		got, err := io.ReadFull(c, buf[:k])
		if err != nil {
			return err
		}
		total -= int64(got)
	}
	return nil
}

func workerBench(ctx context.Context, g *Group) int {
	var data []float32
	for {
		msg, err := g.BroadcastObject(ctx, nil, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		var c benchCmd
		if err := json.Unmarshal(msg, &c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		switch c.Op {
		case "exit":
			return 0
		case "allreduce":
			if len(data) < c.N {
				data = make([]float32, c.N)
			}
			var opts []Option
			if c.BF16 {
				opts = append(opts, WithBF16())
			}
			conn, err := net.Dial("tcp", c.Addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			for i := 0; i <= c.Iters; i++ { // one warm-up round
				if err := g.AllReduce(ctx, data[:c.N], Sum, opts...); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				if i == 0 {
					continue
				}
				if err := readN(conn, c.Bytes); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				if _, err := conn.Write([]byte{1}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				errc := make(chan error, 1)
				go func() { errc <- writeN(conn, c.Bytes) }()
				if err := readN(conn, c.Bytes); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				if err := <-errc; err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
			conn.Close()
		}
	}
}
