#!/usr/bin/env bash
# Block selection on a real one-node Slurm cluster (slurmctld + slurmd + munged on this machine),
# compared row for row with the local executor. Run as root from the repository root:
#   bash tests/slurm/select_on_slurm.sh [--install]
# --install first installs Debian's slurm-wlm and munge with apt-get. The cluster lives in a
# network namespace of its own (loopback only: nothing outside can reach it, nor it anything) and
# a PID namespace whose end takes every daemon and job with it; its files are under $SLURM_WORK
# (default: a temporary folder, removed at the end). Exit status 0 only when the selections match.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
ACTIVATE=$(dirname "$PY")/activate  # what the Slurm jobs source: the same environment
WAIT_S=${SLURM_WAIT_S:-300}

if [[ ${1:-} == --install ]]; then
    shift
    if ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            slurm-wlm munge iproute2
    fi
fi
for tool in slurmctld slurmd sbatch squeue munged unshare ip; do
    command -v "$tool" > /dev/null || { echo "select_on_slurm: no $tool (run with --install)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "select_on_slurm: run as root (daemons, namespaces)" >&2; exit 2; }

# Into the namespaces: lo only, and this script as PID 1 there (its end kills everything left).
if [[ -z ${SELECT_ON_SLURM_INSIDE:-} ]]; then
    SELECT_ON_SLURM_INSIDE=1 exec unshare --net --pid --fork --mount-proc --kill-child \
        bash "$0" "$@"
fi
ip link set lo up
# Slurm binds with getaddrinfo(AI_ADDRCONFIG), which finds no address family while 127.0.0.1 is
# the only address: give lo one more (still this namespace's loopback device, no way out).
ip addr add 10.254.0.1/32 dev lo

WORK=${SLURM_WORK:-$(mktemp -d /tmp/slurm-XXXXXX)}
mkdir -p "$WORK"/{ctld,spool,log}
NODE=$(hostname -s)
MEMORY_MB=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
DAEMONS=()

stop_cluster() {
    local status=$?
    squeue -h -o %i 2> /dev/null | xargs -r scancel 2> /dev/null || true
    for pid in "${DAEMONS[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
    for pid in "${DAEMONS[@]}"; do wait "$pid" 2> /dev/null || true; done
    if (( status != 0 )); then
        echo "--- slurmctld.log (tail)"; tail -n 20 "$WORK/log/slurmctld.log" 2> /dev/null || true
        echo "--- slurmd.log (tail)"; tail -n 20 "$WORK/log/slurmd.log" 2> /dev/null || true
    fi
    [[ -n ${SLURM_WORK:-} ]] || rm -rf "$WORK"
    echo "select_on_slurm: cluster stopped"
}
trap stop_cluster EXIT

# munge with a key and socket of its own (the system's /etc/munge is left alone)
dd if=/dev/urandom of="$WORK/munge.key" bs=1024 count=1 status=none
chmod 600 "$WORK/munge.key"
munged --foreground --force --key-file="$WORK/munge.key" --socket="$WORK/munge.sock" \
    --pid-file="$WORK/munged.pid" --log-file="$WORK/log/munged.log" \
    --seed-file="$WORK/munge.seed" > "$WORK/log/munged.out" 2>&1 &
DAEMONS+=($!)

export SLURM_CONF=$WORK/slurm.conf
cat > "$SLURM_CONF" <<EOF
ClusterName=datamask
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$WORK/munge.sock
StateSaveLocation=$WORK/ctld
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 RealMemory=$MEMORY_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
echo "select_on_slurm: $NODE, 2 CPUs, ${MEMORY_MB} MB, loopback only; files in $WORK"

for _ in $(seq 50); do [[ -S $WORK/munge.sock ]] && break; sleep 0.2; done
slurmctld -D -i -f "$SLURM_CONF" > "$WORK/log/slurmctld.out" 2>&1 &
DAEMONS+=($!)
slurmd -D -f "$SLURM_CONF" > "$WORK/log/slurmd.out" 2>&1 &
DAEMONS+=($!)
deadline=$((SECONDS + 60))
until sinfo -h -o %t 2> /dev/null | grep -qE '^(idle|mix|alloc)'; do
    (( SECONDS < deadline )) || { echo "select_on_slurm: the node never came up"; sinfo || true; exit 1; }
    sleep 1
done
sinfo

# A small prepared set (two shards, 2,400 rows: four blocks), the local executor's selection,
# then the same through Slurm: the blocks as a job array, the merge as a job after them.
DATA=$WORK/data
METHOD=facility-greedy
"$PY" - "$DATA/prepared" <<'EOF'
import sys
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, "tests")
from conftest import gaussian_data, write_shard

folder = Path(sys.argv[1])
folder.mkdir(parents=True)
for shard in range(2):
    data = gaussian_data(1200, 16, seed=shard)
    data.ids[:] += shard * 1200
    write_shard(folder / f"{shard:05d}.parquet", data, id=pa.array([f"doc-{i}" for i in data.ids]))
EOF
FLAGS=(--input "$DATA/prepared" --method "$METHOD" --select_ratio 0.25 --block_size 600)
"$PY" -m reproduce select "${FLAGS[@]}" --output "$DATA/local" > "$WORK/log/local.log" 2>&1
"$PY" -m reproduce select "${FLAGS[@]}" --output "$DATA/slurm" --executor slurm \
    --slurm_partition debug --slurm_time 00:10:00 --cpus_per_task 1 --mem_per_cpu_gb 0.5 \
    --workers 2 --venv_path "$ACTIVATE" 2> "$WORK/log/submit.log" \
    | tee "$WORK/submitted.json"
squeue -o "%.5i %.16j %.8T %.20E"  # the merge waits on the blocks' array (afterok)

deadline=$((SECONDS + WAIT_S))
while [[ -n $(squeue -h -o %i) ]]; do
    if squeue -h -o %r | grep -q DependencyNeverSatisfied; then
        echo "select_on_slurm: a block job failed; the merge can never run"; squeue; exit 1
    fi
    (( SECONDS < deadline )) || { echo "select_on_slurm: jobs still queued after ${WAIT_S} s"; squeue; exit 1; }
    sleep 2
done
echo "select_on_slurm: queue empty after $SECONDS s"
for log in "$DATA"/slurm/logs/*/slurm/*.out; do echo "--- ${log#"$DATA"/}"; tail -n 3 "$log"; done

"$PY" - "$DATA" <<'EOF'
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

data = Path(sys.argv[1])
summary = data / "slurm" / "summary.json"
if not summary.exists():
    sys.exit("select_on_slurm: the merge job wrote no summary.json (see the Slurm logs above)")
local = pq.read_table(data / "local" / "selection.parquet")
slurm = pq.read_table(data / "slurm" / "selection.parquet")
done = sorted(p.name for p in (data / "slurm" / "logs" / "blocks" / "completions").iterdir())
print(json.dumps({k: v for k, v in json.loads(summary.read_text()).items()
                  if k in ("executor", "rows", "selected", "blocks", "stage_wall_s")}))
print(f"completed block tasks: {done}")
if not slurm.equals(local):
    sys.exit(f"select_on_slurm: Slurm's selection differs from the local executor's "
             f"({slurm.num_rows} vs {local.num_rows} rows)")
print(f"select_on_slurm: Slurm's selection equals the local executor's, row for row "
      f"({slurm.num_rows} rows, {sum(slurm.column('selected').to_pylist())} selected)")
EOF
