#!/bin/bash
# A batch job that survives maintenance: it saves its state when told to, is requeued, and continues
# from that state where it starts again. See docs/checkpointing.md.
#
#   sbatch --requeue --signal=B:USR1@120 --comment=kiln:checkpoint docs/examples/checkpointing-job.sh
#
# Told to checkpoint (SIGUSR1 from `kiln patch --notify USR1`, or from Slurm itself 120 s before the
# time limit with --signal=B:USR1@120), it writes its step to $CHECKPOINT_DIR/<job id>.step on shared
# storage, then waits to be requeued (`kiln patch --requeue` does it after its --grace; without kiln the
# job requeues itself after REQUEUE_AFTER seconds). Started again, it reads that file and goes on.
#SBATCH --job-name=checkpointing-example
#SBATCH --requeue
#SBATCH --comment=kiln:checkpoint
#SBATCH --open-mode=append
#SBATCH --output=checkpointing-example-%j.out
set -u

dir=${CHECKPOINT_DIR:-$HOME/checkpoints}
steps=${STEPS:-3600}                  # the work: this many steps of STEP_SECONDS each
step_seconds=${STEP_SECONDS:-1}
requeue_after=${REQUEUE_AFTER:-300}   # kiln's --grace should be shorter than this
every=${CHECKPOINT_EVERY:-60}         # a periodic checkpoint every this many steps (a node can die unannounced)
state="$dir/${SLURM_JOB_ID:?run me with sbatch}.step"
mkdir -p "$dir"

step=0
if [ -s "$state" ]; then
    step=$(cat "$state")
    echo "$(date -Is) run ${SLURM_RESTART_COUNT:-0} on $(hostname): continuing from step $step"
else
    echo "$(date -Is) run ${SLURM_RESTART_COUNT:-0} on $(hostname): starting at step 0"
fi

save() {  # atomically: a requeue while writing leaves the previous checkpoint
    echo "$step" > "$state.tmp" && mv "$state.tmp" "$state" || return
    # when it was saved, in the job's own comment (kept in accounting): kiln usage counts only the work after
    # it as lost when this run ends by a node failure, a preemption or a requeue
    scontrol update jobid="$SLURM_JOB_ID" comment="kiln:checkpoint kiln:saved=$(date +%s)" 2>/dev/null || true
}

checkpoint() {
    save
    echo "$(date -Is) signal: checkpointed at step $step; waiting to be requeued"
    trap '' USR1   # one checkpoint per run
    sleep "$requeue_after" & wait $!
    echo "$(date -Is) not requeued within ${requeue_after} s: requeueing myself"
    scontrol requeue "$SLURM_JOB_ID"
    sleep 60 & wait $!   # Slurm ends this run now
}
trap checkpoint USR1

while [ "$step" -lt "$steps" ]; do
    sleep "$step_seconds" & wait $!   # a trapped signal is handled at once, not after the sleep
    step=$((step + 1))
    if [ $((step % every)) -eq 0 ]; then save; fi
done
save
echo "$(date -Is) done: $step steps"
