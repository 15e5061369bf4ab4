#!/usr/bin/env bash
# A real one-node Slurm (issue 17, done-when 4): slurmctld and slurmd on localhost with a generated
# slurm.conf, started by this test and stopped on any exit (jobs cancelled first). Then:
#   1. docs/cluster.md's commands, as written (test/docs/run_doc_commands.py --mpi --slurm): the dp=2
#      plan, the mpirun --hostfile run, and the two sbatch jobs (srun --mpi=pmix; mpirun inside
#      the allocation)
#   2. both jobs' losses (slurm.jsonl, slurm_mpirun.jsonl) equal to the mpirun run's (mpirun.jsonl):
#      20 steps, 1e-5 relative
#   3. a job whose rank dies: an sbatch job of the same plan (srun --mpi=pmix, a million steps),
#      rank 1 killed with SIGKILL once rank 0 has written a metrics line; the job must end within
#      60 s, with a non-zero status, its output naming task 1, and no rank left running
#
#   slurm_test.sh BUILD_DIR SOURCE_DIR WORKDIR
#
# Auth: auth/none and cred/none (one node, root only; no munge daemon needed). Ports: two free ones,
# so that clusters of concurrent runs do not meet. Logs: WORKDIR/cluster/*.log.
set -euo pipefail
BUILD="$(cd "$1" && pwd)" SRC="$(cd "$2" && pwd)" W="$3"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
C="$W/cluster"
fail() { echo "FAIL: $*"; exit 1; }
export SLURM_CONF="$C/slurm.conf"
CTLD_PID="" SLURMD_PID=""
stop_cluster() {
  if [ -n "$CTLD_PID" ] && kill -0 "$CTLD_PID" 2>/dev/null; then
    scancel --full --quiet --user=root 2>/dev/null || true
    for _ in $(seq 60); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  local pid
  for pid in $SLURMD_PID $CTLD_PID; do
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  done
  [ -z "${MARKER:-}" ] || kill_marked
}
marked_ranks() {  # colossal-run processes of the kill job (the marker; and $1, e.g. SLURM_PROCID=1)
  local p env
  for p in $(pgrep -f -- "--metrics kill.jsonl" || true); do
    [ "$(basename "$(readlink "/proc/$p/exe" 2>/dev/null)")" = colossal-run ] || continue
    env=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null) || continue
    grep -qx "$MARKER" <<< "$env" && grep -qx "${1:-$MARKER}" <<< "$env" && echo "$p"
  done
  return 0
}
kill_marked() {  # ranks of the kill job, should any have outlived it
  local p
  for p in $(marked_ranks); do kill -9 "$p" 2>/dev/null || true; done
}
trap stop_cluster EXIT
trap 'exit 143' TERM INT
# Daemons of an earlier run of this test that was killed before its cleanup (ctest's timeout).
for f in "$C/slurmd.pid" "$C/slurmctld.pid"; do
  pid=$(cat "$f" 2>/dev/null || true)
  [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$SLURM_CONF" && kill -9 "$pid" || true
done
rm -rf "$W"
mkdir -p "$C/state" "$C/spool"

read -r CTLD_PORT SLURMD_PORT < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
NODE="$(hostname -s)"
CPUS="$(nproc)"
cat > "$SLURM_CONF" <<CONF
# One node on localhost, written by test/install/slurm_test.sh.
ClusterName=colossaltest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$C/state
SlurmdSpoolDir=$C/spool
SlurmctldPidFile=$C/slurmctld.pid
SlurmdPidFile=$C/slurmd.pid
SlurmctldLogFile=$C/slurmctld.log
SlurmdLogFile=$C/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
echo "== slurmctld and slurmd on $NODE (ports $CTLD_PORT, $SLURMD_PORT; $SLURM_CONF)"
slurmctld -D -i -f "$SLURM_CONF" > "$C/slurmctld.out" 2>&1 &
CTLD_PID=$!
slurmd -D -f "$SLURM_CONF" > "$C/slurmd.out" 2>&1 &
SLURMD_PID=$!
up=""
for _ in $(seq 60); do
  state=$(sinfo -h -o %t 2>/dev/null || true)
  [ "$state" = idle ] && { up=1; break; }
  sleep 0.5
done
[ -n "$up" ] || { tail -20 "$C"/slurmctld.out "$C"/slurmd.out; fail "the node did not become idle within 30 s (sinfo: '${state:-}')"; }
sinfo

echo "== docs/cluster.md's commands (run_doc_commands.py --mpi --slurm)"
/usr/bin/python3 "$SRC/test/docs/run_doc_commands.py" --source "$SRC" --build "$BUILD" --workdir "$W/docs" \
  --mpi --slurm docs/cluster.md || fail "docs/cluster.md's commands"
D="$W/docs/docs_cluster"
cd "$D"
echo "== the Slurm jobs' losses against the mpirun run's"
/usr/bin/python3 "$HERE/compare_losses.py" slurm.jsonl mpirun.jsonl --steps 20 || fail "srun job's losses"
/usr/bin/python3 "$HERE/compare_losses.py" slurm_mpirun.jsonl mpirun.jsonl --steps 20 || fail "mpirun-in-allocation job's losses"

echo "== a job whose rank dies"
MARKER="COLOSSAL_SLURM_KILL_TEST=$$.$(date +%s%N)"
export "${MARKER%%=*}=${MARKER#*=}"
cat > kill.sbatch <<'JOB'
#!/bin/bash
#SBATCH --job-name=colossal-kill
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --output=%x-%j.out
set -euo pipefail
srun --mpi=pmix build/bin/colossal-run gpt/dp2.cplan train --data data/train.bin --token-dtype uint8 \
    --steps 1000000 --threads 1 --metrics kill.jsonl
JOB
rm -f kill.jsonl
sbatch --wait --parsable kill.sbatch > kill.submit 2>&1 &
WAIT_PID=$!
victim=""
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
  if [ -s kill.jsonl ]; then
    victim=$(marked_ranks SLURM_PROCID=1 | head -1)
    [ -n "$victim" ] && break
  fi
  kill -0 "$WAIT_PID" 2>/dev/null || break
  sleep 0.1
done
[ -n "$victim" ] || { cat kill.submit colossal-kill-*.out 2>/dev/null; fail "no metrics line or no rank 1 within 60 s"; }
t0=$(date +%s.%N)
kill -9 "$victim"
echo "killed rank 1 (pid $victim) after $(wc -l < kill.jsonl) metrics line(s)"
rc=0
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$WAIT_PID" 2>/dev/null; do sleep 0.1; done
kill -0 "$WAIT_PID" 2>/dev/null && { scancel "$(head -1 kill.submit)" || true; fail "the job did not end within 60 s of the kill"; }
wait "$WAIT_PID" || rc=$?
secs=$(/usr/bin/python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
JOBID=$(head -1 kill.submit)
OUTFILE="colossal-kill-$JOBID.out"
echo "job $JOBID ended ${secs} s after the kill, sbatch --wait exit status $rc; $OUTFILE:"
cat "$OUTFILE"
[ "$rc" != 0 ] || fail "the job's status is 0 after a rank was killed"
grep -Eq "task 1: (Killed|Exited)" "$OUTFILE" || fail "the job's output does not name task 1"
sleep 1
leftover=$(marked_ranks | tr '\n' ' ')
[ -z "$leftover" ] || fail "ranks left running: $leftover"
echo "OK: a one-node Slurm ran docs/cluster.md; the sbatch jobs' losses equal mpirun's; a killed rank ended its job naming task 1"
