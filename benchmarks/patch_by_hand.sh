#!/bin/bash
# The rolling patch an operator scripts by hand, one node at a time, for benchmarks/patch.py to time
# beside kiln patch: drain, poll squeue, kiln deploy, scontrol reboot, poll BootTime, resume. No
# journal, no post-patch checks, no bound on nodes out of service. Prints one JSON line per node.
#   patch_by_hand.sh SSH_CONFIG CONTROLLER INVENTORY NODE...
set -euo pipefail
cfg=$1 ctl=$2 inv=$3
shift 3
on() { ssh -F "$cfg" "$ctl" "$@"; }
now() { date +%s.%N; }
boot() { on "scontrol show node $1 -o" | grep -o 'BootTime=[^ ]*'; }
for node in "$@"; do
  t0=$(now)
  on "scontrol update nodename=$node state=drain reason='patch by hand'"
  while [ -n "$(on "squeue -h -w $node")" ]; do sleep 1; done
  t1=$(now)
  $KILN deploy -i "$inv" --limit "$node" --roles nvidia_driver,health >/dev/null
  t2=$(now)
  before=$(boot "$node")
  on "scontrol reboot reason='patch by hand reboot' $node"
  until [ "$(boot "$node")" != "$before" ] && ! on "scontrol show node $node -o" | grep -qE 'State=[^ ]*(REBOOT|NOT_RESPONDING|DOWN)'; do
    sleep 1
  done
  t3=$(now)
  on "scontrol update nodename=$node state=resume"
  t4=$(now)
  python3 -c "import json,sys; t0,t1,t2,t3,t4=map(float,sys.argv[1:]); print(json.dumps({'node':'$node','seconds':round(t4-t0,2),'drain_s':round(t1-t0,2),'patch_s':round(t2-t1,2),'reboot_s':round(t3-t2,2),'overhead_s':round((t4-t0)-(t1-t0)-(t2-t1)-(t3-t2),2)}))" "$t0" "$t1" "$t2" "$t3" "$t4"
done
