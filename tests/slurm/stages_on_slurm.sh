#!/usr/bin/env bash
# The data stages on a real one-node Slurm cluster (slurmctld + slurmd + munged on this machine),
# each compared with the local executor: select's blocks (row for row), then the whole chain on
# BBC FineWeb shards, prepare -> dedup -> select -> tokenize -> export, each stage a job array and
# a merge job after it (prepared ids and quality exactly, embeddings to 1e-5; the keep-list and the
# selection row for row; the token files and the exported Parquet files byte for byte).
# Prepare's second task is killed mid-task on Slurm (SIGKILL): its job
# fails, the merge behind it is cancelled, no process is left, and the rerun submits that task
# alone. Run as root from the repository root:
#   bash tests/slurm/stages_on_slurm.sh
# (`make install-slurm` installs Debian's slurm-wlm and munge with apt-get). The cluster lives in a
# network namespace of its own (loopback only: nothing outside can reach it, nor it anything) and
# a PID namespace whose end takes every daemon and job with it; its files are under $SLURM_WORK
# (default: a temporary folder, removed at the end). Exit status 0 only when every output matches.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
ACTIVATE=$(dirname "$PY")/activate  # what the Slurm jobs source: the same environment
WAIT_S=${SLURM_WAIT_S:-300}

for tool in slurmctld slurmd sbatch squeue munged unshare ip; do
    command -v "$tool" > /dev/null || { echo "stages_on_slurm: no $tool (make install-slurm)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "stages_on_slurm: run as root (daemons, namespaces)" >&2; exit 2; }

# Into the namespaces: lo only, and this script as PID 1 there (its end kills everything left).
if [[ -z ${STAGES_ON_SLURM_INSIDE:-} ]]; then
    STAGES_ON_SLURM_INSIDE=1 exec unshare --net --pid --fork --mount-proc --kill-child \
        bash "$0" "$@"
fi
ip link set lo up
# Slurm binds with getaddrinfo(AI_ADDRCONFIG), which finds no address family while 127.0.0.1 is
# the only address: give lo one more (still this namespace's loopback device, no way out).
ip addr add 10.254.0.1/32 dev lo
# slurmd reads the submitting user's login environment for every job it starts (`su - root`:
# datatrove submits with --export=ALL,RUN_OFFSET=0, which sets SLURM_GET_USER_ENV), and the job's
# own environment, exported whole, then overrides it. Inside this namespace's mounts that login
# reads an empty ~/.bashrc: where root's starts pyenv (about 150 processes a job on the machine
# this was measured on), each job waited on it (the script: 137 s alone, 127 s without).
if [[ -f ~root/.bashrc ]]; then
    mount --bind /dev/null ~root/.bashrc || echo "stages_on_slurm: ~root/.bashrc left as it is"
fi

WORK=${SLURM_WORK:-$(mktemp -d /tmp/slurm-XXXXXX)}
mkdir -p "$WORK"/{ctld,spool,log}
NODE=$(hostname -s)
MEMORY_MB=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
DAEMONS=()

stop_cluster() {
    local status=$?
    squeue -h -o %F 2> /dev/null | sort -u | xargs -r scancel 2> /dev/null || true
    for pid in "${DAEMONS[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
    for pid in "${DAEMONS[@]}"; do wait "$pid" 2> /dev/null || true; done
    if (( status != 0 )); then
        echo "--- slurmctld.log (tail)"; tail -n 20 "$WORK/log/slurmctld.log" 2> /dev/null || true
        echo "--- slurmd.log (tail)"; tail -n 20 "$WORK/log/slurmd.log" 2> /dev/null || true
    fi
    [[ -n ${SLURM_WORK:-} ]] || rm -rf "$WORK"
    echo "stages_on_slurm: cluster stopped"
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
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 RealMemory=$MEMORY_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
echo "stages_on_slurm: $NODE, 2 CPUs, ${MEMORY_MB} MB, loopback only; files in $WORK"

for _ in $(seq 50); do [[ -S $WORK/munge.sock ]] && break; sleep 0.2; done
slurmctld -D -i -f "$SLURM_CONF" > "$WORK/log/slurmctld.out" 2>&1 &
DAEMONS+=($!)
slurmd -D -f "$SLURM_CONF" > "$WORK/log/slurmd.out" 2>&1 &
DAEMONS+=($!)
deadline=$((SECONDS + 60))
until sinfo -h -o %t 2> /dev/null | grep -qE '^(idle|mix|alloc)'; do
    (( SECONDS < deadline )) || { echo "stages_on_slurm: the node never came up"; sinfo || true; exit 1; }
    sleep 0.2
done
sinfo

SLURM_FLAGS=(--executor slurm --slurm_partition debug --slurm_time 00:10:00 --cpus_per_task 1
             --venv_path "$ACTIVATE")

# Wait until Slurm's queue is empty (every task and merge job done); fail when a job failed (its
# dependants can then never run) or after $WAIT_S seconds. Polled often: each stage waits here.
wait_for_jobs() {
    squeue -o "%.5i %.22j %.8T %.20E"  # a merge waits on its tasks' array (afterok)
    local deadline=$((SECONDS + WAIT_S))
    while [[ -n $(squeue -h -o %i) ]]; do
        if squeue -h -o %r | grep -q DependencyNeverSatisfied; then
            echo "stages_on_slurm: a task job failed; the merge can never run"; squeue; exit 1
        fi
        (( SECONDS < deadline )) || { echo "stages_on_slurm: jobs still queued after ${WAIT_S} s"; squeue; exit 1; }
        sleep 0.3
    done
    echo "stages_on_slurm: queue empty after $SECONDS s"
}

# A small prepared set (two shards, 2,400 rows: four blocks of 600), selected below with the
# merge round, by the local executor and through Slurm.
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
# A partition the controller does not list is refused before any work, naming it.
if refused=$("$PY" -m reproduce select --input "$DATA/prepared" --output "$WORK/refused" \
        --method random "${SLURM_FLAGS[@]}" --slurm_partition nosuch 2>&1); then
    echo "stages_on_slurm: accepted a missing partition"; exit 1
fi
[[ $refused == *"--slurm_partition nosuch: no such partition (sinfo lists debug)"* && ! -e $WORK/refused ]] \
    || { echo "stages_on_slurm: a missing partition: $refused"; exit 1; }
echo "stages_on_slurm: a missing partition is refused before any work: ${refused##*error: }"

# The processes (in this PID namespace) with an open file whose path matches the pattern $1, one
# pid a line: one find over every process's descriptors, not two processes started per pid (the
# kill below polls this ten times a second).
opening() {
    find /proc/[0-9]*/fd -maxdepth 1 -lname "$1" -printf '%h\n' 2> /dev/null \
        | sed 's|^/proc/\([0-9]*\)/fd$|\1|' | sort -u
}

# The processes that have a file under $1 open, or run in it.
holding() {
    local pid
    for pid in $({ opening "$1/*"
                   find /proc/[0-9]*/cwd -maxdepth 0 -lname "$1*" -printf '%h\n' 2> /dev/null \
                       | sed 's|^/proc/||'; } | sort -u); do
        echo "$pid $(tr '\0' ' ' < "/proc/$pid/cmdline" 2> /dev/null | cut -c1-100)"
    done
    return 0
}

# Kill (SIGKILL, like the OOM killer) the process running task $2 of the stage writing to $1 as
# soon as it has opened its datatrove log, before its output and completion marker; then wait
# until the tasks' job array $3 has ended, the merge left waiting on it for good, and cancel that.
# $4: the round's log folder under logs/ (tasks unless given).
kill_task_then_wait() {
    local out=$1 rank=$2 tasks_job=$3 unit=${4:-tasks} log victim=""
    log="$1/logs/$unit/logs/task_$(printf %05d "$rank").log"
    local deadline=$((SECONDS + WAIT_S))
    until victim=$(opening "$log" | tr '\n' ' '); [[ -n $victim ]]; do
        (( SECONDS < deadline )) || { echo "stages_on_slurm: task $rank never started"; squeue; exit 1; }
        sleep 0.1
    done
    [[ ! -e $out/logs/$unit/completions/$(printf %05d "$rank") ]] \
        || { echo "stages_on_slurm: task $rank finished before the kill"; exit 1; }
    echo "stages_on_slurm: killing task $rank of $out mid-task (pid $victim)"
    kill -KILL $victim
    deadline=$((SECONDS + WAIT_S))
    while [[ -n $(squeue -h -j "$tasks_job" -o %i 2> /dev/null) ]]; do
        (( SECONDS < deadline )) || { echo "stages_on_slurm: the killed task's job never ended"; squeue; exit 1; }
        sleep 0.3
    done
    until squeue -h -o %r | grep -q DependencyNeverSatisfied; do  # the scheduler's next pass
        (( SECONDS < deadline )) || { echo "stages_on_slurm: nothing waits on the failed task"; squeue; exit 1; }
        sleep 0.3
    done
    squeue -o "%.5i %.22j %.8T %.20E %r"
    echo "stages_on_slurm: the merge waits on the failed task for good; cancelling it"
    squeue -h -o %F | sort -u | xargs -r scancel
    while [[ -n $(squeue -h -o %i) ]]; do sleep 0.3; done
}

# After the kill: task 0's shard and marker, nothing of task 1 under a finished name, no
# prepare.json, and no process of the stage left behind.
check_killed_prepare() {
    local out=$1 left
    ls "$out"
    [[ -e $out/logs/tasks/completions/00000 && ! -e $out/logs/tasks/completions/00001 ]] \
        || { echo "stages_on_slurm: after the kill, expected task 0's marker alone"; exit 1; }
    [[ ! -e $out/prepare.json ]] || { echo "stages_on_slurm: prepare.json after a killed task"; exit 1; }
    [[ $(ls "$out"/*.parquet | wc -l) == 1 ]] \
        || { echo "stages_on_slurm: after the kill, expected task 0's shard alone"; exit 1; }
    sleep 2  # slurmstepd reaps what the task left
    left=$(holding "$out")
    [[ -z $left ]] || { echo "stages_on_slurm: processes left behind: $left"; exit 1; }
    TASK0_SHARD=$(ls "$out"/*.parquet)
    TASK0_MTIME=$(stat -c %y "$TASK0_SHARD")
    echo "stages_on_slurm: after the kill, task 0's shard alone and no process left behind"
}

# select in four neighbourhood blocks with its merge round, locally and through Slurm: the
# scatter, the blocks, the planning task, the union's parts and the merge as five jobs, each after
# the one before. The union's part 1 is killed mid-task; the rerun submits it alone (and the
# merge), and the selection equals the local executor's row for row.
FLAGS=(--input "$DATA/prepared" --method "$METHOD" --select_ratio 0.25 --block_size 600
       --partition neighbourhood)
MERGE=(--merge_ratio 0.9 --merge_rows 1100)
# the local executor's run goes on beside the Slurm one (whose wait is mostly the scheduler's)
"$PY" -m reproduce select "${FLAGS[@]}" "${MERGE[@]}" --output "$DATA/local-merge" \
    > "$WORK/log/local-merge.log" 2>&1 &
LOCAL_MERGE=$!
for run in first rerun; do
    "$PY" -m reproduce select "${FLAGS[@]}" "${MERGE[@]}" --output "$DATA/slurm-merge" \
        "${SLURM_FLAGS[@]}" --mem_per_cpu_gb 0.5 --workers 2 > "$WORK/log/merge.$run.json" \
        2> "$WORK/log/merge.$run.log"
    cat "$WORK/log/merge.$run.json"
    [[ $run == rerun ]] && break
    kill_task_then_wait "$DATA/slurm-merge" 1 "$("$PY" -c 'import json, sys
print(json.load(sys.stdin)["unions_job"])' < "$WORK/log/merge.$run.json")" unions
    sleep 2  # slurmstepd reaps what the task left
    left=$(holding "$DATA/slurm-merge")
    [[ -z $left ]] || { echo "stages_on_slurm: processes left behind: $left"; exit 1; }
done
grep -o "Launching Slurm job datamask-select-unions ([0-9]* tasks)" "$WORK/log/merge.rerun.log"
wait_for_jobs
wait "$LOCAL_MERGE" || { echo "stages_on_slurm: the local merge round failed"; tail "$WORK/log/local-merge.log"; exit 1; }
"$PY" - "$DATA" <<'EOF'
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

data = Path(sys.argv[1])
summary = data / "slurm-merge" / "summary.json"
if not summary.exists():
    sys.exit("stages_on_slurm: the merge round's last job wrote no summary.json")
local = pq.read_table(data / "local-merge" / "selection.parquet")
slurm = pq.read_table(data / "slurm-merge" / "selection.parquet")
if not slurm.equals(local):
    sys.exit("stages_on_slurm: the merge round's selection on Slurm differs from the local one")
print(f"stages_on_slurm: the merge round on Slurm, part 1 killed and rerun, equals the local "
      f"executor's row for row ({json.loads(summary.read_text())['unions']} parts)")
EOF

# The whole chain on BBC FineWeb shards (one article copied into the other shard under a new id),
# locally and through Slurm, stage after stage: prepare (two tasks, a shard each, then
# prepare.json's merge; with the suite's small static model, conftest's SMALL_STATIC, so that no
# task nor submitting process imports sentence-transformers), dedup (MinHash's rounds and the
# embedding step's, then the keep-list), select (two blocks), tokenize (two ranks, then
# datatrove's merge, leaving out what the keep-list removes). Every Slurm stage returns at
# submission; the next one starts once the queue is empty. The static model is distilled here
# unless $SMALL_STATIC_MODEL names the folder the suite distilled it into.
CHAIN=$WORK/chain
STATIC=${SMALL_STATIC_MODEL:-$CHAIN/static}
"$PY" - "$CHAIN" "$STATIC" <<'EOF'
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, "tests")
from conftest import distil_small_static
from reproduce.pipeline.bbc import write_bbc_fineweb
from reproduce.pipeline.tokenize import train_tokenizer

chain, static = Path(sys.argv[1]), Path(sys.argv[2])
if not static.is_dir():
    distil_small_static(static)
write_bbc_fineweb(chain / "fineweb", chain / "tasks", n_shards=2, limit=60, seed=1)
first, second = sorted((chain / "fineweb").glob("*.parquet"))
copy = pq.read_table(second).slice(0, 1)
copy = copy.set_column(copy.schema.get_field_index("id"), "id", pa.array(["planted-copy"]))
pq.write_table(pa.concat_tables([pq.read_table(first), copy]), first)
train_tokenizer([str(chain / "fineweb")], chain / "tokenizer.json", vocab_size=300)
EOF
PREPARE=(prepare --input "$CHAIN/fineweb" --embedding_model "static:$STATIC"
         --max_seq_length 32 --quality heuristic --no_progress --tasks 2)
# two LSH bands instead of FineWeb's 14: every MinHash round still runs (the buckets round as a
# job array of two), and the planted copy, an exact one, shares every band
DEDUP=(dedup --input "$CHAIN/fineweb" --tasks 2 --num_buckets 2)
SELECT=(select --method quality-topk --select_ratio 0.5 --block_size 25)
TOKENIZE=(tokenize --input "$CHAIN/fineweb" --tokenizer "$CHAIN/tokenizer.json" --tasks 2)
EXPORT=(export --input "$CHAIN/fineweb" --tasks 2 --shard_mb 0.004 --row_group_rows 3)
# The stages after prepare on run $1's files (local or slurm), each with its --output.
after_prepare() {
    local run=$1
    DEDUP_STAGE=("${DEDUP[@]}" --prepared "$CHAIN/$run/prepared" --output "$CHAIN/$run/dedup")
    SELECT_STAGE=("${SELECT[@]}" --input "$CHAIN/$run/prepared" --output "$CHAIN/$run/select")
    TOKENIZE_STAGE=("${TOKENIZE[@]}" --selection "$CHAIN/$run/select/selection.parquet"
                    --keep "$CHAIN/$run/dedup" --output "$CHAIN/$run/tokens")
    EXPORT_STAGE=("${EXPORT[@]}" --selection "$CHAIN/$run/select" --prepared "$CHAIN/$run/prepared"
                  --keep "$CHAIN/$run/dedup" --output "$CHAIN/$run/export")
}

# the local executor's chain, its four stages in turn in one process (apart by a lone `+`:
# torch, spaCy and the rest imported once), goes on beside Slurm's, compared once both are done
after_prepare local
"$PY" -m reproduce "${PREPARE[@]}" --output "$CHAIN/local/prepared" + "${DEDUP_STAGE[@]}" \
    + "${SELECT_STAGE[@]}" + "${TOKENIZE_STAGE[@]}" + "${EXPORT_STAGE[@]}" \
    > "$WORK/log/chain.local.log" 2>&1 &
LOCAL_CHAIN=$!
"$PY" -m reproduce "${PREPARE[@]}" --output "$CHAIN/slurm/prepared" "${SLURM_FLAGS[@]}" \
    --mem_per_cpu_gb 2 --workers 2 > "$WORK/log/prepare.slurm.json" 2> "$WORK/log/prepare.slurm.log"
cat "$WORK/log/prepare.slurm.json"
kill_task_then_wait "$CHAIN/slurm/prepared" 1 \
    "$(sed -n 's/.*"tasks_job": "\([0-9]*\)".*/\1/p' "$WORK/log/prepare.slurm.json")"
check_killed_prepare "$CHAIN/slurm/prepared"
# the rerun submits the killed task alone, then the merge behind it
"$PY" -m reproduce "${PREPARE[@]}" --output "$CHAIN/slurm/prepared" "${SLURM_FLAGS[@]}" \
    --mem_per_cpu_gb 2 --workers 2 > "$WORK/log/prepare.rerun.json" 2> "$WORK/log/prepare.rerun.log"
grep -o "Launching Slurm job datamask-prepare ([0-9]* tasks)" "$WORK/log/prepare.rerun.log"
wait_for_jobs
[[ $(stat -c %y "$TASK0_SHARD") == "$TASK0_MTIME" ]] \
    || { echo "stages_on_slurm: the rerun rewrote task 0's finished shard"; exit 1; }
echo "stages_on_slurm: the rerun left task 0's shard as it was"
# on Slurm, each stage once the one before has left the queue
on_slurm() {
    "$PY" -m reproduce "$@" "${SLURM_FLAGS[@]}" --mem_per_cpu_gb 2 --workers 2 \
        >> "$WORK/log/chain.slurm.json" 2>> "$WORK/log/chain.slurm.log"
    wait_for_jobs
}
after_prepare slurm
on_slurm "${DEDUP_STAGE[@]}"
on_slurm "${SELECT_STAGE[@]}"
on_slurm "${TOKENIZE_STAGE[@]}"
on_slurm "${EXPORT_STAGE[@]}"
wait "$LOCAL_CHAIN" || { echo "stages_on_slurm: the local chain failed"; tail "$WORK/log/chain.local.log"; exit 1; }
for log in "$CHAIN"/slurm/*/logs/*/slurm/*.out; do echo "--- ${log#"$CHAIN"/}"; tail -n 2 "$log"; done

"$PY" - "$CHAIN" <<'EOF'
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from datamask.data import read_dataset

chain = Path(sys.argv[1])
local, slurm = chain / "local", chain / "slurm"
for stage, done in (("prepared", "prepare.json"), ("dedup", "manifest.json"),
                    ("select", "summary.json"), ("tokens", "summary.json"),
                    ("export", "summary.json")):
    if not (slurm / stage / done).exists():
        sys.exit(f"stages_on_slurm: no {stage}/{done}: a merge job did not run (see its log)")
shards = sorted(p.name for p in (local / "prepared").glob("*.parquet"))
if sorted(p.name for p in (slurm / "prepared").glob("*.parquet")) != shards:
    sys.exit("stages_on_slurm: Slurm's prepare wrote other shards than the local executor")
for name in shards:
    ours, theirs = pq.read_table(slurm / "prepared" / name), pq.read_table(local / "prepared" / name)
    for column in ("id", "chunk_id", "quality_score"):
        if not ours.column(column).equals(theirs.column(column)):
            sys.exit(f"stages_on_slurm: prepared {name}: column {column} differs from local")
    gap = np.abs(read_dataset([slurm / "prepared" / name]).features
                 - read_dataset([local / "prepared" / name]).features).max()
    if gap > 1e-5:
        sys.exit(f"stages_on_slurm: prepared {name}: embeddings {gap:.2e} from local's")
records = json.loads((slurm / "prepared" / "prepare.json").read_text())["files"]
embedded = [records[name]["embedded"] for name in shards]
if embedded[0] != 0 or embedded[1] != records[shards[1]]["rows"]:
    sys.exit(f"stages_on_slurm: the rerun should embed the killed task's shard alone, "
             f"embedded {embedded}")
print(f"stages_on_slurm: Slurm's prepared shards equal the local executor's "
      f"({ {name: r['rows'] for name, r in records.items()} } rows; the rerun embedded "
      f"{embedded})")
for name in ("keep.parquet", "removals.parquet"):
    if not pq.read_table(slurm / "dedup" / name).equals(pq.read_table(local / "dedup" / name)):
        sys.exit(f"stages_on_slurm: Slurm's dedup {name} differs from the local executor's")
removals = pq.read_table(slurm / "dedup" / "removals.parquet").to_pylist()
if not any("planted-copy" in (r["id"], r["duplicates"]) and r["reason"] == "minhash"
           for r in removals):
    sys.exit(f"stages_on_slurm: dedup on Slurm did not remove the planted copy ({removals})")
print(f"stages_on_slurm: Slurm's keep-list equals the local executor's, row for row "
      f"({len(removals)} removed, the planted copy among them)")
if not pq.read_table(slurm / "select" / "selection.parquet").equals(
        pq.read_table(local / "select" / "selection.parquet")):
    sys.exit("stages_on_slurm: the chain's selection on Slurm differs from the local one")
print("stages_on_slurm: the chain's selection on Slurm equals the local one, row for row")
tokens = {p.name: p.read_bytes() for p in sorted((local / "tokens").glob("*.ds*"))}
if not tokens or {p.name: p.read_bytes()
                  for p in sorted((slurm / "tokens").glob("*.ds*"))} != tokens:
    sys.exit("stages_on_slurm: Slurm's token files differ from the local executor's")
summary = json.loads((slurm / "tokens" / "summary.json").read_text())
print(f"stages_on_slurm: Slurm's token files equal the local executor's, byte for byte "
      f"({summary['documents']} documents, {summary['tokens']} tokens in {sorted(tokens)})")


def exported(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.glob("train/*/*.parquet"))}


files = exported(local / "export")
if len(files) < 2 or exported(slurm / "export") != files:
    sys.exit("stages_on_slurm: Slurm's exported Parquet files differ from the local executor's")
summary = json.loads((slurm / "export" / "summary.json").read_text())
if not (slurm / "export" / "README.md").is_file():
    sys.exit("stages_on_slurm: the export on Slurm wrote no dataset card (README.md)")
print(f"stages_on_slurm: Slurm's exported Parquet files equal the local executor's, byte for "
      f"byte ({summary['counts']} in {len(files)} files)")
EOF
