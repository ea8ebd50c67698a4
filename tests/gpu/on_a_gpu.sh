#!/usr/bin/env bash
# kiln's gpu suite on a machine with a real NVIDIA GPU, and a record of what the real tools print there.
# Not part of CI (it needs a GPU). Run from the repository root, with the machine's own python3 (>= 3.9,
# standard library only); everything lands under $OUT:
#
#   KILN_GPUS=1 KILN_MODEL=h200 OUT=/tmp/kiln-gpu bash tests/gpu/on_a_gpu.sh
#
# KILN_GPUS and KILN_MODEL are what the machine should have (say them; they are not read from it).
# KILN_BF16_TFLOPS (default 989, an H100/H200 SXM's dense bf16) is what the GEMM burn is judged against
# when PyTorch is there; with PyTorch and CUDA the training example runs through a failure on the GPUs
# (tests/gpu/ddp_through_failure.py) and the workload suite's probe times a step there (and, with two GPUs, an
# all-reduce between them). The recorded outputs belong in tests/recorded/captured/ once looked at.
set -u
OUT=${OUT:-/tmp/kiln-gpu}
GPUS=${KILN_GPUS:-1}
MODEL=${KILN_MODEL:-h200}
TFLOPS=${KILN_BF16_TFLOPS:-989}
mkdir -p "$OUT/tools"
run() {  # name, command...: the command's output and exit code, kept
    local name=$1; shift
    "$@" > "$OUT/tools/$name.txt" 2>&1
    echo "# exit $?" >> "$OUT/tools/$name.txt"
}
uname -a > "$OUT/uname.txt"
python3 --version >> "$OUT/uname.txt" 2>&1
run nvidia-smi nvidia-smi
run nvidia-smi-q nvidia-smi -q
run nvidia-smi-nvlink-s nvidia-smi nvlink -s
run nvidia-smi-remapped nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure --format=csv
run nvidia-smi-topo nvidia-smi topo -m
run dcgmi-diag-r1 dcgmi diag -r 1 -j
run ibstat ibstat
run kernel-nvrm sh -c "journalctl -k --no-pager -o short-iso 2>/dev/null | grep -E 'NVRM|nvidia' | tail -200 || dmesg --time-format iso | grep -E 'NVRM|nvidia' | tail -200"
echo "== gpu suite: $GPUS x $MODEL" | tee "$OUT/summary.txt"
python3 -m checks.here --gpus "$GPUS" --model "$MODEL" --record "$OUT/recorded" | tee -a "$OUT/summary.txt"
python3 -m checks.here --gpus "$GPUS" --model "$MODEL" --json > "$OUT/gpu-suite.json"
if python3 -c "import torch" 2>/dev/null; then
    echo "== with a 10 s bf16 GEMM burn per GPU (expected $TFLOPS TFLOP/s)" | tee -a "$OUT/summary.txt"
    python3 -m checks.here --gpus "$GPUS" --model "$MODEL" --burn 10 --bf16-tflops "$TFLOPS" \
        --record "$OUT/recorded-burn" | tee -a "$OUT/summary.txt"
else
    echo "== no PyTorch for python3 here: no GEMM burn" | tee -a "$OUT/summary.txt"
fi
if python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    echo "== the training example through a failure: $GPUS ranks, NCCL (tests/gpu/ddp_through_failure.py)" | tee -a "$OUT/summary.txt"
    python3 tests/gpu/ddp_through_failure.py --gpus "$GPUS" --out "$OUT/ddp" | tee -a "$OUT/summary.txt"
    echo "== the workload suite's probe on the GPU (checks/workload_step.py), read by its parser" | tee -a "$OUT/summary.txt"
    python3 checks/workload_step.py step --hidden 8192 --batch 1024 --steps 20 > "$OUT/workload-step.txt" 2>&1
    if [ "$GPUS" -ge 2 ]; then  # NCCL: one rank per GPU, the pair's rendezvous on the loopback
        CUDA_VISIBLE_DEVICES=0 python3 checks/workload_step.py allreduce --rank 0 --address 127.0.0.1 --mib 1024 \
            > "$OUT/workload-allreduce.txt" 2>&1 &
        CUDA_VISIBLE_DEVICES=1 python3 checks/workload_step.py allreduce --rank 1 --address 127.0.0.1 --mib 1024 \
            > /dev/null 2>&1
        wait
    fi
    for f in "$OUT"/workload-*.txt; do
        python3 -c "import sys; from checks.parsers.workload import parse_workload; print(sys.argv[1], parse_workload(open(sys.argv[1]).read()))" "$f" 2>&1 | tee -a "$OUT/summary.txt"
    done
else
    echo "== no PyTorch with CUDA for python3 here: no training example" | tee -a "$OUT/summary.txt"
fi
