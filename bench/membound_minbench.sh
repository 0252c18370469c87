#!/bin/bash
# Minimum time of COUNT single-call runs of each benchmark of a test binary
# built from backend/cpu/ops (membound_bench_test.go), on 1 and 2 threads:
# the calls another process preempted drop out, so the op's MB/s and the
# triad's can be compared even on a shared host (docs/large-models.md,
# "Memory-bound ops against the triad").
#
#   go test -c -o /tmp/ops.test ./backend/cpu/ops
#   COUNT=3 bench/membound_minbench.sh /tmp/ops.test 'Triad|Membound'
BIN=$1; PAT=${2:-'Triad|Membound'}; COUNT=${COUNT:-15}; CPUS=${CPUS:-1,2}
"$BIN" -test.run XXX -test.bench "$PAT" -test.benchtime 1x -test.count "$COUNT" -test.cpu "$CPUS" 2>/dev/null |
  grep ^Bench |
  awk '{n=$1; t=$3; if(!(n in m) || t<m[n]){m[n]=t; r[n]=$5}} END{for(n in m) printf "%-60s %12.0f ns %10.0f MB/s\n", n, m[n], r[n]}' |
  sort
