#!/bin/bash
# The billion-parameter pipeline run of docs/pipeline.md: a 1.04B-parameter GPT
# (export below) trained with AdamW over 4 processes, one stage each, 1F1B,
# micro-batch 1, 4 micro-batches a step, 20 steps, with a watchdog that stops
# the job when the workers' anonymous memory passes LIMIT_MIB (default 22000)
# or the machine's available memory falls below 900 MiB. Run it alone:
#
#   flock /work/notes/bigmem.lock bench/pipeline_1b.sh
#
# Inputs (DIR, default /tmp/pipe): DIR/gpt1b/gpt.onnx from
#   /usr/bin/python3 models/gpt/export_gpt.py --layers 20 --width 2048 --heads 16 \
#       --vocab 8192 --seq 32 --batch 1 --out DIR/gpt1b/gpt.onnx      (~5 min, 8.5 GB)
# and DIR/gpl3.bin, uint16 tokens (any text's bytes:
#   /usr/bin/python3 -c "import numpy,sys; numpy.frombuffer(open(sys.argv[1],'rb').read(),numpy.uint8).astype('<u2').tofile(sys.argv[2])" /usr/share/common-licenses/GPL-3 DIR/gpl3.bin).
# ONNXTRAIN: the binary (default: onnxtrain on PATH). Output in DIR/run1b:
# steps.json (one record per step), stderr.txt (each worker's peak RSS from
# /usr/bin/time), mem.log (every 5 s: available memory, each worker's RSS and
# anonymous RSS, load), info.txt (start, end, load).
set -u
DIR=${DIR:-/tmp/pipe}
BIN=${ONNXTRAIN:-$(command -v onnxtrain)}
LIMIT_MIB=${LIMIT_MIB:-22000}
OUT=$DIR/run1b
mkdir -p "$OUT"
cd "$OUT"
echo "start $(date -u +%H:%M:%S) available $(free -m | awk '/Mem:/{print $7}') MB load $(cut -d' ' -f1-3 /proc/loadavg)" > info.txt
setsid env GOGC=10 GOMEMLIMIT=5200MiB "$BIN" launch --nproc-per-node 4 -- /usr/bin/time -f "peak RSS %M KiB, %e s wall, %U s user" \
  "$BIN" train --model "$DIR/gpt1b/gpt.onnx" --data "$DIR/gpl3.bin" --loss output:loss \
  --batch-size 1 --pipeline-stages 4 --micro-batches 4 --schedule 1f1b --steps 20 --shuffle=false \
  --optimizer adamw --lr 3e-4 --log-format json > steps.json 2> stderr.txt &
L=$!
while kill -0 $L 2>/dev/null; do
  a=$(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo)
  pids=$(pgrep -g $L -f "onnxtrain train")
  rss=$(for p in $pids; do awk '/VmRSS/ {print int($2/1024)}' /proc/$p/status 2>/dev/null; done | tr '\n' ' ')
  anon=$(for p in $pids; do awk '/RssAnon/ {print int($2/1024)}' /proc/$p/status 2>/dev/null; done | tr '\n' ' ')
  tot=0; for x in $anon; do tot=$((tot+x)); done
  echo "$(date -u +%H:%M:%S) avail $a MiB rss $rss anon $anon total-anon $tot load $(cut -d' ' -f1 /proc/loadavg)" >> mem.log
  if [ "$a" -lt 900 ] || [ "$tot" -gt "$LIMIT_MIB" ]; then
    echo "watchdog: available $a MiB, workers $tot MiB: stopping" >> mem.log
    kill -TERM -- -$L; sleep 2; kill -TERM -- -$L
  fi
  sleep 5
done
wait $L
echo "rc $? end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> info.txt
