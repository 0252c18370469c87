#!/bin/bash
# Minimum wall and CPU time (cpu-ns/op: every thread of the process) of
# COUNT single-call runs of the Epilogue benchmarks of backend/cpu/ops
# (epilogue_bench_test.go), each fused kernel beside the chain it
# replaces (docs/large-models.md, "Fewer memory passes").
#
#   go test -c -o /tmp/ops.test ./backend/cpu/ops
#   COUNT=15 CPUS=1,2 bench/epilogue_minbench.sh /tmp/ops.test
BIN=$1; PAT=${2:-'Epilogue'}; COUNT=${COUNT:-15}; CPUS=${CPUS:-1,2}
"$BIN" -test.run XXX -test.bench "$PAT" -test.benchtime 1x -test.count "$COUNT" -test.cpu "$CPUS" 2>/dev/null |
  grep ^Bench |
  awk '{n=$1; t=$3; c=0; for(i=4;i<NF;i++) if($(i+1)=="cpu-ns/op") c=$i;
        if(!(n in m) || t<m[n]) m[n]=t; if(!(n in mc) || c<mc[n]) mc[n]=c}
       END{for(n in m) printf "%-52s %10.2f ms %10.2f ms-cpu\n", n, m[n]/1e6, mc[n]/1e6}' |
  sort
